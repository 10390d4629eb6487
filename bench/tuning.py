"""`dfm tune --local` with early stopping against none: the same 12-trial random search (same seed, so the same
hyperparameters in the same order), once with `early_stopping: auto` (Optuna's median pruner on the trials'
streamed `[dfm] train` metric lines) and once with `off`. Recorded: the trial time of each study and the best
eval AUC each reached. Goal: at least 30% less trial time, best objective within 0.005.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from bench.common import REPO, add_table, fmt, run_measured, section, synth, verdict

TRIALS = 12
RANGES = {
    "learning_rate": {"min": 0.0001, "max": 0.3, "scaling": "log"},
    "embedding_size": {"min": 2, "max": 16, "type": "integer"},
    "batch_size": {"values": [256, 512, 1024]},
}


def _spec(work: Path, data: Path, early_stopping: str) -> Path:
    spec = {
        "name": "bench-tune",
        "role": "arn:aws:iam::123456789012:role/dfm",
        "region": "us-east-1",
        "framework": {"version": "2.14", "python": "py310"},
        "output": "s3://dfm-bench/out/",
        "entry_point": "deepfm-ps",
        "instance": {"type": "ml.c5.2xlarge", "count": 1},
        "checkpoints": False,
        "data": {"train": "s3://dfm-bench/train/", "eval": "s3://dfm-bench/eval/"},
        "hyperparameters": {
            "field_size": 39,
            "deep_layers": [64, 64],
            "optimizer": "adam",
            "log_steps": 10,
            "export": False,
        },
        "tune": {
            "objective": {"metric": "eval:auc", "goal": "maximize"},
            "strategy": "random",
            "max_jobs": TRIALS,
            "max_parallel_jobs": 1,
            "early_stopping": early_stopping,
            "random_seed": 11,
            "ranges": RANGES,
        },
        "local": {
            "channels": {"train": str(data / "train"), "eval": str(data / "eval")},
            "run_dir": str(work / f"runs-{early_stopping}"),
            "timeout_s": 600,
        },
    }
    path = work / f"tune-{early_stopping}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _study(spec: Path) -> dict:
    done, wall_s, cpu_s = run_measured(
        [
            sys.executable,
            "-m",
            "launcher.cli",
            "tune",
            str(spec),
            "--local",
            "--output",
            "json",
            "--job-name",
            f"bench-{spec.stem}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise RuntimeError(f"dfm tune exited {done.returncode}: {done.stderr[-500:]}")
    document = json.loads(done.stdout)
    trials = document["trials"]
    return {
        "trial_s": sum(t["seconds"] or 0 for t in trials),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "best": document["best"]["objective"] if document["best"] else float("nan"),
        "pruned": sum(1 for t in trials if t["state"] == "pruned"),
        "trials": len(trials),
    }


def measure(quick: bool, context: dict) -> dict:
    rows = 40_000 if quick else 120_000
    result = section(
        "Local tuning: early stopping",
        "at least 30% less trial time, best eval AUC within 0.005",
        f"`dfm tune --local`, {TRIALS} random trials (seed 11) of deepfm-ps on one host, synth data "
        f"({rows:,} rows), early_stopping auto vs off; `bench/tuning.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-tuning-"))
    try:
        data = synth(work / "data", "--rows", str(rows), "--files", "4", "--eval-rows", str(rows // 5), "--seed", "7")
        studies = {mode: _study(_spec(work, data, mode)) for mode in ("off", "auto")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    off, auto = studies["off"], studies["auto"]
    add_table(
        result,
        ["early stopping", "trial time (s)", "wall (s)", "pruned", "best eval AUC"],
        [
            [mode, fmt(s["trial_s"]), fmt(s["wall_s"]), f"{s['pruned']}/{s['trials']}", fmt(s["best"], 4)]
            for mode, s in studies.items()
        ],
    )
    saved = 1 - auto["trial_s"] / off["trial_s"] if off["trial_s"] else float("nan")
    verdict(result, ">= 30% less trial time", saved >= 0.30, f"{fmt(100 * saved)}% less trial time with early stopping")
    gap = off["best"] - auto["best"]
    verdict(
        result,
        "best eval AUC within 0.005",
        gap <= 0.005,
        f"best {fmt(auto['best'], 4)} with, {fmt(off['best'], 4)} without",
    )
    result["data"] = studies
    return result


if __name__ == "__main__":  # python -m bench.tuning [--quick]
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
