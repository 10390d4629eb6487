"""Item 5: `dfm launch ... --local` with 1 vs 2 simulated hosts (parameter server, MultiWorkerMirrored) and
ranks (Horovod).

Throughput comes from the entry points' own `[dfm] train ... examples_per_sec=` lines, which `--local`
echoes with the process label in front; the first report of each process (start-up, tracing) is dropped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from launcher.data.synth import DEFAULT_FEATURE_SIZE, DEFAULT_FIELD_SIZE
from bench.common import REPO, add_table, fmt, median, run_sampled, section, verdict

STEPS = {True: 100, False: 400}
BATCH = 1024
PS_GOAL = 0.7  # 2 hosts (chief, 2 workers, 2 ps) vs 1 host's single process, same 2 cores
MWMS = "MultiWorkerMirrored"
OLD_CLOSURE = "2 hosts, steps_per_closure=1 (one step per closure, as before)"
ADAM = "2 hosts, optimizer adam (the scripts' default; configs/ps.yaml trains with adagrad)"
EVAL_WORKERS = "2 hosts, 8 evaluations of all of eval on the workers"
EVAL_CHIEF = "2 hosts, 8 evaluations of all of eval on the chief (DFM_PS_EVAL=chief, as before)"
EVALUATED = re.compile(r"\[dfm\] evaluated .* in ([0-9.]+) s$")


def _dfm() -> str:
    return str(Path(sys.executable).with_name("dfm"))


def _make_data(work: Path, rows: int) -> dict[str, Path]:
    data = work / "data"
    subprocess.run(
        [
            _dfm(),
            "data",
            "synth",
            "--out",
            str(data),
            "--rows",
            str(rows),
            "--files",
            "8",
            "--eval-rows",
            "8192",
            "--seed",
            "3",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    split = work / "split"
    subprocess.run(
        [
            _dfm(),
            "data",
            "split",
            *sorted(str(p) for p in (data / "train").iterdir()),
            "--out",
            str(split),
            "--workers",
            "4",
            "--multi-path",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return {"train": data / "train", "eval": data / "eval", "split": split}


def distinct_ids_per_batch(train: Path, batch: int) -> float:
    """Mean count of distinct ids in a batch of `batch` rows of the first training file: what a parameter-server
    worker's lookup reads from the ps each step (DeepFM._lookup), against batch x field_size places."""
    from launcher.data.tfrecord import read_examples

    ids = read_examples([sorted(train.iterdir())[0]], DEFAULT_FIELD_SIZE)[1]
    counts = [len(np.unique(ids[start : start + batch])) for start in range(0, len(ids) - batch + 1, batch)]
    return float(np.mean(counts))


def throughput(output: str) -> tuple[float, int]:
    """(examples/s summed over the processes that report it, number of reports used)."""
    from launcher.local.progress import parse_metric_line

    per_process: dict[str, list[float]] = {}
    for line in output.splitlines():
        parsed = parse_metric_line(line)
        if parsed is None or parsed[0] != "train" or "examples_per_sec" not in parsed[1]:
            continue
        label = line.split("]", 1)[0] if line.startswith("[") else ""
        per_process.setdefault(label, []).append(parsed[1]["examples_per_sec"])
    steady = {label: values[1:] or values for label, values in per_process.items()}
    total = sum(median(values) for values in steady.values())
    return (total if steady else float("nan")), sum(len(v) for v in steady.values())


def eval_seconds(output: str) -> float:
    """Seconds the chief's evaluations took, the first (tracing, the workers' datasets) left out."""
    times = [float(m.group(1)) for m in map(EVALUATED.search, output.splitlines()) if m]
    return sum(times[1:]) if len(times) > 1 else float("nan")


def _launch(config: str, sets: list[str], channels: dict[str, Path], run_dir: Path, timeout_s: int):
    # Each run is a new job under run_dir with its own hosts' checkpoint folders (dfm derives checkpoint_dir
    # and refuses it when set), so no run resumes from the previous one.
    argv = [_dfm(), "launch", config, "--local", "--run-dir", str(run_dir), "--timeout", str(timeout_s)]
    for item in sets:
        argv += ["--set", item]
    for name, path in channels.items():
        argv += ["--channel", f"{name}={path}"]
    return run_sampled(argv, _role, timeout=timeout_s + 120, cwd=REPO)


def _role(process) -> str:
    """A process of a local run by its part: its TF_CONFIG task type (the ps servers, the chief, the
    workers), the launcher, or the scripts (one host, Horovod's ranks)."""
    environ, command = process.environ(), " ".join(process.cmdline())  # psutil.Error: run_sampled skips the sample
    task = json.loads(environ.get("TF_CONFIG") or "{}").get("task", {}).get("type")
    if task:
        return {"ps": "ps servers", "master": "chief", "chief": "chief"}.get(task, task + "s")
    return "launcher" if "launcher.cli" in command or command.endswith("/dfm") or "/dfm " in command else "scripts"


def _by_role(samples: list[dict[str, float]]) -> str:
    """Median CPU seconds of each part of a run over its repetitions, the largest first."""
    names = {name for sample in samples for name in sample}
    cpu = {name: median([sample.get(name, 0.0) for sample in samples]) for name in names}
    return ", ".join(
        f"{name} {fmt(value, 1)}" for name, value in sorted(cpu.items(), key=lambda kv: -kv[1]) if value >= 0.05
    )


def measure(quick: bool, context: dict) -> dict:
    steps = STEPS[quick]
    repetitions = context.get("repetitions") or (1 if quick else 3)
    result = section(
        "Local distributed runs",
        f"parameter server: 2 hosts >= {PS_GOAL}x 1 host on the same cores; Horovod and MultiWorkerMirrored recorded, "
        "not judged (2 cores bound every run, so a second host or rank adds processes, not cores)",
        f"`dfm launch configs/ps.yaml --local`, `configs/hetero-ps.yaml --local`, `configs/horovod.yaml --local` and "
        f"`configs/mirrored-gpu.yaml --local` on synthetic data, "
        f"max_steps {steps}; examples/s from the entry points' metric lines; `bench/distributed.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-distributed-"))
    try:
        data = _make_data(work, 131_072)
        distinct = distinct_ids_per_batch(data["train"], BATCH)
        split_channels = {name: data["split"] / name for name in ("train", "train-1", "train-2", "train-3")}
        common = [
            f"hyperparameters.max_steps={steps}",
            "hyperparameters.log_steps=25",
            "hyperparameters.checkpoint_steps=100000",
            "hyperparameters.export=false",
            "hyperparameters.eval_batches=2",
            "hyperparameters.epochs=100",
            f"hyperparameters.batch_size={BATCH}",
        ]
        files = {"train": data["train"], "eval": data["eval"]}
        pipe_files = {**split_channels, "eval": data["eval"]}
        every_eighth = [f"hyperparameters.eval_steps={steps // 8}", "hyperparameters.eval_batches=0"]
        runs = {
            ("parameter server", "1 host"): ("configs/ps.yaml", ["instance.count=1"], files),
            ("parameter server", "2 hosts"): ("configs/ps.yaml", ["instance.count=2"], files),
            ("parameter server", OLD_CLOSURE): (
                "configs/ps.yaml",
                ["instance.count=2", "hyperparameters.steps_per_closure=1"],
                files,
            ),
            ("parameter server", ADAM): (
                "configs/ps.yaml",
                ["instance.count=2", "hyperparameters.optimizer=adam", "hyperparameters.learning_rate=0.002"],
                files,
            ),
            ("parameter server", EVAL_WORKERS): ("configs/ps.yaml", ["instance.count=2", *every_eighth], files),
            ("parameter server", EVAL_CHIEF): (
                "configs/ps.yaml",
                ["instance.count=2", *every_eighth, "environment.DFM_PS_EVAL=chief"],
                files,
            ),
            ("parameter server", "ps group: 2 workers + 1 ps host"): (
                "configs/hetero-ps.yaml",
                [
                    "instance.count=2",
                    "distribution.parameter_server.ps.count=1",
                    f"hyperparameters.feature_size={DEFAULT_FEATURE_SIZE}",
                ],
                files,
            ),
            ("Horovod", "1 rank"): (
                "configs/horovod.yaml",
                ["instance.count=1", "distribution.horovod.processes_per_host=1"],
                pipe_files,
            ),
            ("Horovod", "2 ranks"): (
                "configs/horovod.yaml",
                ["instance.count=1", "distribution.horovod.processes_per_host=2"],
                pipe_files,
            ),
            (MWMS, "1 host"): ("configs/mirrored-gpu.yaml", ["instance.count=1"], files),
            (MWMS, "2 hosts"): ("configs/mirrored-gpu.yaml", ["instance.count=2"], files),
        }
        (work / "runs").mkdir()
        rates: dict[tuple, list[float]] = {key: [] for key in runs}
        walls: dict[tuple, list[float]] = {key: [] for key in runs}
        cpus: dict[tuple, list[float]] = {key: [] for key in runs}
        evals: dict[tuple, list[float]] = {key: [] for key in runs}
        roles: dict[tuple, list[dict[str, float]]] = {key: [] for key in runs}
        failures: dict[tuple, str] = {}
        for round_ in range(repetitions):
            for key, (config, sets, channels) in runs.items():
                if key in failures:
                    continue
                done, wall, by_role = _launch(config, common + sets, channels, work / "runs", 300 if quick else 900)
                rate, reports = throughput(done.stdout + done.stderr)
                if done.returncode != 0 or not reports:
                    tail = [line for line in (done.stdout + done.stderr).strip().splitlines() if line.strip()]
                    failures[key] = f"exit {done.returncode}" + (f": {tail[-1][:200]}" if tail else "")
                    continue
                rates[key].append(rate)
                walls[key].append(wall)
                cpus[key].append(sum(by_role.values()))
                roles[key].append(by_role)
                evals[key].append(eval_seconds(done.stdout + done.stderr))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    for (kind, size), values in rates.items():
        if (kind, size) in failures:
            rows.append([kind, size, "not run", "", "", "", "", failures[(kind, size)]])
            continue
        base_key = next(key for key in runs if key[0] == kind)  # each kind's first row: 1 host or rank
        base = median(rates[base_key]) if rates[base_key] else float("nan")
        wall, cpu = median(walls[(kind, size)]), median(cpus[(kind, size)])
        rows.append(
            [
                kind,
                size,
                fmt(median(values)),
                fmt(median(values) / base, 2) + "x",
                fmt(wall, 1),
                f"{fmt(cpu, 1)} ({fmt(100 * cpu / (wall * (os.cpu_count() or 1)))}%)",
                _by_role(roles[(kind, size)]),
                "ok",
            ]
        )
    add_table(
        result,
        [
            "distribution",
            "size",
            "examples/s (median)",
            "vs 1",
            "wall s (incl. start-up)",
            "CPU s (share of all cores)",
            "CPU s by process",
            "run",
        ],
        rows,
    )
    for kind in ("parameter server", "Horovod", MWMS):
        keys = [key for key in runs if key[0] == kind][:2]  # 1 vs 2 hosts or ranks
        if any(key in failures for key in keys):
            verdict(
                result,
                f"{kind}: 1 vs 2 recorded",
                None,
                "not run: " + "; ".join(f"{k[1]}: {failures[k]}" for k in keys if k in failures),
            )
        else:
            one, two = (median(rates[key]) for key in keys)
            if kind == "parameter server":
                old = median(rates[(kind, OLD_CLOSURE)]) if rates[(kind, OLD_CLOSURE)] else float("nan")
                verdict(
                    result,
                    f"{kind}: 2 hosts >= {PS_GOAL}x 1 host",
                    two / one >= PS_GOAL,
                    f"{fmt(one)} vs {fmt(two)} examples/s ({two / one:.2f}x); one step per closure: "
                    f"{fmt(old)} ({old / one:.2f}x)",
                )
            else:
                verdict(
                    result, f"{kind}: 1 vs 2 recorded", None, f"{fmt(one)} vs {fmt(two)} examples/s ({two / one:.2f}x)"
                )
    spread, alone = (("parameter server", size) for size in (EVAL_WORKERS, EVAL_CHIEF))
    if evals[spread] and evals[alone]:
        verdict(
            result,
            "parameter server: evaluation on the workers vs the chief recorded",
            None,
            f"7 evaluations took {fmt(median(evals[spread]), 2)} s on the workers, {fmt(median(evals[alone]), 2)} s "
            f"on the chief; wall {fmt(median(walls[spread]), 1)} vs {fmt(median(walls[alone]), 1)} s",
        )
    result["notes"] += [
        "Parameter server: `configs/ps.yaml` (File mode, ShardedByS3Key emulated over 8 files) with "
        "`--set instance.count=1|2`; 2 hosts means a chief, two workers (one of them the chief's own child "
        "process) and two ps servers on the same 2 cores.",
        f"Parameter-server lookups: a batch of {BATCH} rows of this data holds {fmt(distinct)} distinct ids on average "
        f"(of {BATCH * DEFAULT_FIELD_SIZE:,} places); a worker reads each once from the ps (DeepFM._lookup).",
        "Parameter server closures: each `ClusterCoordinator` closure runs up to `steps_per_closure` training "
        "steps (default 16) on its worker; the `steps_per_closure=1` row is the old behaviour, one step and one "
        "chief round trip per closure.",
        "Adam under parameter servers: its dense updates are TensorFlow's fused ResourceApplyAdam and lazy Adam's "
        "moment math runs on the table's ps, so a step sends gradients only (before, each moment went to the worker "
        "and back every step); `vs 1` is against the 1-host adagrad row.",
        "Parameter-server evaluation: the two `8 evaluations` rows evaluate the whole `eval` channel (8192 rows) every "
        "max_steps/8 steps, on the workers (each its share, the default) or on the chief alone while the workers "
        "wait (`--set environment.DFM_PS_EVAL=chief`); the verdict sums the chief's `evaluated ... in S s` lines "
        "after the first (which traces).",
        "Parameter servers on their own group: `configs/hetero-ps.yaml` with `--set instance.count=2 --set "
        f"distribution.parameter_server.ps.count=1 --set hyperparameters.feature_size={DEFAULT_FEATURE_SIZE}`: "
        "the chief and worker 0 on algo-1, worker 1 on algo-2, one ps on algo-3 (no data), all on the same 2 cores.",
        "Horovod: `configs/horovod.yaml` (Pipe mode, 4 channels, multi-path) with `--set instance.count=1 "
        "--set distribution.horovod.processes_per_host=1|2`.",
        "MultiWorkerMirrored: `configs/mirrored-gpu.yaml` (TF 2.21 runtime, FastFile, ShardedByS3Key emulated "
        "over 8 files) with `--set instance.count=1|2`: one worker per host, one CPU replica each (no GPU).",
        "CPU s: user + system time of every process of the run (sampled every 0.2 s); a share of the cores far "
        "below 100% means the run waited (collectives waiting for the slower rank, start-up, or CPUs taken by other "
        "work on a shared machine) rather than computed. By process: the processes grouped by their TF_CONFIG task "
        "(ps servers, chief, workers), the launcher, and the scripts of runs without TF_CONFIG (one host, Horovod's "
        "ranks); each includes its start-up (about 2-3 s of importing TensorFlow per process).",
        "examples/s: per process, the median of its metric lines after the first, then summed over the "
        "processes that report one.",
        f"Common overrides: {' '.join('--set ' + s for s in common)}; {repetitions} run(s) per size.",
    ]
    result["data"] = {
        "examples_per_s": {" / ".join(k): median(v) for k, v in rates.items() if v},
        "failures": {" / ".join(k): v for k, v in failures.items()},
    }
    return result
