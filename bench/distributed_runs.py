"""The local distributed runs the bench times (bench/distributed.py reports them): the rows (weak scaling, one
simulated host on k cores against n hosts on k cores each, and the older shared-core rows), the synthetic data, each
run launched with its CPU sampled per process, and what its output says: examples/s from the entry points' own
`[dfm] train ... examples_per_sec=` lines (which `--local` echoes with the process label in front; the first report
of each process, start-up and tracing, is dropped) and the steady part between the first and the last train line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from launcher.data.synth import DEFAULT_FEATURE_SIZE, DEFAULT_FIELD_SIZE
from bench.common import DFM, REPO, synth, fmt, median, run_sampled_window

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
# Watching must not slow the job: the 2-host parameter-server run (demo model, weak scaling) logging every 20 steps
# against every 50, its train lines read while the closures run (deepfm_coordinator), no window ending at them
LOG_EVERY = (20, 50)
LOG_GOAL = 0.9  # examples/s at log_steps 20 >= this x at 50
LOG_RUN_STEPS = {True: 600, False: 1600}  # quick -> max_steps of those rows
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
    # full runs log as the configs do (every 50 steps: 25 a worker, closures of 16 and 9 at 8 local steps)
    "demo": Model("demo: 64x32, batch 1024", "[64,32]", 1024, {True: 100, False: 800}, {True: 25, False: 50}, 1.4),
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


def make_data(work: Path, rows: int) -> dict[str, Path]:
    data = synth(work / "data", "--rows", str(rows), "--files", "8", "--eval-rows", "8192", "--seed", "3")
    split = work / "split"
    subprocess.run(
        [
            DFM,
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
    from launcher.metric_lines import parse_metric_line

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
    argv = [DFM, "launch", config, "--local", "--run-dir", str(run_dir), "--timeout", str(timeout_s)]
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


def shares(samples: list[dict[str, float]], divide: float = 1.0, percent: bool = False) -> str:
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
        lists = [field.name for field in fields(cls) if field.name != "failures"]
        return cls(**{name: {key: [] for key in keys} for name in lists}, failures={})


def weak_runs(data: dict, quick: bool) -> dict:
    files = {"train": data["train"], "eval": data["eval"]}
    split = {
        **{name: data["split"] / name for name in ("train", "train-1", "train-2", "train-3")},
        "eval": data["eval"],
    }
    runs = {}
    for kind, (config, channels, extra) in WEAK.items():
        for name, model in MODELS.items():
            for hosts in (1, HOSTS):
                sets = weak_sets(model, hosts, model.steps[quick], model.log_steps[quick]) + extra
                runs[("weak", kind, name, hosts)] = (config, sets, files if channels == "files" else split)
    return runs


def weak_sets(model: Model, hosts: int, steps: int, log_steps: int) -> list[str]:
    """The --set lines of a weak-scaling run: `hosts` hosts on CORES cores each, `steps` steps, one evaluation at the
    end, no checkpoint or export."""
    return [
        f"instance.count={hosts}",
        f"local.cores_per_host={CORES}",
        f"hyperparameters.deep_layers={model.deep_layers}",
        f"hyperparameters.batch_size={model.batch}",
        f"hyperparameters.max_steps={steps}",
        f"hyperparameters.log_steps={log_steps}",
        "hyperparameters.checkpoint_steps=100000",
        "hyperparameters.export=false",
        "hyperparameters.epochs=0",  # repeat the data to max_steps
        # one evaluation, at the end (eval_steps 0 would evaluate after every pass over the data)
        f"hyperparameters.eval_steps={steps}",
        "hyperparameters.eval_batches=2",
    ]


def logging_runs(data: dict, quick: bool) -> dict:
    """The 2-host parameter-server run at the demo's model (configs/ps.yaml, each host on its own core) logging every
    LOG_EVERY steps: ("log", PS, "demo", log_steps) -> (config, sets, channels)."""
    files = {"train": data["train"], "eval": data["eval"]}
    steps = LOG_RUN_STEPS[quick]
    return {
        ("log", PS, "demo", every): ("configs/ps.yaml", weak_sets(MODELS["demo"], HOSTS, steps, every), files)
        for every in LOG_EVERY
    }


def steady_rates(measured: "Runs", key) -> list[float]:
    """Examples/s of each repetition between its first and last train line (the steps between them times a step's
    examples, over the seconds between them): unlike the lines' own examples_per_sec, the same measure at any
    log_steps (a parameter-server line counts the closures that ended since the last, a lumpy share)."""
    return [examples / seconds for seconds, _, examples in measured.steady[key] if seconds == seconds and seconds > 0]


SHARED_STEPS = {True: 100, False: 400}  # quick -> max_steps of the shared-core rows (demo model)


def shared_runs(data: dict, quick: bool, cpus: int) -> dict:
    steps = SHARED_STEPS[quick]
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


def run_all(runs: dict, repetitions: int, quick: bool, run_dir: Path) -> Runs:
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
    if key[0] == "log":
        return MODELS[key[2]].batch
    if key[0] != "weak":
        return BATCH
    return MODELS[key[2]].batch * (1 if key[1] in (PS, PS_ASYNC) else key[3])
