"""`dfm data inspect` on TFRecord files and folders (what `dfm data synth`, `convert`, `split` and `prepare` write):
rows, fields, the id range against `feature_size`, the label rate, files and bytes.

TensorFlow is imported inside `summarize` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SUFFIXES = (".tfrecord", ".tfrecords")
NOT_DATA = ("meta.json", "_SUCCESS")  # what the writers put beside the records
GZIP_MAGIC = b"\x1f\x8b"


class SummaryError(Exception):
    """A path that holds no readable TFRecords: the message names it and what was found."""


def is_tfrecord(path: Path) -> bool:
    """A folder, a `.tfrecord(s)` file, or a binary file (text files go to the features proposal)."""
    if path.is_dir():
        return True
    if path.suffix in SUFFIXES:
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(1024)
    except OSError:
        return False
    return b"\0" in head and not head.startswith(GZIP_MAGIC)  # gzip'd text is the text reader's to explain


def record_files(path: Path) -> list[Path]:
    """The files under a folder (recursively, hidden and bookkeeping files left out), or the file itself."""
    if not path.is_dir():
        return [path]
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
        and p.name not in NOT_DATA
        and not p.name.endswith(".crc")
    )


def summarize(path: Path, feature_size: int, batch: int = 4096) -> dict[str, Any]:
    """The summary of every record under `path`, as a JSON-able dict."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    files = record_files(path)
    if not files:
        raise SummaryError(f"{path}: no files in this folder")
    spec = {
        "label": tf.io.RaggedFeature(tf.float32),
        "ids": tf.io.RaggedFeature(tf.int64),
        "values": tf.io.RaggedFeature(tf.float32),
    }
    rows, positives, other_labels, out_of_range = 0, 0, 0, 0
    id_min, id_max, per_row = None, None, set()
    names: set[str] = set()
    for file in files:
        try:
            for raw in tf.data.TFRecordDataset(str(file)).batch(batch):
                if not names:
                    names = set(tf.train.Example.FromString(raw[0].numpy()).features.feature)
                parsed = tf.io.parse_example(raw, spec)
                ids, labels = parsed["ids"].flat_values.numpy(), parsed["label"].flat_values.numpy()
                rows += int(raw.shape[0])
                per_row.update(parsed["ids"].row_lengths().numpy().tolist())
                positives += int(np.count_nonzero(labels == 1))
                other_labels += int(np.count_nonzero((labels != 0) & (labels != 1)))
                if ids.size:
                    id_min = int(ids.min()) if id_min is None else min(id_min, int(ids.min()))
                    id_max = int(ids.max()) if id_max is None else max(id_max, int(ids.max()))
                    out_of_range += int(np.count_nonzero((ids < 0) | (ids >= feature_size)))
        except (tf.errors.OpError, ValueError) as err:
            message = getattr(err, "message", str(err)).splitlines()[0]
            raise SummaryError(f"{file}: not a TFRecord file dfm can read ({message})") from None
    return {
        "path": str(path),
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "rows": rows,
        "fields": sorted(names),
        "ids_per_row": sorted(per_row),
        "ids": {"min": id_min, "max": id_max, "feature_size": feature_size, "out_of_range": out_of_range},
        "label_rate": positives / (rows - other_labels) if rows > other_labels else None,
        "labels_not_0_or_1": other_labels,
        "empty_files": [str(f) for f in files if f.stat().st_size == 0],
    }


def render(summary: dict[str, Any]) -> str:
    if not summary["rows"]:
        empty = len(summary.get("empty_files", []))
        what = (
            "the file is empty (0 bytes)"
            if summary["files"] == 1 and empty
            else f"every file is empty ({empty} of 0 bytes)"
            if empty == summary["files"]
            else "no records in its files"
        )
        return f"{summary['path']}: 0 rows in {summary['files']} files: {what}"
    ids = summary["ids"]
    per_row = summary["ids_per_row"]
    size = summary["bytes"] / 1024 / 1024
    in_range = (
        "all in range"
        if not ids["out_of_range"]
        else f"{ids['out_of_range']} ids outside 0..{ids['feature_size'] - 1}: raise feature_size"
    )
    lines = [
        f"{summary['path']}: {summary['rows']} rows in {summary['files']} files, {size:.1f} MB",
        f"fields   {', '.join(summary['fields'])}; ids per row: "
        + (str(per_row[0]) if len(per_row) == 1 else f"{per_row[0]} to {per_row[-1]}" if per_row else "none"),
        f"ids      {ids['min']} to {ids['max']} (feature_size {ids['feature_size']}: {in_range})",
        "labels   "
        + (f"{summary['label_rate']:.1%} positive" if summary["label_rate"] is not None else "none 0 or 1")
        + (
            f"; {summary['labels_not_0_or_1']} not 0 or 1 (bad rows to the training scripts; the rate is of the others)"
            if summary["labels_not_0_or_1"]
            else ""
        ),
    ]
    if summary.get("empty_files"):
        lines.append(f"empty    {len(summary['empty_files'])} files of 0 bytes, e.g. {summary['empty_files'][0]}")
    return "\n".join(lines)
