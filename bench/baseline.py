"""Item: the logistic-regression baseline the bundled scripts train beside DeepFM (hyperparameter `baseline`). What
it costs a step on the demo's settings (`configs/ps.yaml` on the `make demo` sample, runs with it on and off
alternated, the machine's load beside them), and its eval AUC against scikit-learn's logistic regression tuned
over C on the same split, on the demo sample and on a held-out one (another synth seed).

`python -m bench.baseline [--pairs N]` prints the result as JSON; `python -m bench.run --only baseline` reports it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.common import DFM, REPO, add_table, fmt, section, synth, verdict

CONFIG = "configs/ps.yaml"
DEMO = ["--rows", "200000", "--files", "8", "--eval-rows", "40000", "--seed", "7"]  # make demo's sample
HELD_OUT = ["--rows", "200000", "--files", "8", "--eval-rows", "40000", "--seed", "8"]
MAX_COST = 0.05  # on by default only under 5% of the step
MAX_GAP = 0.005  # its AUC within this of a tuned scikit-learn logistic regression
_SPEED = re.compile(r"examples/s: ([\d,]+)")


def launch(sample: Path, run_dir: Path, sets: list[str]) -> subprocess.CompletedProcess:
    argv = [DFM, "launch", CONFIG, "--local", "--run-dir", str(run_dir), "--timeout", "1800"]
    for item in sets:
        argv += ["--set", item]
    argv += ["--channel", f"train={sample / 'train'}", "--channel", f"eval={sample / 'eval'}"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1900)


def speed(done: subprocess.CompletedProcess) -> float:
    """The run's mean examples/s (the local summary's, from the train lines: start-up and evaluations left out)."""
    found = _SPEED.search(done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"dfm launch failed (exit {done.returncode}): {done.stdout[-400:]}{done.stderr[-400:]}")
    return float(found.group(1).replace(",", ""))


def eval_aucs(stdout: str, epochs: int = 4) -> list[tuple[float, float]]:
    """(auc, baseline_auc) of each epoch's eval line (a line after them repeats the exported evaluation's)."""
    from launcher.metric_lines import parse_metric_line

    lines = [p[1] for p in map(parse_metric_line, stdout.splitlines()) if p is not None and p[0] == "eval"]
    return [(row["auc"], row.get("baseline_auc", float("nan"))) for row in lines[:epochs]]


def step_cost_in_process(sample: Path, rounds: int = 12, steps: int = 40) -> dict:
    """The training step of configs/ps.yaml's recipe (Adagrad 0.3, the scripts' other defaults, the demo's sizes)
    in one process, with the baseline on and off, timed in alternated blocks of `steps` steps on the sample's
    batches: -> ms per step of each block and the cost (median on / median off - 1)."""
    import time

    from bench.common import use_entrypoints
    from bench.quality_baselines import indexed

    use_entrypoints()
    import deepfm_hparams
    import deepfm_training
    import tensorflow as tf

    ids, values, labels = indexed(sample / "train", 39)
    batches = [
        (
            {"ids": tf.constant(ids[i : i + 512]), "values": tf.constant(values[i : i + 512])},
            tf.constant(labels[i : i + 512]),
        )
        for i in range(0, 512 * steps, 512)
    ]
    steps_of = {}
    for state in ("on", "off"):
        hp = deepfm_hparams.parse_hyperparameters(
            ["--optimizer", "adagrad", "--learning_rate", "0.3", "--baseline", "true" if state == "on" else "false"]
        )
        step = tf.function(deepfm_training.build_trainer(hp).train_step)
        for batch in batches[:10]:
            step(batch)  # traced and warm
        steps_of[state] = step
    times = {"on": [], "off": []}
    for i in range(rounds):
        for state in ("on", "off") if i % 2 == 0 else ("off", "on"):
            started = time.perf_counter()
            for batch in batches:
                loss = steps_of[state](batch)
            float(loss)
            times[state].append((time.perf_counter() - started) * 1000 / len(batches))
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    return {"ms_per_step": times, "cost": on / off - 1, "load": os.getloadavg()[0]}


def step_cost(sample: Path, work: Path, pairs: int) -> dict:
    """Runs of one epoch with the baseline on and off, alternated: -> speeds and the cost (1 - on / off, medians)."""
    speeds = {"on": [], "off": []}
    loads = []
    for i in range(pairs):
        for state in ("on", "off") if i % 2 == 0 else ("off", "on"):
            loads.append(os.getloadavg()[0])
            done = launch(
                sample,
                work / f"cost-{state}-{i}",
                ["hyperparameters.epochs=1", f"hyperparameters.baseline={'true' if state == 'on' else 'false'}"],
            )
            speeds[state].append(speed(done))
    on, off = statistics.median(speeds["on"]), statistics.median(speeds["off"])
    return {"speeds": speeds, "cost": 1 - on / off, "load": loads}


def tuned_sklearn(sample: Path, fields: int = 39) -> tuple[float, float]:
    """-> (the best eval AUC of scikit-learn's logistic regression over C, that C): one-hot ids weighted by their
    values, as the baseline reads them."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from bench.quality_baselines import indexed

    (tr_ids, tr_v, tr_y), (ev_ids, ev_v, ev_y) = (indexed(sample / part, fields) for part in ("train", "eval"))
    width = int(max(tr_ids.max(), ev_ids.max())) + 1

    def matrix(ids, values):
        rows = np.repeat(np.arange(len(ids)), ids.shape[1])
        return csr_matrix((values.ravel(), (rows, ids.ravel())), shape=(len(ids), width))

    train_x, eval_x = matrix(tr_ids, tr_v), matrix(ev_ids, ev_v)
    best = (float("-inf"), float("nan"))
    for c in (0.01, 0.03, 0.1, 0.3):
        model = LogisticRegression(C=c, max_iter=500, solver="lbfgs").fit(train_x, tr_y)
        best = max(best, (float(roc_auc_score(ev_y, model.predict_proba(eval_x)[:, 1])), c))
    return best


def measure(quick: bool, context: dict, pairs: int | None = None) -> dict:
    pairs = (2 if quick else 3) if pairs is None else pairs
    result = section(
        "The logistic-regression baseline beside DeepFM",
        f"costs under {MAX_COST:.0%} of the step on the demo's settings (on by default); its eval AUC within "
        f"{MAX_GAP} of scikit-learn's logistic regression tuned over C, on the demo sample and a held-out one",
        f"`python -m bench.baseline --pairs {pairs}` (bench/baseline.py): `dfm launch {CONFIG} --local` on `dfm data "
        f"synth {' '.join(DEMO)}`, one epoch with `hyperparameters.baseline` true and false alternated; "
        f"4 epochs on it and on `--seed 8`, against scikit-learn's LogisticRegression (C in 0.01..1, the best)",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-baseline-"))
    rows = []
    try:
        demo = synth(work / "demo", *DEMO)
        steps = step_cost_in_process(demo)
        result["data"]["step_cost"] = steps
        add_table(
            result,
            ["baseline", "ms per step (alternated blocks)", "median"],
            [
                [
                    state,
                    ", ".join(fmt(t, 2) for t in steps["ms_per_step"][state]),
                    fmt(statistics.median(steps["ms_per_step"][state]), 2),
                ]
                for state in ("on", "off")
            ],
            "The recipe's training step in one process, batch 512 (1-minute load average at the end: "
            f"{steps['load']:.1f} on {os.cpu_count()} cores):",
        )
        verdict(
            result,
            f"the baseline costs under {MAX_COST:.0%} of the step (one process)",
            steps["cost"] < MAX_COST,
            f"{steps['cost']:+.1%} per step with it on",
        )
        cost = step_cost(demo, work, pairs) if pairs else None
        result["data"]["cost"] = cost
        if cost is not None:
            add_table(
                result,
                ["baseline", "examples/s (each run)", "median"],
                [
                    [
                        state,
                        ", ".join(fmt(s) for s in cost["speeds"][state]),
                        fmt(statistics.median(cost["speeds"][state])),
                    ]
                    for state in ("on", "off")
                ],
                f"Speed of one epoch, runs alternated (1-minute load average at each start: "
                f"{', '.join(f'{x:.1f}' for x in cost['load'])} on {os.cpu_count()} cores):",
            )
            result["notes"].append(
                f"Whole 2-host runs: {cost['cost']:+.1%} of the examples/s with it on against off (medians); on this "
                "shared machine the runs' speeds spread more than that, so the one-process step above is the measure."
            )
        held_out = synth(work / "held-out", *HELD_OUT)
        for name, sample in (("demo (seed 7)", demo), ("held-out (seed 8)", held_out)):
            done = launch(sample, work / f"auc-{name.split()[0]}", [])
            aucs = eval_aucs(done.stdout)
            if done.returncode != 0 or not aucs:
                rows.append([name, "not run", "", "", ""])
                continue
            sk_auc, c = tuned_sklearn(sample)
            ours = aucs[-1][1]
            rows.append(
                [
                    name,
                    ", ".join(fmt(b, 4) for _, b in aucs),
                    ", ".join(fmt(a, 4) for a, _ in aucs),
                    f"{fmt(sk_auc, 4)} (C={c})",
                    f"{ours - sk_auc:+.4f}",
                ]
            )
            result["data"][name] = {"per_epoch": aucs, "sklearn": sk_auc, "C": c}
            verdict(
                result,
                f"{name}: the baseline within {MAX_GAP} of a tuned scikit-learn logistic regression",
                abs(ours - sk_auc) <= MAX_GAP,
                f"baseline {ours:.4f}, scikit-learn {sk_auc:.4f} (C={c})",
            )
        add_table(
            result,
            [
                "sample",
                "baseline eval AUC per epoch",
                "DeepFM per epoch",
                "scikit-learn LR, tuned",
                "baseline - scikit-learn (last epoch)",
            ],
            rows,
            "Eval AUC (configs/ps.yaml, 4 epochs):",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    print(json.dumps(measure(False, {}, parser.parse_args().pairs), indent=1))
