"""Writing small specs for tests (a valid base, deep-merged with what a test changes) and running `dfm` on them:
in this process (`run`) or as the CLI in a subprocess (`dfm`)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
ROLE = "arn:aws:iam::123456789012:role/dfm"

BASE: dict[str, Any] = {
    "name": "deepfm-test",
    "role": ROLE,
    "region": "us-east-1",
    "entry_point": "deepfm-ps",
    "framework": {"version": "2.14"},
    "instance": {"type": "ml.c5.xlarge", "count": 1},
    "data": {"train": "s3://dfm-bucket/train/"},
    "output": "s3://dfm-bucket/out/",
}

# The base of the specs local runs train on (dfm launch --local): channels come from `local:`, S3 is never read.
LOCAL_BASE: dict[str, Any] = {
    "name": "local",
    "role": ROLE,
    "region": "us-east-1",
    "framework": {"version": "2.14", "python": "py310"},
    "output": "s3://dfm-test/out/",
    "entry_point": "deepfm-ps",
    "instance": {"type": "ml.c5.2xlarge", "count": 1},
    "data": {"mode": "File", "train": "s3://dfm-test/train/", "eval": "s3://dfm-test/eval/"},
}

DELETE = object()


def merged(base: dict, changes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_spec(tmp_path: Path, changes: dict | None = None, name: str = "spec.yaml", base: dict | None = None) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(merged(BASE if base is None else base, changes or {}), sort_keys=False))
    return path


def line_of(path: Path, text: str) -> int:
    """1-based number of the first line of `path` containing `text`."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


def run(capsys, *args) -> tuple[int, str, str]:
    """`dfm ARGS...` in this process: (exit code, stdout, stderr)."""
    from launcher.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def dfm(*args, cwd: Path | None = None, timeout: float = 240, check: bool = False) -> subprocess.CompletedProcess:
    """`dfm ARGS...` as a subprocess of this Python (the checkout's launcher); `check`: assert it exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "launcher.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    if check:
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result
