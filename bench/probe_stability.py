"""Item: the local probe's stability. The same 4-candidate `dfm probe --local` of configs/ps.yaml on one host run
three times on the demo sample: an MLP of [64, 32] (the configs') and one of [2048, 2048] (about 200 times its
multiply-adds), each on two instance types that are the same cores here. Recorded: each run's candidates (the median
window's examples/s, the slowest and fastest window, how many windows), the groups it could not tell apart and its
recommendation. Goals: every run recommends the same settings (the small MLP, no instance type) and reports each
MLP's two instance types indistinguishable.

Batch sizes were the first choice of candidates that truly differ; on these cores they do not: batch 32, 256 and
4096 trained the demo model at about the same rate (two stopped runs of this item, under other work, reported in
BENCHMARKS.md report 17).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, add_table, fmt, run_measured, section, synth, verdict
from bench.quality import SAMPLES

CONFIG = "configs/ps.yaml"
RUNS = 3
TRIES = ("hyperparameters.deep_layers=[64,32],[2048,2048]", "instance.type=ml.c5.9xlarge,ml.c5.18xlarge")
BASE = ("instance.count=1", "distribution=none")  # one process: what differs is the model, not the layout
EXPECTED_TIES = [[1, 2], [3, 4]]  # candidates 1, 2: [64, 32] on either type; 3, 4: [2048, 2048]
EXPECTED_SET = ["instance.count=1", "distribution=none", "hyperparameters.deep_layers=[64,32]"]


def _argv(work: Path, sample: Path, run: int, max_steps: int) -> list[str]:
    argv = [sys.executable, "-m", "launcher.cli", "probe", CONFIG, "--local", "--output", "json"]
    argv += ["--max-steps", str(max_steps), "--name", f"bench-probe-{run}"]
    for line in (*BASE, f"local.run_dir={work / 'runs'}"):
        argv += ["--set", line]
    for text in TRIES:
        argv += ["--try", text]
    return argv + ["--channel", f"train={sample / 'train'}", "--channel", f"eval={sample / 'eval'}"]


def _probe(work: Path, sample: Path, run: int, max_steps: int) -> tuple[dict, float]:
    done, wall_s, _ = run_measured(_argv(work, sample, run, max_steps), capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"dfm probe exited {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout), wall_s


def _speed(entry: dict) -> str:
    spread = entry.get("spread") or {}
    if not entry["examples_per_sec"]:
        return entry["status"] + (f": {entry['reason']}" if entry["reason"] else "")
    return f"{fmt(entry['examples_per_sec'])} ({fmt(spread['low'])}-{fmt(spread['high'])})"


def _recommended(document: dict) -> list[str] | None:
    recommendation = document["recommendation"]
    return recommendation["set"] if recommendation else None


def measure(quick: bool, context: dict) -> dict:
    max_steps = 60 if quick else 120
    command = (
        f"`dfm probe {CONFIG} --local --max-steps {max_steps} "
        + " ".join(f"--set {line}" for line in BASE)
        + " "
        + " ".join(f"--try {t}" for t in TRIES)
        + f"` {RUNS} times on the demo sample (`dfm data synth` as `make demo` makes it, given as --channel); "
        "`bench/probe_stability.py`"
    )
    result = section(
        "Local probe: the same probe three times",
        "every run recommends the same settings (the [64, 32] MLP, no instance type) and reports the instance types "
        "indistinguishable (candidates 1, 2 and 3, 4)",
        command,
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-probe-"))
    try:
        sample = synth(work / "sample", *SAMPLES["demo"][1])
        runs = [_probe(work, sample, run, max_steps) for run in range(1, RUNS + 1)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for run, (document, wall_s) in enumerate(runs, start=1):
        for entry in sorted(document["candidates"], key=lambda e: e["candidate"]):
            rows.append(
                [
                    run,
                    entry["candidate"],
                    " ".join(entry["settings"]),
                    _speed(entry),
                    (entry.get("spread") or {}).get("windows", ""),
                    ", ".join(map(str, entry["same_as"])) or "-",
                ]
            )
        recommended = _recommended(document)
        rows.append(
            [
                run,
                "recommended",
                " ".join(recommended) if recommended else "none",
                f"probe wall time {fmt(wall_s)} s",
                "",
                "; ".join(",".join(map(str, g)) for g in document["indistinguishable"]) or "-",
            ]
        )
    add_table(
        result,
        ["run", "candidate", "settings", "examples/s: median (slowest-fastest window)", "windows", "same as"],
        rows,
        caption=f"max_steps {max_steps}, a train line every {max(1, max_steps // 10)} steps; 'same as': the "
        "candidates it could not tell apart",
    )
    recommendations = [_recommended(document) for document, _ in runs]
    same = all(r == EXPECTED_SET for r in recommendations)
    verdict(
        result,
        "the same recommendation in every run: deep_layers [64, 32], no instance type",
        same,
        "; ".join(" ".join(r) if r else "none" for r in recommendations),
    )
    ties = [document["indistinguishable"] for document, _ in runs]
    verdict(
        result,
        "each MLP's two instance types indistinguishable in every run, the two MLPs told apart",
        all(t == EXPECTED_TIES for t in ties),
        "; ".join(str(t) for t in ties),
    )
    result["data"] = {
        "max_steps": max_steps,
        "runs": [
            {
                "candidates": [
                    {k: e[k] for k in ("candidate", "settings", "status", "examples_per_sec", "spread", "same_as")}
                    for e in document["candidates"]
                ],
                "indistinguishable": document["indistinguishable"],
                "recommendation": document["recommendation"],
                "launch": document["launch"],
                "wall_s": wall_s,
            }
            for document, wall_s in runs
        ],
    }
    return result


if __name__ == "__main__":  # python -m bench.probe_stability [--quick]
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
