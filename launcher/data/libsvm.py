"""libsvm text (`label id:value id:value ...`, one pair per field in field order) -> TFRecord.

Every row must carry exactly `field_size` pairs: the seed's converter wrote ragged rows silently, and
a ragged row only fails much later, inside a training job's parse op. Every row is checked (a block of lines at a
time, as arrays) and each bad row is reported with its file and line number. Blank lines are skipped. gzip input
is decompressed as it is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from launcher.data.prepare_codec import parse_libsvm, parse_libsvm_lines
from launcher.data.prepare_encode import crc32c_function, encode_libsvm, frame, gather
from launcher.data.textfile import GZIP_ERRORS, open_text

_BLOCK_CHARS = 1 << 21  # lines parsed and encoded at once: about 4k rows of 39 fields


class DamagedInput(ValueError):
    """An input file that cannot be read to its end (a damaged or truncated gzip stream); the message is one line."""


@dataclass(frozen=True)
class BadRow:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class ConvertReport:
    rows: int = 0  # rows written
    bad: int = 0
    first_bad: list[BadRow] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # records per output file


# One libsvm row -> (label, ids, values), a ValueError with a short reason when it is malformed: the same
# parser the Spark application of `dfm data prepare` runs (standalone there, so it is defined there).
parse_row = parse_libsvm


def _blocks(
    paths: Iterable[Path],
    field_size: int,
    feature_size: int | None,
    report: ConvertReport,
    keep_bad: int,
    on_bytes: Callable[[int], None],
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(labels, ids, values) of the good rows, a block of lines at a time, parsed as arrays (parse_libsvm_lines)."""
    for path in paths:
        with open_text(path) as (handle, position):
            number, done = 0, 0
            while lines := _read_lines(handle, path):
                if not lines[-1].endswith("\n"):
                    lines[-1] += "\n"
                on_bytes(position() - done)
                done = position()
                labels, ids, values, bad = parse_libsvm_lines(lines, field_size, feature_size, ended=True)
                report.bad += len(bad)
                report.first_bad += [
                    BadRow(path, number + index + 1, str(err))
                    for index, err in bad[: max(0, keep_bad - len(report.first_bad))]
                ]
                number += len(lines)
                yield labels, ids, values


def _read_lines(handle, path: Path) -> list[str]:
    try:
        return handle.readlines(_BLOCK_CHARS)
    except GZIP_ERRORS as err:
        raise DamagedInput(f"{path}: damaged gzip data ({err}); check the download (gzip -t {path})") from None


def convert(
    paths: list[Path],
    out_dir: Path,
    field_size: int,
    files: int = 1,
    prefix: str = "part",
    feature_size: int | None = None,
    skip_bad: bool = False,
    keep_bad: int = 5,
    on_bytes: Callable[[int], None] = lambda n: None,
) -> ConvertReport:
    """Convert libsvm files (plain or gzip) into `files` TFRecord files, rows dealt round-robin (counts differ by at
    most one; fewer files than `files` when there are fewer rows, none empty), encoded and framed a block at a time
    with numpy (no TensorFlow). The files are written under hidden temporary names and renamed when complete; with
    bad rows and not `skip_bad`, with no good rows, or on any failure, nothing stays behind. The caller decides how
    to report `report.bad` and `report.rows`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = ConvertReport(outputs=[out_dir / f"{prefix}-{i:05d}.tfrecord" for i in range(files)], counts=[0] * files)
    partial = [path.with_name(f".{path.name}.partial") for path in report.outputs]
    crc32c = crc32c_function()
    handles = [open(path, "wb") for path in partial]
    try:
        for labels, ids, values in _blocks(paths, field_size, feature_size, report, keep_bad, on_bytes):
            if not len(labels):
                continue
            data, lengths = frame(*encode_libsvm(labels, ids, values), crc32c)
            target = (report.rows + np.arange(len(labels))) % files
            order = np.argsort(target, kind="stable")
            data, lengths = gather(data, lengths, order)
            ends = np.cumsum(lengths)
            for index, first, last in _runs(target[order]):
                handles[index].write(data[int(ends[first] - lengths[first]) : int(ends[last - 1])].tobytes())
                report.counts[index] += last - first
            report.rows += len(labels)
    except BaseException:
        _close_and_remove(handles, partial)
        raise
    if (report.bad and not skip_bad) or not report.rows:
        _close_and_remove(handles, partial)
        return report
    used = min(files, report.rows)  # rows are dealt from file 0: the files past the row count would be empty
    _close_and_remove(handles[used:], partial[used:])
    report.outputs, report.counts = report.outputs[:used], report.counts[:used]
    for handle, path, final in zip(handles, partial, report.outputs):
        handle.close()
        os.replace(path, final)
    return report


def _runs(sorted_targets: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(value, first, last) of each run of equal values."""
    values, firsts = np.unique(sorted_targets, return_index=True)
    lasts = [*firsts[1:].tolist(), len(sorted_targets)]
    return zip(values.tolist(), firsts.tolist(), lasts)


def _close_and_remove(handles, paths) -> None:
    for handle, path in zip(handles, paths):
        handle.close()
        path.unlink(missing_ok=True)
