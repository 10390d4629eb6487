"""Channels on a simulated host: which files it gets (S3 sharding), and how it sees them (File links or Pipe FIFOs).

ShardedByS3Key: SageMaker gives each of N hosts about 1/N of the channel's objects, by object (file), never
splitting one. Its exact assignment is not documented; this emulation lists the channel's files sorted by
key and gives file i to host i % N, so hosts see disjoint sets that together are the whole channel, and a
host can get nothing when there are fewer files than hosts (as on SageMaker).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

from launcher.errors import DfmError
from launcher.plans.training_plan import Channel


def channel_source(channel: Channel) -> Path:
    """The local folder (or single file) that stands in for the channel's S3 prefix / file system path."""
    location = channel.local_path
    if location is None:
        raise DfmError(
            f"channel '{channel.name}' reads {channel.uri}; --local needs a local folder for it "
            f"(the spec's local: channels: section, or --channel {channel.name}=PATH)"
        )
    path = Path(location).expanduser()
    if not path.exists():
        raise DfmError(f"channel '{channel.name}': local data {path} does not exist")
    return path.resolve()


def list_objects(source: Path) -> list[tuple[str, Path]]:
    """(key relative to the channel root, file) for every file, sorted by key as S3 lists them."""
    if source.is_file():
        return [(source.name, source)]
    found = [(p.relative_to(source).as_posix(), p) for p in source.rglob("*") if p.is_file()]
    return sorted(found, key=lambda item: item[0])


def empty_channel_problem(channel: Channel, source: Path) -> str:
    """SageMaker fails a job whose channel's S3 prefix holds no object, before any script starts."""
    return (
        f"channel '{channel.name}': {source} holds no files, and SageMaker fails a job whose S3 prefix "
        f"{channel.uri} holds no objects before the script starts; point the channel at data"
    )


def skipped_by_bundled_scripts(key: str) -> bool:
    """A file the bundled scripts leave out of a channel: a hidden one (in a hidden folder) or one named `_...`."""
    parts = key.split("/")
    return any(part.startswith(".") for part in parts) or parts[-1].startswith("_")


def only_skipped_files_problem(channel: Channel, source: Path, objects: list[tuple[str, Path]]) -> str | None:
    """The channel's files are all ones the bundled scripts skip: as good as an empty channel to them."""
    if not objects or not all(skipped_by_bundled_scripts(key) for key, _ in objects):
        return None
    return (
        f"channel '{channel.name}': {source} holds only hidden or `_` files ({objects[0][0]}), which the bundled "
        "scripts skip, so it holds no data for them; point the channel at data"
    )


def files_for_host(
    objects: list[tuple[str, Path]], distribution: str, host_index: int, num_hosts: int
) -> list[tuple[str, Path]]:
    if distribution == "ShardedByS3Key":
        return [obj for i, obj in enumerate(objects) if i % num_hosts == host_index]
    return list(objects)


def link_files(target_dir: Path, files: list[tuple[str, Path]]) -> None:
    """File (and FastFile) mode: the channel folder holds the host's files under their keys (as symlinks)."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for key, path in files:
        link = target_dir / key
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path)


class PipeFeeder(threading.Thread):
    """Pipe mode for one channel on one host: FIFO `<channel>_<epoch>` in the data folder, epoch 0, 1, ...

    Each FIFO carries the host's files back to back and then EOF; the next epoch's FIFO is created just
    before, so it is always there for the reader, until `stop()`. A reader that closes early ends that epoch.
    """

    CHUNK = 1 << 20

    def __init__(self, data_dir: Path, channel: str, files: list[tuple[str, Path]]):
        super().__init__(name=f"pipe-{channel}", daemon=True)
        self.data_dir = data_dir
        self.channel = channel
        self.files = [path for _, path in files]
        self.epochs_done = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def fifo_path(self, epoch: int) -> Path:
        return self.data_dir / f"{self.channel}_{epoch}"

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        epoch = 0
        try:
            os.mkfifo(self.fifo_path(epoch))
            while not self._stopping.is_set():
                fd = self._open_when_read(self.fifo_path(epoch))
                if fd is None:
                    return
                try:
                    self._feed(fd)
                finally:
                    # The next epoch's FIFO exists before this one reaches EOF, so a reader that moves on
                    # at once finds it.
                    os.mkfifo(self.fifo_path(epoch + 1))
                    os.close(fd)
                    self.fifo_path(epoch).unlink(missing_ok=True)
                self.epochs_done = epoch = epoch + 1
        except BaseException as err:  # reported by the runner; a feeder must never kill the launcher
            self.error = err
        finally:
            self.fifo_path(epoch).unlink(missing_ok=True)

    def _open_when_read(self, path: Path) -> int | None:
        # A non-blocking open for writing fails with ENXIO until a reader has the FIFO open; polling keeps
        # the thread stoppable, which a blocking open would not be.
        while not self._stopping.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:
                if err.errno != errno.ENXIO:
                    raise
                time.sleep(0.05)
                continue
            os.set_blocking(fd, True)
            return fd
        return None

    def _feed(self, fd: int) -> None:
        try:
            for path in self.files:
                with open(path, "rb") as source:
                    while chunk := source.read(self.CHUNK):
                        if self._stopping.is_set():
                            return
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            pass
