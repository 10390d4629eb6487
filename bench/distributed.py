"""Local distributed runs, as weak scaling: one simulated host on k cores against n hosts on k cores each (each
host's processes confined to its own cores, `local.cores_per_host`), for the parameter server, Horovod and
MultiWorkerMirrored at the demo's model and the DeepFM paper's; and the older rows where every host shares all of
this machine's cores.

Throughput comes from the entry points' own `[dfm] train ... examples_per_sec=` lines, which `--local`
echoes with the process label in front; the first report of each process (start-up, tracing) is dropped. CPU
time is sampled per process; the steady part (between the first and the last train line) says where a step's
time goes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from launcher.data.synth import DEFAULT_FEATURE_SIZE, DEFAULT_FIELD_SIZE
from bench.common import REPO, add_table, fmt, median, run_sampled_window, section, verdict

BATCH = 1024
PS_GOAL = 0.7  # shared cores: 2 hosts (chief, 2 workers, 2 ps) vs 1 host's single process, same cores
HOSTS, CORES = 2, 1  # weak scaling: HOSTS hosts on CORES cores each against one host on CORES cores
PS = "parameter server"
PS_ASYNC = "parameter server, local_steps=1 (asynchronous SGD: an exchange every step)"
MWMS = "MultiWorkerMirrored"
HOROVOD = "Horovod"
OLD_CLOSURE = "2 hosts, steps_per_closure=1 and local_steps=1 (one step per closure)"
ADAM = "2 hosts, optimizer adam (the scripts' default; configs/ps.yaml trains with adagrad)"
EVAL_WORKERS = "2 hosts, 8 evaluations of all of eval on the workers"
EVAL_CHIEF = "2 hosts, 8 evaluations of all of eval on the chief (DFM_PS_EVAL=chief)"
EVALUATED = re.compile(r"\[dfm\] evaluated .* in ([0-9.]+) s$")
TRAIN_LINE = re.compile(r"\[dfm\] train step=.*examples_per_sec=")


@dataclass(frozen=True)
class Model:
    label: str
    deep_layers: str
    batch: int
    steps: dict  # quick -> max_steps
    log_steps: dict  # quick -> log_steps: each log ends a window, where the chief joins and reads the metrics
    goal: float  # parameter server: HOSTS hosts >= goal x one host


MODELS = {
    "demo": Model("demo: 64x32, batch 1024", "[64,32]", 1024, {True: 100, False: 400}, {True: 25, False: 25}, 1.4),
    "paper": Model(
        "paper: 400x400x400, batch 4096", "[400,400,400]", 4096, {True: 80, False: 240}, {True: 20, False: 40}, 1.7
    ),
}
# distribution -> (config, which channels, --set lines of every run); Horovod one rank per host
WEAK = {
    PS: ("configs/ps.yaml", "files", []),  # its local_steps: 8
    PS_ASYNC: ("configs/ps.yaml", "files", ["hyperparameters.local_steps=1"]),
    # Open MPI's ranks busy-poll while they wait: on a host of one core that takes the core from the rank's own
    # TensorFlow threads (2 hosts ran at under half the speed they do yielding)
    HOROVOD: (
        "configs/horovod.yaml",
        "split",
        ["distribution.horovod.processes_per_host=1", "environment.OMPI_MCA_mpi_yield_when_idle=1"],
    ),
    MWMS: ("configs/mirrored-gpu.yaml", "files", []),
}


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
            "--hosts",
            "2",  # ShardedByS3Key: each of 2 hosts gets its own file of every channel
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
    return run_sampled_window(argv, process_label, timeout_s + 120, TRAIN_LINE.search, cwd=REPO)


def process_label(process) -> str:
    """A process of a local run by its host and part: `algo-1 ps`, `algo-1 chief`, `algo-2 worker` (TF_CONFIG's
    task), `algo-1 script` (one host, Horovod's ranks), `mpirun`, `launcher`."""
    environ, command = process.environ(), " ".join(process.cmdline())  # psutil.Error: the sampler skips it
    return label_of(environ, command, process.cwd())


def label_of(environ: dict, command: str, cwd: str = "") -> str:
    """The host is the folder `--local` runs the process in (`<run>/hosts/<host>/...`): a ps server has no
    SM_CURRENT_HOST, and under MPI every rank has the first host's."""
    if "launcher.cli" in command or command.endswith("/dfm") or "/dfm " in command:
        return "launcher"
    if any(word in command for word in ("mpirun", "horovodrun", "orted", "prterun")):
        return "mpirun"
    task = json.loads(environ.get("TF_CONFIG") or "{}").get("task", {}).get("type")
    role = {"master": "chief"}.get(task, task) if task else "script"
    parts = Path(cwd).parts
    host = parts[parts.index("hosts") + 1] if "hosts" in parts[:-1] else environ.get("SM_CURRENT_HOST")
    return f"{host} {role}" if host else role


def efficiency(one: float, many: float, hosts: int) -> float:
    """Weak-scaling efficiency: what `hosts` hosts did against `hosts` times one host."""
    return many / (hosts * one)


STEP = re.compile(r"\bstep=([0-9]+)")


def examples_between(first: str, last: str, per_step: int) -> int:
    """Examples trained between two train lines: their steps apart times the examples of a step (a parameter
    server's step is one worker's batch; a synchronous step is every replica's)."""
    steps = [int(m.group(1)) if (m := STEP.search(line)) else 0 for line in (first, last)]
    return (steps[1] - steps[0]) * per_step


def host_busy(cpu: dict[str, float], seconds: float, cores: int) -> dict[str, float]:
    """Each host's share of its cores that its processes used over `seconds` ({label: CPU s}, labels
    `host part`); the launcher and mpirun belong to no host."""
    busy: dict[str, float] = {}
    for name, value in cpu.items():
        host = name.split(" ", 1)[0] if " " in name else None
        if host:
            busy[host] = busy.get(host, 0.0) + value / (seconds * cores)
    return dict(sorted(busy.items()))


def _shares(samples: list[dict[str, float]], divide: float = 1.0, percent: bool = False) -> str:
    """Median of each label over the repetitions, the largest first."""
    names = {name for sample in samples for name in sample}
    values = {name: median([sample.get(name, 0.0) for sample in samples]) / divide for name in names}
    ordered = sorted(values.items(), key=lambda kv: -kv[1])
    if percent:
        return ", ".join(f"{name} {fmt(100 * value)}%" for name, value in ordered if value >= 0.005)
    return ", ".join(f"{name} {fmt(value, 1)}" for name, value in ordered if value >= 0.05)


@dataclass
class Runs:
    """Every repetition's figures of each run."""

    rates: dict
    walls: dict
    cpus: dict
    roles: dict
    steady: dict  # [(seconds, {label: CPU s}, examples)] between the first and the last train line
    loads: dict
    evals: dict
    failures: dict

    @classmethod
    def empty(cls, keys) -> "Runs":
        return cls(*({key: [] for key in keys} for _ in range(7)), failures={})


def _weak_runs(data: dict, quick: bool) -> dict:
    files = {"train": data["train"], "eval": data["eval"]}
    split = {
        **{name: data["split"] / name for name in ("train", "train-1", "train-2", "train-3")},
        "eval": data["eval"],
    }
    runs = {}
    for kind, (config, channels, extra) in WEAK.items():
        for name, model in MODELS.items():
            for hosts in (1, HOSTS):
                sets = [
                    f"instance.count={hosts}",
                    f"local.cores_per_host={CORES}",
                    f"hyperparameters.deep_layers={model.deep_layers}",
                    f"hyperparameters.batch_size={model.batch}",
                    f"hyperparameters.max_steps={model.steps[quick]}",
                    f"hyperparameters.log_steps={model.log_steps[quick]}",
                    "hyperparameters.checkpoint_steps=100000",
                    "hyperparameters.export=false",
                    "hyperparameters.epochs=0",  # repeat the data to max_steps: one evaluation, at the end
                    "hyperparameters.eval_batches=2",
                    *extra,
                ]
                runs[("weak", kind, name, hosts)] = (config, sets, files if channels == "files" else split)
    return runs


def _shared_runs(data: dict, quick: bool, cpus: int) -> dict:
    steps = MODELS["demo"].steps[quick]
    common = [
        f"local.cores_per_host={cpus}",  # every host on all of this machine's cores
        f"hyperparameters.max_steps={steps}",
        "hyperparameters.log_steps=25",
        "hyperparameters.checkpoint_steps=100000",
        "hyperparameters.export=false",
        "hyperparameters.eval_batches=2",
        "hyperparameters.epochs=100",
        f"hyperparameters.batch_size={BATCH}",
    ]
    files = {"train": data["train"], "eval": data["eval"]}
    split = {
        **{name: data["split"] / name for name in ("train", "train-1", "train-2", "train-3")},
        "eval": data["eval"],
    }
    every_eighth = [f"hyperparameters.eval_steps={steps // 8}", "hyperparameters.eval_batches=0"]
    rows = {
        (PS, "1 host"): ("configs/ps.yaml", ["instance.count=1"], files),
        (PS, "2 hosts"): ("configs/ps.yaml", ["instance.count=2"], files),
        (PS, OLD_CLOSURE): (
            "configs/ps.yaml",
            ["instance.count=2", "hyperparameters.steps_per_closure=1", "hyperparameters.local_steps=1"],
            files,
        ),
        (PS, ADAM): (
            "configs/ps.yaml",
            [
                "instance.count=2",
                "hyperparameters.optimizer=adam",
                "hyperparameters.learning_rate=0.002",
                "hyperparameters.local_steps=1",
            ],
            files,
        ),
        (PS, EVAL_WORKERS): ("configs/ps.yaml", ["instance.count=2", *every_eighth], files),
        (PS, EVAL_CHIEF): (
            "configs/ps.yaml",
            ["instance.count=2", *every_eighth, "environment.DFM_PS_EVAL=chief"],
            files,
        ),
        (PS, "ps group: 2 workers + 1 ps host"): (
            "configs/hetero-ps.yaml",
            [
                "instance.count=2",
                "distribution.parameter_server.ps.count=1",
                f"hyperparameters.feature_size={DEFAULT_FEATURE_SIZE}",
            ],
            files,
        ),
        (HOROVOD, "1 rank"): (
            "configs/horovod.yaml",
            ["instance.count=1", "distribution.horovod.processes_per_host=1"],
            split,
        ),
        (HOROVOD, "2 ranks"): (
            "configs/horovod.yaml",
            ["instance.count=1", "distribution.horovod.processes_per_host=2"],
            split,
        ),
        (MWMS, "1 host"): ("configs/mirrored-gpu.yaml", ["instance.count=1"], files),
        (MWMS, "2 hosts"): ("configs/mirrored-gpu.yaml", ["instance.count=2"], files),
    }
    return {("shared", *key): (config, common + sets, channels) for key, (config, sets, channels) in rows.items()}


def _horovod_missing() -> str | None:
    from bench.broadcast_memory import horovod_python

    if horovod_python() is None:
        return "n/a: Horovod runs in the tf-2.12 runtime, which is not set up here (scripts/runtime.sh tf-2.12)"
    return None


def _run_all(runs: dict, repetitions: int, quick: bool, run_dir: Path) -> Runs:
    done_runs = Runs.empty(runs)
    keys = list(runs)
    missing = _horovod_missing()
    for key in keys:
        if HOROVOD in key and missing:
            done_runs.failures[key] = missing
    for round_ in range(repetitions):
        shift = (round_ * 7) % len(keys)  # each round starts elsewhere, so drift in the load falls on all runs
        for key in keys[shift:] + keys[:shift]:
            if key in done_runs.failures:
                continue
            config, sets, channels = runs[key]
            load = os.getloadavg()[0]
            done, wall, by_role, (seconds, steady_cpu, first, last) = _launch(
                config, sets, channels, run_dir, 300 if quick else 900
            )
            output = done.stdout + done.stderr
            rate, reports = throughput(output)
            if done.returncode != 0 or not reports:
                tail = [line for line in output.strip().splitlines() if line.strip()]
                done_runs.failures[key] = f"exit {done.returncode}" + (f": {tail[-1][:200]}" if tail else "")
                continue
            done_runs.rates[key].append(rate)
            done_runs.walls[key].append(wall)
            done_runs.cpus[key].append(sum(by_role.values()))
            done_runs.roles[key].append(by_role)
            done_runs.steady[key].append((seconds, steady_cpu, examples_between(first, last, per_step(key))))
            done_runs.loads[key].append(load)
            done_runs.evals[key].append(eval_seconds(output))
    return done_runs


def per_step(key) -> int:
    """Examples of one step of a run: a weak-scaling row's batch, times its hosts under a synchronous strategy."""
    if key[0] != "weak":
        return BATCH
    return MODELS[key[2]].batch * (1 if key[1] in (PS, PS_ASYNC) else key[3])


def _steady_columns(measured: Runs, key, cores: int) -> list[str]:
    """CPU ms per 1,000 examples, each host's cores busy, each process's share of a core: steady part only."""
    steady = [(s, cpu, n) for s, cpu, n in measured.steady[key] if cpu and s == s and n > 0]
    if not steady:
        return ["n/a", "n/a", "n/a"]
    per_k = median([1e6 * sum(cpu.values()) / n for s, cpu, n in steady])
    busy = [host_busy(cpu, s, cores) for s, cpu, _ in steady]
    hosts = sorted({host for sample in busy for host in sample})
    busy_text = ", ".join(f"{host} {fmt(100 * median([b.get(host, 0.0) for b in busy]))}%" for host in hosts)
    per_process = _shares([{k: v / s for k, v in cpu.items()} for s, cpu, _ in steady], percent=True)
    return [fmt(per_k, 1), busy_text or "n/a", per_process]


def busiest_host_ms(measured: Runs, key) -> float:
    """CPU ms per 1,000 examples of the host that spends the most (steady part, median over repetitions): with
    every host on cores of its own, the one that bounds the run's speed."""
    values = []
    for seconds, cpu, examples in measured.steady[key]:
        per_host: dict[str, float] = {}
        for name, value in cpu.items():
            if " " in name:
                host = name.split(" ", 1)[0]
                per_host[host] = per_host.get(host, 0.0) + value
        if per_host and examples > 0:
            values.append(1e6 * max(per_host.values()) / examples)
    return median(values)


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (1 if quick else 3)
    machine_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    own_cores = machine_cpus >= HOSTS * CORES
    result = section(
        "Local distributed runs",
        f"weak scaling, each host on {CORES} core(s) of its own: parameter server {HOSTS} hosts >= "
        f"{MODELS['demo'].goal}x one host at the demo's model and >= {MODELS['paper'].goal}x at the paper's; "
        "Horovod and MultiWorkerMirrored recorded the same way; on all cores shared: parameter server 2 hosts >= "
        f"{PS_GOAL}x 1 host",
        "`dfm launch configs/ps.yaml --local`, `configs/horovod.yaml --local`, `configs/mirrored-gpu.yaml --local` "
        "(and `configs/hetero-ps.yaml --local` on shared cores) on synthetic data, "
        "`--set local.cores_per_host=N`; "
        "examples/s from the entry points' metric lines; `bench/distributed.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-distributed-"))
    try:
        data = _make_data(work, 131_072)
        distinct = distinct_ids_per_batch(data["train"], BATCH)
        runs = {**_weak_runs(data, quick), **_shared_runs(data, quick, machine_cpus)}
        (work / "runs").mkdir()
        measured = _run_all(runs, repetitions, quick, work / "runs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _weak_report(result, runs, measured, own_cores)
    _shared_report(result, runs, measured, machine_cpus)
    result["notes"] += _notes(quick, repetitions, distinct, machine_cpus, own_cores)
    result["data"] = {
        "examples_per_s": {" / ".join(map(str, k)): median(v) for k, v in measured.rates.items() if v},
        "failures": {" / ".join(map(str, k)): v for k, v in measured.failures.items()},
    }
    return result


def _weak_report(result: dict, runs: dict, measured: Runs, own_cores: bool) -> None:
    rows = []
    for kind in WEAK:
        for name, model in MODELS.items():
            one_key, many_key = (("weak", kind, name, hosts) for hosts in (1, HOSTS))
            one = median(measured.rates[one_key])
            for key in (one_key, many_key):
                hosts = key[3]
                where = f"{hosts} host{'s' if hosts > 1 else ''} x {CORES} core"
                if key in measured.failures:
                    rows.append(
                        [kind, model.label, where, "not run", "", "", "", "", "", "", "", measured.failures[key]]
                    )
                    continue
                rate = median(measured.rates[key])
                rows.append(
                    [
                        kind,
                        model.label,
                        where,
                        fmt(rate),
                        fmt(rate / one, 2) + "x",
                        fmt(efficiency(one, rate, hosts), 2),
                        fmt(median(measured.loads[key]), 1),
                        fmt(median(measured.walls[key]), 1),
                        *_steady_columns(measured, key, CORES),
                        "ok" if own_cores or hosts == 1 else "time-shared (too few cores)",
                    ]
                )
            if one_key in measured.failures or many_key in measured.failures:
                reason = measured.failures.get(many_key) or measured.failures.get(one_key)
                verdict(result, f"{kind}, {model.label}: {HOSTS} hosts vs 1", None, reason)
                continue
            many = median(measured.rates[many_key])
            one_ms, many_ms = busiest_host_ms(measured, one_key), busiest_host_ms(measured, many_key)
            detail = (
                f"{fmt(one)} vs {fmt(many)} examples/s ({many / one:.2f}x, efficiency "
                f"{efficiency(one, many, HOSTS):.2f}); busiest host's CPU per 1,000 examples {fmt(one_ms, 1)} vs "
                f"{fmt(many_ms, 1)} ms, so with each host's cores fully its own at most {one_ms / many_ms:.2f}x"
            )
            if kind == PS and own_cores:
                verdict(
                    result,
                    f"{kind}, {model.label}: {HOSTS} hosts >= {model.goal}x 1 host",
                    many / one >= model.goal,
                    detail,
                )
            else:
                verdict(result, f"{kind}, {model.label}: {HOSTS} hosts vs 1 recorded", None, detail)
    add_table(
        result,
        [
            "distribution",
            "model",
            "hosts x cores each",
            "examples/s (median)",
            "vs 1 host",
            "efficiency",
            "load (1 min) at start",
            "wall s (incl. start-up)",
            "CPU ms per 1,000 examples (steady)",
            "each host's cores busy (steady)",
            "each process, % of a core (steady)",
            "run",
        ],
        rows,
        caption=f"Weak scaling: each simulated host confined to {CORES} core(s) of its own "
        f"(`local.cores_per_host={CORES}`)",
    )


def _shared_report(result: dict, runs: dict, measured: Runs, cpus: int) -> None:
    rows = []
    shared = [key for key in runs if key[0] == "shared"]
    for key in shared:
        kind, size = key[1], key[2]
        if key in measured.failures:
            rows.append([kind, size, "not run", "", "", "", "", "", measured.failures[key]])
            continue
        base_key = next(k for k in shared if k[1] == kind)  # each kind's first row: 1 host or rank
        base = median(measured.rates[base_key]) if measured.rates[base_key] else float("nan")
        rate, wall, cpu = (median(getattr(measured, what)[key]) for what in ("rates", "walls", "cpus"))
        rows.append(
            [
                kind,
                size,
                fmt(rate),
                fmt(rate / base, 2) + "x",
                fmt(median(measured.loads[key]), 1),
                fmt(wall, 1),
                f"{fmt(cpu, 1)} ({fmt(100 * cpu / (wall * cpus))}%)",
                _shares(measured.roles[key]),
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
            "load (1 min) at start",
            "wall s (incl. start-up)",
            "CPU s (share of all cores)",
            "CPU s by process",
            "run",
        ],
        rows,
        caption=f"Shared cores: every host's processes on all {cpus} of this machine's cores (demo model)",
    )
    one, two, old = (("shared", PS, size) for size in ("1 host", "2 hosts", OLD_CLOSURE))
    if any(key in measured.failures for key in (one, two)):
        verdict(result, f"{PS}, shared cores: 2 hosts >= {PS_GOAL}x 1 host", None, "not run")
    else:
        a, b = median(measured.rates[one]), median(measured.rates[two])
        c = median(measured.rates[old]) if measured.rates[old] else float("nan")
        verdict(
            result,
            f"{PS}, shared cores: 2 hosts >= {PS_GOAL}x 1 host",
            b / a >= PS_GOAL,
            f"{fmt(a)} vs {fmt(b)} examples/s ({b / a:.2f}x); one step per closure: {fmt(c)} ({c / a:.2f}x)",
        )
    spread, alone = (("shared", PS, size) for size in (EVAL_WORKERS, EVAL_CHIEF))
    if measured.evals[spread] and measured.evals[alone]:
        verdict(
            result,
            f"{PS}, shared cores: evaluation on the workers vs the chief recorded",
            None,
            f"7 evaluations took {fmt(median(measured.evals[spread]), 2)} s on the workers, "
            f"{fmt(median(measured.evals[alone]), 2)} s on the chief; wall {fmt(median(measured.walls[spread]), 1)} "
            f"vs {fmt(median(measured.walls[alone]), 1)} s",
        )


def _notes(quick: bool, repetitions: int, distinct: float, cpus: int, own_cores: bool) -> list[str]:
    steps = ", ".join(f"{m.label}: max_steps {m.steps[quick]}, log_steps {m.log_steps[quick]}" for m in MODELS.values())
    return [
        f"Weak scaling: one host on {CORES} core(s) against {HOSTS} hosts on {CORES} core(s) each, every process of a "
        "host confined to its host's cores (`--set local.cores_per_host=1`; algo-1 on core 0, algo-2 on core 1), as "
        "separate instances would be; efficiency = examples/s of n hosts / (n x examples/s of 1 host). "
        + ("" if own_cores else f"This machine has {cpus} core(s), too few: the hosts time-shared them. ")
        + f"{steps}; `--set hyperparameters.epochs=0` (the data repeats to max_steps, so the one evaluation comes "
        "after the last train line), eval_batches 2, no checkpoints or export. Each log step ends a window, where "
        "the parameter server's chief joins the closures and reads the metrics: at the paper's size, logging every "
        "10 steps gave the chief 18% of a "
        "worker's CPU and every 40 steps 11% (configs log every 50). The batch is per worker (parameter "
        "server) or per replica (Horovod, MultiWorkerMirrored), so n hosts train n batches per step.",
        "Parameter server at n hosts: algo-1 runs a ps server, the chief and the chief's own worker task; algo-2 a ps "
        "server and a worker (`configs/ps.yaml`, File mode, ShardedByS3Key emulated over 8 files), each worker "
        "training 8 local steps between exchanges with the ps (ps.yaml's `local_steps`; the `local_steps=1` rows: "
        "an exchange every step). One host is one process either way. Horovod: "
        "`configs/horovod.yaml` (tf-2.12 runtime, Pipe mode, 4 channels, multi-path) with one rank per host and "
        "`--set environment.OMPI_MCA_mpi_yield_when_idle=1` (a rank waiting in MPI yields its one core). "
        "MultiWorkerMirrored: `configs/mirrored-gpu.yaml` (tf-2.21 runtime, FastFile) with one CPU replica per host.",
        "Steady columns (where a step's time goes): CPU time of each process between the run's first and last train "
        "line (start-up, tracing, the final evaluation and tear-down left out), sampled every 0.2 s: CPU ms per 1,000 "
        "examples over all processes (the figure least disturbed by other work on the machine); each host's cores "
        "busy (a host near 100% is the bottleneck); each process's share of a core, labelled `host part` (TF_CONFIG's "
        "task; `script` for a process without one).",
        "Shared cores: the older rows, every host on all of this machine's cores (`--set local.cores_per_host="
        f"{cpus}`), demo model, `epochs=100` (an evaluation at every pass over the data). 2 hosts there means a "
        "chief, two workers and two ps servers on the same cores. `steps_per_closure=1`: one step and one chief round "
        "trip per closure (the default runs up to 16). Adam: TensorFlow's fused dense updates and lazy Adam's moment "
        "math on the table's ps; `vs 1` is against the 1-host adagrad row. The two `8 evaluations` rows evaluate the "
        "whole `eval` channel (8192 rows) every max_steps/8 steps on the workers (the default) or on the chief alone "
        "(`--set environment.DFM_PS_EVAL=chief`). ps group: `configs/hetero-ps.yaml` with `--set instance.count=2 "
        f"--set distribution.parameter_server.ps.count=1 --set hyperparameters.feature_size={DEFAULT_FEATURE_SIZE}`. "
        "Horovod there: `instance.count=1` with 1 or 2 processes per host.",
        f"Parameter-server lookups: a batch of {BATCH} rows of this data holds {fmt(distinct)} distinct ids on average "
        f"(of {BATCH * DEFAULT_FIELD_SIZE:,} places); a worker reads each once from the ps (DeepFM._lookup).",
        "CPU s: user + system time of every process of the run, start-up included (about 2-3 s of importing "
        "TensorFlow per process). examples/s: per process, the median of its metric lines after the first, then "
        "summed over the processes that report one (rank 0 or the chief reports all workers' examples). "
        "load (1 min): this machine's load average when the run started (other work disturbs confined runs most). "
        "The launcher (relaying output, watching the processes) and this bench's sampler run on no host's cores: "
        "with one host they have the other core to themselves, with two they take a few % of the hosts' cores.",
        f"{repetitions} run(s) of each row, in an order that rotates between rounds.",
    ]
