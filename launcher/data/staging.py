"""Outputs of the data commands: checked writable before any work, written under hidden staging names beside
their final place and swapped in only when the command succeeds, so a failed or interrupted command leaves
the previous output as it was (and no mix of old and new files).

A target is a folder or a file. Its staging name is `.<name>.dfm-staging` in the same parent (same file
system, so the swap is a rename); a leftover staging copy of a killed run is removed before the next one starts.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from launcher.errors import DfmError

_STAGING, _OLD = ".dfm-staging", ".dfm-old"


def staging_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{_STAGING}")


def taken(target: Path) -> bool:
    """A file, or a folder holding anything."""
    return target.is_file() or (target.is_dir() and any(target.iterdir()))


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be made or written to (a file on its path, a read-only or virtual file system), or
    None; found by making it and a scratch entry in it, as the command itself would."""
    for parent in [folder, *folder.parents]:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".dfm-probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        return f"cannot write {err.filename or folder} ({err.strerror or err})"
    return None


def check_writable(folder: Path, what: str) -> None:
    """One line, exit 2, before any work, when `folder` cannot be written (what: '--out X', 'local.channels.train')."""
    reason = unwritable(Path(folder))
    if reason is not None:
        raise DfmError(f"{what}: {reason}", 2)


class Staged:
    """Targets written under their staging names and swapped into place by `commit()`; `what` names the output
    in messages (`--out data/x`).

    `with Staged(targets, force, what) as stage:` refuses (exit 2) a taken target without `force`, checks the
    parents are writable, then `stage.path(target)` is where to write it; leaving the block by an exception
    removes the staging copies and the folders it made for them (when empty), and keeps the targets; leaving it
    normally swaps every target in (a target without a staging copy is removed: the new set does not have it)."""

    def __init__(self, targets: Iterable[Path], force: bool, what: str):
        self.targets = [Path(t) for t in targets]
        self.force, self.what = force, what

    def __enter__(self) -> "Staged":
        occupied = [t for t in self.targets if taken(t)]
        if occupied and not self.force:
            target = occupied[0]
            state = "already exists" if target.is_file() else "is not empty"
            raise DfmError(
                f"{target} {state}; pass --force to replace it (the new output is written beside it "
                "and swapped in when complete)",
                2,
            )
        parents = sorted({t.parent for t in self.targets})
        self.made = [f for f in dict.fromkeys(a for p in parents for a in [p, *p.parents]) if not f.exists()]
        for parent in parents:
            check_writable(parent, self.what)
        for target in self.targets:
            _remove(staging_path(target))
        return self

    def path(self, target: Path) -> Path:
        return staging_path(Path(target))

    def folder(self, target: Path) -> Path:
        """The staging folder of a folder target, made."""
        path = self.path(target)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            for target in self.targets:
                _remove(staging_path(target))
            for folder in sorted(self.made, key=lambda f: len(f.parts), reverse=True):
                try:
                    folder.rmdir()  # the folders made for the output, when still empty
                except OSError:
                    pass
            return
        self.commit()

    def commit(self) -> None:
        for target in self.targets:
            staged = staging_path(target)
            old = target.with_name(f".{target.name}{_OLD}")
            _remove(old)
            if target.exists() or target.is_symlink():
                os.replace(target, old)
            if staged.exists():
                os.replace(staged, target)
            _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            if err.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise
