"""Helpers of the `dfm data prepare` tests: small specs with a prepare: section, and click logs whose rows
carry their own input position (field 0's value) so that the tests can see the order Spark wrote them in."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import spec_helpers

FIELDS = 3


def write_spec(
    tmp_path: Path,
    prepare: dict,
    *,
    name: str = "prep",
    count: int = 2,
    processes: int = 2,
    train=None,
    local: dict | None = None,
    features: dict | None = None,
    s3_shard: bool = True,
    hyperparameters: dict | None = None,
    mode: str = "File",
) -> Path:
    """A Horovod job (count hosts x processes ranks) on a 2.12 image, with the given prepare: section."""
    spec = {
        "name": name,
        "role": "arn:aws:iam::123456789012:role/dfm",
        "region": "us-east-1",
        "framework": {"version": "2.12", "python": "py310"},
        "output": "s3://dfm-test-bucket/out/",
        "entry_point": "deepfm-horovod",
        "instance": {"type": "ml.c5.2xlarge", "count": count},
        "distribution": {"horovod": {"processes_per_host": processes}},
        "data": {
            "mode": mode,
            "s3_shard": s3_shard,
            "train": train or "s3://dfm-test-bucket/prepared/train/",
            "eval": "s3://dfm-test-bucket/prepared/eval/",
        },
        "hyperparameters": hyperparameters or {"field_size": FIELDS, "feature_size": 100},
        "prepare": prepare,
        "local": {"channels": local or {}},
    }
    if features is not None:
        spec["features"] = features
    tmp_path.mkdir(parents=True, exist_ok=True)
    return spec_helpers.write_spec(tmp_path, name=f"{name}.yaml", base=spec)


def write_clicks(folder: Path, rows: int, files: int, seed: int = 0, positive_rate: float = 0.25) -> np.ndarray:
    """libsvm rows `label 0:<position> 1:1 2:1` in `files` files, consecutive stretches per file; -> labels."""
    folder.mkdir(parents=True, exist_ok=True)
    labels = (np.random.default_rng(seed).random(rows) < positive_rate).astype(int)
    per_file = -(-rows // files)
    for k in range(files):
        lines = [
            f"{labels[i]} 0:{i} {1 + i % 7}:1 {10 + i % 11}:1\n"
            for i in range(k * per_file, min(rows, (k + 1) * per_file))
        ]
        (folder / f"part-{k:03d}.libsvm").write_text("".join(lines))
    return labels
