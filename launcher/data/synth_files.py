"""A synthetic draw written as files of equal row counts: TFRecord or libsvm text from a `SynthData` in memory,
and the split and file names that `stream` shares when it writes a long draw chunk by chunk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from launcher.data.synth import SynthData


def check_files(rows: int, files: int) -> int:
    if files < 1:
        raise ValueError(f"files must be at least 1, got {files}")
    if rows % files:
        raise ValueError(
            f"{rows} rows do not split into {files} files of equal size "
            f"(use a row count divisible by {files}, e.g. {rows - rows % files})"
        )
    return rows // files


def file_names(out_dir: Path, files: int, prefix: str, suffix: str) -> list[Path]:
    return [Path(out_dir) / f"{prefix}-{i:05d}{suffix}" for i in range(files)]


def write_tfrecords(out_dir: str | Path, data: SynthData, files: int, prefix: str = "part") -> list[Path]:
    """Write `data` as `files` TFRecord files of equal record counts; rows must divide evenly."""
    from launcher.data.tfrecord import serialize_examples, write_records

    per_file = check_files(data.rows, files)
    paths = file_names(Path(out_dir), files, prefix, ".tfrecord")
    for i, path in enumerate(paths):
        part = slice(i * per_file, (i + 1) * per_file)
        write_records(path, serialize_examples(data.labels[part], data.ids[part], data.values[part]))
    return paths


def libsvm_lines(labels: np.ndarray, ids: np.ndarray, values: np.ndarray) -> Iterator[str]:
    for label, row_ids, row_values in zip(labels.tolist(), ids.tolist(), values.tolist()):
        pairs = " ".join(f"{i}:{v:.9g}" for i, v in zip(row_ids, row_values))
        yield f"{label:g} {pairs}\n"


def write_libsvm(out_dir: str | Path, data: SynthData, files: int, prefix: str = "part") -> list[Path]:
    """Write `data` as libsvm text (`label id:value ...`, field order), `files` files of equal rows."""
    per_file = check_files(data.rows, files)
    paths = file_names(Path(out_dir), files, prefix, ".libsvm")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(paths):
        part = slice(i * per_file, (i + 1) * per_file)
        with open(path, "w") as out:
            out.writelines(libsvm_lines(data.labels[part], data.ids[part], data.values[part]))
    return paths
