"""Item: the example search. `dfm tune configs/tune-ps.yaml --local --set tune.max_jobs=4` on the demo sample (made
as `make demo` makes it), beside logistic regression on the same split as the quality item computes it. Recorded:
each trial's hyperparameters, eval AUC and state, and the best. Goal: the best trial beats logistic regression.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, add_table, fmt, run_measured, section, synth, verdict
from bench.quality import SAMPLES
from bench.quality_baselines import LR_C, indexed, logistic_regression, one_hot_ids

CONFIG = "configs/tune-ps.yaml"
TRIALS = 4


def _logistic_regression(sample: Path) -> float:
    fields = json.loads((sample / "meta.json").read_text())["field_size"]
    (tr_ids, _, tr_y), (ev_ids, _, ev_y) = (indexed(sample / part, fields) for part in ("train", "eval"))
    tr_x, ev_x = one_hot_ids(tr_ids, ev_ids)
    return logistic_regression(tr_x, tr_y, ev_x, ev_y)


def _study(work: Path, sample: Path) -> tuple[dict, float]:
    sets = {
        "tune.max_jobs": TRIALS,
        "local.channels.train": str(sample / "train"),
        "local.channels.eval": str(sample / "eval"),
        "local.run_dir": str(work / "runs"),
    }
    argv = [sys.executable, "-m", "launcher.cli", "tune", CONFIG, "--local", "--output", "json"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    done, wall_s, _ = run_measured(
        argv + ["--job-name", "bench-tune-example"], capture_output=True, text=True, cwd=REPO
    )
    if done.returncode != 0:
        raise RuntimeError(f"dfm tune exited {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout), wall_s


def _value(value) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def measure(quick: bool, context: dict) -> dict:
    result = section(
        "Local tuning: the example search",
        "the best of a 4-trial study of configs/tune-ps.yaml beats logistic regression's eval AUC on the same sample",
        f"`dfm tune {CONFIG} --local --set tune.max_jobs={TRIALS}` on the demo sample (`dfm data synth` as `make demo` "
        f"makes it); logistic regression (scikit-learn, C={LR_C}) on one-hot ids as the quality item fits it; "
        "`bench/tune_example.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-tune-example-"))
    try:
        sample = synth(work / "sample", *SAMPLES["demo"][1])
        lr_auc = _logistic_regression(sample)
        document, wall_s = _study(work, sample)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = [r["hyperparameter"] for r in document["ranges"]]
    rows = [
        [
            t["trial"],
            *[_value(t["hyperparameters"].get(n)) for n in names],
            t["state"],
            fmt(t["objective"], 4) if t["objective"] is not None else "",
            fmt(t["seconds"]) if t["seconds"] is not None else "",
        ]
        for t in document["trials"]
    ]
    rows.append(["logistic regression", *[""] * len(names), "", fmt(lr_auc, 4), ""])
    add_table(
        result, ["trial", *names, "state", "eval AUC", "seconds"], rows, caption=f"study wall time {fmt(wall_s)} s"
    )
    best = document["best"]["objective"] if document["best"] else float("nan")
    verdict(
        result,
        "best trial > logistic regression",
        best > lr_auc if best == best else None,
        f"best {fmt(best, 4)}, logistic regression {fmt(lr_auc, 4)}",
    )
    result["data"] = {
        "trials": [
            {k: t[k] for k in ("trial", "hyperparameters", "state", "objective", "seconds")} for t in document["trials"]
        ],
        "best": best,
        "logistic_regression": lr_auc,
        "wall_s": wall_s,
    }
    return result


if __name__ == "__main__":  # python -m bench.tune_example
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
