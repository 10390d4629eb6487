"""Text input of the data commands, gzip-compressed or not: gzip (Criteo's own `.gz` files) is recognised by its
magic bytes, whatever the file's name, and decompressed while it is read."""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

GZIP_MAGIC = b"\x1f\x8b"
# What a damaged or truncated gzip stream raises while it is read.
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


@contextmanager
def open_text(
    path: Path, errors: str = "replace", newline: str | None = None
) -> Iterator[tuple[TextIO, Callable[[], int]]]:
    """(text handle, bytes of the file read so far: compressed bytes for gzip, for a progress bar)."""
    with open(path, "rb") as raw:
        compressed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        with io.TextIOWrapper(stream, encoding="utf-8", errors=errors, newline=newline) as text:
            yield text, raw.tell


def head(path: Path, size: int = 1 << 16) -> bytes:
    """The first `size` bytes of the (decompressed) content."""
    with open(path, "rb") as raw:
        if raw.read(2) != GZIP_MAGIC:
            raw.seek(0)
            return raw.read(size)
        raw.seek(0)
        with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
            try:
                return stream.read(size)
            except GZIP_ERRORS:
                return b""
