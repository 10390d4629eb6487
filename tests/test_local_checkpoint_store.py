"""The local checkpoint store (checkpoint_s3_uri's stand-in) stays loadable whatever fails while it is updated: real
TensorFlow checkpoints, a full disk injected where a file is copied, and a real full disk (a small tmpfs)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.errors import DfmError
from launcher.local import checkpoint_store
from spec_helpers import LOCAL_BASE, REPO, dfm, merged


def _stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")}


def _changed(folder: Path, before: dict) -> list[tuple[str, Path]]:
    """What a host wrote since `before`, as the runner hands it to the store."""
    return [(name, folder / name) for name, stamp in _stamps(folder).items() if before.get(name) != stamp]


class _Model:
    """A checkpointed variable and a CheckpointManager, as the bundled scripts keep them."""

    def __init__(self, folder: Path):
        import tensorflow as tf

        self.tf = tf
        self.value = tf.Variable(tf.zeros([1000]))
        self.step = tf.Variable(0, dtype=tf.int64)
        self.checkpoint = tf.train.Checkpoint(value=self.value, step=self.step)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(folder), max_to_keep=3)

    def save_at(self, step: int) -> None:
        self.value.assign(self.tf.fill([1000], float(step)))
        self.step.assign(step)
        self.manager.save(checkpoint_number=step)

    def restored_from(self, folder: Path) -> int:
        """Restore the store's latest checkpoint into a fresh model: -> its step (the values must match it)."""
        fresh = _Model(folder.parent / "fresh")
        latest = self.tf.train.latest_checkpoint(str(folder))
        fresh.checkpoint.restore(latest).assert_consumed()
        step = int(fresh.step.numpy())
        assert float(fresh.value.numpy()[0]) == float(step)
        return step


@pytest.mark.slow
def test_a_full_disk_while_copying_keeps_the_store_on_its_previous_checkpoint(tmp_path, monkeypatch):
    host, store = tmp_path / "host", tmp_path / "store"
    model = _Model(host)
    model.save_at(10)
    assert checkpoint_store.save(store, _changed(host, {})) == []
    assert model.restored_from(store) == 10

    before = _stamps(host)
    model.save_at(20)
    real_copy = shutil.copy2

    def disk_full_on_data(source, target, **kwargs):
        if ".data-" in Path(target).name:
            real_copy(source, target, **kwargs)  # part of the file made it, as on a disk that filled up
            with open(target, "r+b") as partial:
                partial.truncate(7)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_copy(source, target, **kwargs)

    monkeypatch.setattr(checkpoint_store.shutil, "copy2", disk_full_on_data)
    with pytest.raises(DfmError) as caught:
        checkpoint_store.save(store, _changed(host, before))
    assert caught.value.exit_code == 1
    assert caught.value.message.startswith(f"{store / 'ckpt-20.data-00000-of-00001'}: cannot write (")
    assert "No space left on device" in caught.value.message and "\n" not in caught.value.message
    assert model.restored_from(store) == 10  # the pointer still names ckpt-10, complete
    assert not [p for p in store.iterdir() if p.name.startswith("ckpt-20.data")]  # no partial file left
    monkeypatch.undo()
    assert checkpoint_store.save(store, _changed(host, before)) == []  # space again: the next sync completes
    assert model.restored_from(store) == 20


@pytest.mark.slow
def test_a_pointer_naming_an_incomplete_checkpoint_is_not_copied(tmp_path):
    host, store = tmp_path / "host", tmp_path / "store"
    model = _Model(host)
    model.save_at(10)
    checkpoint_store.save(store, _changed(host, {}))
    before = _stamps(host)
    model.save_at(20)
    changed = [(name, path) for name, path in _changed(host, before) if ".data-" not in name]  # the host lost it
    (note,) = checkpoint_store.save(store, changed)
    assert note == f"{store / 'checkpoint'}: not updated: the checkpoint {host / 'checkpoint'} names is incomplete"
    assert model.restored_from(store) == 10


# --- a real full disk ----------------------------------------------------------------------------------------
def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")


@pytest.fixture
def small_disk(tmp_path):
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount")
    folder = tmp_path / "disk"
    _mount_tmpfs(folder, "64m")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample")
    made = dfm("data", "synth", "--out", str(out), "--rows", "3000", "--files", "2", "--eval-rows", "500")
    assert made.returncode == 0, made.stderr
    return out


def _launch(spec: Path, run_dir: Path, job: str) -> subprocess.CompletedProcess:
    argv = ["launch", str(spec), "--local", "--run-dir", str(run_dir), "--job-name", job]
    return subprocess.run(
        [sys.executable, "-m", "launcher.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=280
    )


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _fill(disk: Path, leave: int) -> Path:
    """A file taking the disk's free space but `leave` bytes."""
    stat = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as out:
        out.truncate(0)
        remaining = stat.f_bavail * stat.f_frsize - leave
        while remaining > 0:
            remaining -= out.write(b"\0" * min(remaining, 1 << 20))
    return filler


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_full_disk_is_exit_1_on_one_line_and_the_store_still_restores(tmp_path, small_disk, sample):
    """A first run fills the store (ckpt-10). With room for a run's folder but not for the copy back, the next run
    ends exit 1 naming the store file it could not write; with no room at all, a run ends exit 1 on one line
    before it starts (neither is a dfm bug, exit 3). Once there is space again, a run resumes from ckpt-10."""
    spec = tmp_path / "spec.yaml"
    changes = {
        "checkpoints": "s3://dfm-test/ck/",
        "hyperparameters": {"max_steps": 10, "checkpoint_steps": 10, "log_steps": 10, "batch_size": 64},
        "local": {"channels": {"train": str(sample / "train"), "eval": str(sample / "eval")}, "timeout_s": 240},
    }
    spec.write_text(yaml.safe_dump(merged(LOCAL_BASE, changes)))
    first = _launch(spec, small_disk, "first")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    store = small_disk / "checkpoints" / "dfm-test_ck"
    run_size, checkpoint_size = _size(small_disk / "first"), _size(store)
    shutil.rmtree(small_disk / "first")

    spec.write_text(yaml.safe_dump(merged(LOCAL_BASE, merged(changes, {"hyperparameters": {"max_steps": 20}}))))
    filler = _fill(small_disk, run_size + checkpoint_size + checkpoint_size // 2)  # the run, and half a copy back
    unsynced = _launch(spec, small_disk, "unsynced")
    assert unsynced.returncode == 1 and "Traceback" not in unsynced.stderr, unsynced.stdout[-3000:]
    (failed,) = [line for line in unsynced.stdout.splitlines() if line.startswith("[dfm local] FAILED: ")]
    assert failed.startswith(f"[dfm local] FAILED: {store / 'ckpt-20.data-00000-of-00001'}: cannot write (")
    assert "which still names its previous checkpoint" in failed and "No space left on device" in failed
    shutil.rmtree(small_disk / "unsynced")

    filler.unlink()
    filler = _fill(small_disk, 4096)
    full = _launch(spec, small_disk, "full")
    assert full.returncode == 1
    assert "internal error" not in full.stderr and "Traceback" not in full.stderr
    line = full.stderr.strip().splitlines()[-1]
    assert line.startswith(f"dfm: {small_disk / 'full'}") and "No space left on device" in line, line
    shutil.rmtree(small_disk / "full")

    filler.unlink()
    resumed = _launch(spec, small_disk, "resumed")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "ckpt-10: continuing at step 10" in resumed.stdout
