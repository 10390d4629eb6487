"""Local distributed runs, as weak scaling: one simulated host on k cores against n hosts on k cores each (each
host's processes confined to its own cores, `local.cores_per_host`), for the parameter server, Horovod and
MultiWorkerMirrored at the demo's model and the DeepFM paper's; and the older rows where every host shares all of
this machine's cores. The runs and what their output says are bench/distributed_runs.py's; this module measures and
reports: examples/s, the ratio to one host, and where a step's time goes (each process's CPU in the steady part).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from launcher.data.synth import DEFAULT_FEATURE_SIZE, DEFAULT_FIELD_SIZE
from bench.common import add_table, fmt, median, section, verdict
from bench.distributed_runs import (
    BATCH,
    CORES,
    EVAL_CHIEF,
    EVAL_WORKERS,
    HOSTS,
    LOG_EVERY,
    LOG_GOAL,
    LOG_RUN_STEPS,
    MODELS,
    OLD_CLOSURE,
    PS,
    PS_GOAL,
    SHARED_STEPS,
    WEAK,
    Runs,
    distinct_ids_per_batch,
    efficiency,
    host_busy,
    logging_runs,
    make_data,
    run_all,
    shared_runs,
    shares,
    steady_rates,
    weak_runs,
)


def _steady_columns(measured: Runs, key, cores: int) -> list[str]:
    """CPU ms per 1,000 examples, each host's cores busy, each process's share of a core: steady part only."""
    steady = [(s, cpu, n) for s, cpu, n in measured.steady[key] if cpu and s == s and n > 0]
    if not steady:
        return ["n/a", "n/a", "n/a"]
    per_k = median([1e6 * sum(cpu.values()) / n for s, cpu, n in steady])
    busy = [host_busy(cpu, s, cores) for s, cpu, _ in steady]
    hosts = sorted({host for sample in busy for host in sample})
    busy_text = ", ".join(f"{host} {fmt(100 * median([b.get(host, 0.0) for b in busy]))}%" for host in hosts)
    per_process = shares([{k: v / s for k, v in cpu.items()} for s, cpu, _ in steady], percent=True)
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
        f"{PS_GOAL}x 1 host; watching: the 2-host parameter server logging every {LOG_EVERY[0]} steps >= "
        f"{LOG_GOAL}x its speed at {LOG_EVERY[1]}",
        "`dfm launch configs/ps.yaml --local`, `configs/horovod.yaml --local`, `configs/mirrored-gpu.yaml --local` "
        "(and `configs/hetero-ps.yaml --local` on shared cores) on synthetic data, "
        "`--set local.cores_per_host=N`; "
        "examples/s from the entry points' metric lines; `bench/distributed.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-distributed-"))
    try:
        data = make_data(work, 131_072)
        distinct = distinct_ids_per_batch(data["train"], BATCH)
        runs = {**weak_runs(data, quick), **logging_runs(data, quick), **shared_runs(data, quick, machine_cpus)}
        (work / "runs").mkdir()
        measured = run_all(runs, repetitions, quick, work / "runs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _weak_report(result, runs, measured, own_cores)
    logging_report(result, measured, own_cores)
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


def logging_report(result: dict, measured: Runs, own_cores: bool) -> None:
    """The 2-host parameter-server run logging every LOG_EVERY steps: steady examples/s, the goal on their ratio."""
    keys = [("log", PS, "demo", every) for every in LOG_EVERY]
    rows, rates = [], {}
    for key in keys:
        if key in measured.failures:
            rows.append([key[3], "not run", "", "", "", measured.failures[key]])
            continue
        rates[key] = median(steady_rates(measured, key))
        rows.append(
            [
                key[3],
                fmt(rates[key]),
                fmt(median(measured.rates[key])),
                fmt(median(measured.loads[key]), 1),
                *_steady_columns(measured, key, CORES)[1:],
                "ok" if own_cores else "time-shared (too few cores)",
            ]
        )
    add_table(
        result,
        [
            "log_steps",
            "examples/s (steady, median)",
            "examples/s (train lines, median)",
            "load (1 min) at start",
            "each host's cores busy (steady)",
            "each process, % of a core (steady)",
            "run",
        ],
        rows,
        caption=f"Watching: {PS}, {MODELS['demo'].label}, {HOSTS} hosts x {CORES} core, logging every "
        + " or ".join(map(str, LOG_EVERY))
        + " steps",
    )
    goal = f"{PS}, {HOSTS} hosts: logging every {LOG_EVERY[0]} steps >= {LOG_GOAL}x its speed at {LOG_EVERY[1]}"
    if len(rates) < len(keys):
        verdict(result, goal, None, "not run")
        return
    often, seldom = (rates[key] for key in keys)
    detail = f"{fmt(often)} vs {fmt(seldom)} examples/s ({often / seldom:.2f}x)"
    verdict(result, goal, often / seldom >= LOG_GOAL if own_cores else None, detail)


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
                shares(measured.roles[key]),
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
        + f"{steps}; `--set hyperparameters.epochs=0` (the data repeats to max_steps) and `eval_steps` = max_steps "
        "(one evaluation, after the last train line; eval_steps 0 would evaluate after every pass), eval_batches 2, "
        "no checkpoints or export. Each log step ends a window, where "
        "the parameter server's chief joins the closures and reads the metrics: at the paper's size, logging every "
        "10 steps gave the chief 18% of a "
        "worker's CPU and every 40 steps 11%; the configs log every 50, as the demo's full runs do (a 2-host window "
        "is then 25 steps a worker, closures of 16 and 9 steps at 8 local steps). The batch is per worker (parameter "
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
        f"{cpus}`), demo model, max_steps {SHARED_STEPS[quick]}, log_steps 25, `epochs=100` (an evaluation at every "
        "pass over the data). 2 hosts there means a "
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
        "Watching: the 2-host parameter-server row of the demo's model (as above: configs/ps.yaml, each host on a "
        f"core of its own) with max_steps {LOG_RUN_STEPS[quick]} and log_steps {' or '.join(map(str, LOG_EVERY))}. The "
        "chief's train lines end no window (it reads the step while the closures run), so the windows are the same "
        "at either interval. examples/s (steady): the steps between the first and the last train line times the "
        "batch, over the seconds between them (0.2 s sampling); a line's own examples_per_sec counts the closures "
        "that ended since the last line, a lumpy share at 20 steps.",
        f"{repetitions} run(s) of each row, in an order that rotates between rounds.",
    ]
