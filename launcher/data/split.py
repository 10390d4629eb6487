"""Re-split TFRecord files into equal-count files laid out for hosts x workers.

SageMaker's ShardedByS3Key deals whole objects (files) to hosts, and Pipe mode streams one channel per
local worker, so balance must be built into the file layout itself:

- one channel (`train/`): `hosts * workers * files_per_worker` files. ShardedByS3Key gives each host
  `workers * files_per_worker` of them, which the host's workers then split evenly in code.
- multi-path (`train/`, `train-1/`, ..., one folder per channel, `channels` a multiple of `workers`):
  each folder holds `hosts * files_per_worker` files, so each host gets `files_per_worker` files of
  every channel, and local worker `r` reads the channels `i` with `i % workers == r` (CONTRACT.md).

Every file gets exactly `total // files` records; the `total % files` records left over (the last ones
in input order) are dropped and reported. Records are dealt round-robin, so each file samples the
whole input rather than one stretch of it. Records are copied as they are, without parsing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    hosts: int
    workers: int
    files_per_worker: int = 1
    multi_path: bool = False
    channels: int = 0  # multi-path channel folders; 0 means one per worker
    channel: str = "train"

    def __post_init__(self) -> None:
        for name in ("hosts", "workers", "files_per_worker"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.channels and not self.multi_path:
            raise ValueError("channels only applies with multi-path")
        if self.multi_path and self.channel_count % self.workers:
            raise ValueError(
                f"channels ({self.channel_count}) must be a multiple of workers ({self.workers}) "
                "so every local worker reads the same number of channels"
            )

    @property
    def channel_count(self) -> int:
        return (self.channels or self.workers) if self.multi_path else 1

    def channel_names(self) -> list[str]:
        return [self.channel if i == 0 else f"{self.channel}-{i}" for i in range(self.channel_count)]

    def files_per_channel(self) -> int:
        if self.multi_path:
            return self.hosts * self.files_per_worker
        return self.hosts * self.workers * self.files_per_worker

    def paths(self, out_dir: Path) -> list[Path]:
        """All output files; file k goes to channel k % channels, so channels fill evenly."""
        per_channel = self.files_per_channel()
        names = self.channel_names()
        count = len(names) * per_channel
        return [out_dir / names[k % len(names)] / f"part-{k // len(names):05d}.tfrecord" for k in range(count)]


@dataclass(frozen=True)
class SplitReport:
    paths: list[Path]
    records_per_file: int
    dropped: int
    total: int


def input_files(inputs: list[Path]) -> list[Path]:
    """Files given directly, plus the sorted non-hidden files of given folders."""
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            files += sorted(p for p in item.iterdir() if p.is_file() and not p.name.startswith("."))
        elif item.is_file():
            files.append(item)
        else:
            raise FileNotFoundError(f"no such file or folder: {item}")
    return files


def split(
    inputs: list[Path],
    out_dir: Path,
    layout: Layout,
    total: int | None = None,
    on_records: Callable[[int], None] = lambda n: None,
    place: Callable[[Path], Path] = lambda path: path,
) -> SplitReport:
    """`total` is the inputs' record count when the caller already has it; `place(path)` is where the file
    `path` of the layout is written (a staging folder); the report names the layout's paths. Inputs may be
    gzip-compressed TFRecords; a damaged one raises tfrecord.DamagedRecords naming it."""
    from launcher.data.tfrecord import count_records, iter_raw_records, quiet_tensorflow

    tf = quiet_tensorflow()
    total = count_records(inputs) if total is None else total
    paths = layout.paths(out_dir)
    per_file = total // len(paths)
    if per_file == 0:
        raise ValueError(f"{total} records cannot fill {len(paths)} files with at least one record each")
    keep = per_file * len(paths)
    for path in paths:
        place(path).parent.mkdir(parents=True, exist_ok=True)
    writers = [tf.io.TFRecordWriter(str(place(path))) for path in paths]
    written = 0
    try:
        for index, record in enumerate(iter_raw_records(inputs)):
            if index == keep:
                break
            writers[index % len(writers)].write(record)
            written += 1
            if written % 4096 == 0:
                on_records(4096)
    finally:
        for writer in writers:
            writer.close()
    on_records(written % 4096 + total - keep)  # the last partial chunk and the dropped records: the bar ends at total
    return SplitReport(paths, per_file, total - keep, total)
