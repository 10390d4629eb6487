"""The local stand-in for checkpoint_s3_uri: a folder the hosts' checkpoint folders are copied from at the start of a
run and back to at its end (SageMaker's checkpoint sync), and the one-line error for a write that fails.

The store is only ever changed so that it stays loadable: the new data and index files are copied first (each to a
temporary name, flushed to disk, then renamed into place), and only then the `checkpoint` pointer files, each
replaced in one rename, and only when the checkpoint a pointer names is complete in the store. A copy that fails
part-way (a full disk) leaves the previous pointer, and the files it names, as they were.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from launcher.errors import DfmError

POINTER = "checkpoint"  # tf.train.CheckpointManager's (and Saver's) pointer file, in each checkpoint folder
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(.*)"\s*$', re.MULTILINE)
_SHARDS = re.compile(r"\.data-\d+-of-(\d+)$")
_STAGING = ".dfm-partial"  # a file being copied in: never read as part of a checkpoint


def write_failed(err: OSError | shutil.Error, what: str, where: str | Path | None = None) -> DfmError:
    """A failed write of a run's files as one line naming the file (`where`, else the error's) and what was being
    written; exit 1."""
    if isinstance(err, shutil.Error):  # copytree's list of (source, target, why)
        first = err.args[0][0] if err.args and err.args[0] else None
        where, why = (where or first[1], str(first[2])) if first else (where or "?", str(err))
        why = re.sub(r"^\[Errno \d+\] ", "", why.split(": '", 1)[0])
    else:
        where, why = where or err.filename2 or err.filename or "?", err.strerror or str(err)
    full = " (the disk is full: free space, or point local.run_dir / --run-dir elsewhere)"
    return DfmError(f"{where}: cannot write ({what}): {why}{full if 'No space left' in why else ''}", 1)


def restore(store: Path, host_dir: Path) -> None:
    """A host's checkpoint folder starts as a copy of the store (as SageMaker downloads checkpoint_s3_uri)."""
    if not store.is_dir():
        return
    try:
        shutil.copytree(store, host_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(f"*{_STAGING}"))
    except (OSError, shutil.Error) as err:
        raise write_failed(err, f"copying the checkpoints of {store} to a host") from None


def _copy_durably(source: Path, target: Path) -> None:
    """source -> target through a temporary name in the target's folder: the target is the whole new file or the
    old one, never part of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(target.name + _STAGING)
    try:
        shutil.copy2(source, staged)
        with open(staged, "rb") as copied:
            os.fsync(copied.fileno())
        os.replace(staged, target)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _complete(folder: Path, pointer_text: str) -> bool:
    """Whether the checkpoint a pointer file names has its index and every data shard in `folder`."""
    found = _LATEST.search(pointer_text)
    if found is None:
        return False
    named = Path(found.group(1))
    prefix = folder / (named.name if named.is_absolute() else named)
    if not prefix.with_name(prefix.name + ".index").is_file():
        return False
    shards = [p for p in prefix.parent.glob(prefix.name + ".data-*") if _SHARDS.search(p.name)]
    if not shards:
        return False
    return len(shards) == int(_SHARDS.search(shards[0].name).group(1))


def save(store: Path, changed: list[tuple[str, Path]]) -> list[str]:
    """Copy what the hosts wrote (store-relative name, the host's file) into the store: data files, then the
    pointers whose checkpoint is complete there. -> a note for each pointer left as it was. Raises DfmError (exit 1)
    when a write fails; the store then still names its previous checkpoint."""
    pointers = [(name, path) for name, path in changed if Path(name).name == POINTER]
    data = [(name, path) for name, path in changed if Path(name).name != POINTER]
    notes = []
    for name, path in data:
        try:
            _copy_durably(path, store / name)
        except OSError as err:
            kept = "copying a checkpoint's files to the checkpoint store, which still names its previous checkpoint"
            raise write_failed(err, kept, store / name) from None
    for name, path in pointers:
        text = path.read_text(errors="replace")
        if not _complete((store / name).parent, text):
            notes.append(f"{store / name}: not updated: the checkpoint {path} names is incomplete")
            continue
        try:
            _copy_durably(path, store / name)
        except OSError as err:
            kept = "updating the checkpoint store's pointer, which still names its previous checkpoint"
            raise write_failed(err, kept, store / name) from None
    return notes
