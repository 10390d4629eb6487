"""How many steps a local run will train, for its progress bar, and how that is known: `max_steps`, else the epochs
times the rows of one epoch (counted by `dfm data prepare` beside the train channel, or by reading the train
channel's TFRecord framing when the files are small) over the examples one step trains (batch_size, times the
replicas of a synchronous job)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from launcher.errors import DfmError
from launcher.facts import contract
from launcher.local import channels as ch
from launcher.plans.step_total import planned_total
from launcher.watching import Total

COUNT_BYTES = 256 * 2**20  # record framing is read only in train channels this small: the count costs ~nothing


def _train_channels(plan) -> list:
    return [c for c in plan.channels if c.name == "train" or c.name.startswith("train-")]


def prepared_rows(source: Path) -> tuple[int, str] | None:
    """Train rows `dfm data prepare` recorded beside a channel folder (prepare/prepare.json, prepare/stats.json)."""
    folder = source.parent / "prepare"
    for name, read in (("prepare.json", lambda d: d.get("train", {}).get("rows")), ("stats.json", lambda d: d["rows"])):
        try:
            rows = read(json.loads((folder / name).read_text()))
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            continue
        if isinstance(rows, int) and rows > 0:
            return rows, str(folder / name)
    return None


def tfrecord_count(path: Path) -> int | None:
    """Records in an uncompressed TFRecord file, from its framing (8-byte length, 4-byte CRC, data, 4-byte CRC);
    None for a file that is not one (gzip, text, truncated)."""
    count, size = 0, path.stat().st_size
    with path.open("rb") as handle:
        while True:
            header = handle.read(12)
            if not header:
                return count
            if len(header) < 12:
                return None
            (length,) = struct.unpack("<Q", header[:8])
            if handle.tell() + length + 4 > size:
                return None
            handle.seek(length + 4, 1)
            count += 1


def counted_rows(files: list[Path]) -> int | None:
    if not files or sum(f.stat().st_size for f in files) > COUNT_BYTES:
        return None
    counts = [tfrecord_count(f) for f in files]
    return None if any(c is None for c in counts) else sum(counts)


def epoch_rows(plan) -> tuple[int, str] | None:
    """(train rows of one epoch, how they were counted), or None when that is not cheap to know."""
    total, how = 0, []
    for channel in _train_channels(plan):
        try:
            source = ch.channel_source(channel)
        except DfmError:
            return None
        found = prepared_rows(source)
        if found is None:
            rows = counted_rows([path for _, path in ch.list_objects(source)])
            if rows is None:
                return None
            found = rows, f"records counted in {source}"
        total += found[0]
        how.append(found[1])
    return (total, "; ".join(how)) if how else None


def run_total(plan, replicas: int) -> Total:
    """The local run's total: its plan's, with the train rows counted here."""
    epochs = int(plan.hyperparameters.get("epochs", contract.bundled_hparams().DEFAULTS["epochs"]))
    return planned_total(plan, epoch_rows(plan) if epochs > 0 else None, replicas)
