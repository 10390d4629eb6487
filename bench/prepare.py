"""Item: `dfm data prepare configs/prepare-ps.yaml --local` as shipped (local Spark: 5% eval, negatives kept at a
quarter, shuffle, statistics, 64 + 64 files) against `dfm data convert` (one process) on the same synthetic libsvm
click log. Each command runs confined to one core or to two (sched_setaffinity, as `taskset -c 0` / `-c 0,1`; local
Spark's `local[*]` follows the affinity), the contenders alternated round by round. Reported: CPU seconds per record
of each command's whole process tree (Spark's JVM and Python workers included), prepare's wall time on 1 and 2 cores
and its seconds per stage, and the same spec on 1,000 rows (the fixed cost: JVM, planning, 128 write tasks). A
prepare on 1,000 rows runs first, unmeasured: the first --local run on a machine writes the class archive the JVM
starts from."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, add_table, alternate, fmt, median, run_sampled, section, verdict

STAGE = re.compile(r"\[dfm-prepare\] (\w+) ([0-9.]+)s")
SPEC = REPO / "configs/prepare-ps.yaml"
SMALL_ROWS = 1000


def _group(process) -> str:
    """Which part of a command a process is: Spark's JVM, its Python workers, or the dfm command itself."""
    command = " ".join(process.cmdline())
    if "java" in process.name() or "org.apache.spark" in command:
        return "JVM"
    if "launcher.cli" in command:
        return "dfm"
    return "Python workers"  # pyspark.daemon and the workers it forks (and Spark's launch scripts, ~0 s)


def _dfm(args: list[str], cwd: Path, cores: set[int] | None = None) -> dict:
    """One command (confined to `cores`): wall and CPU seconds of its process tree by group, its stages, the
    machine's 1-minute load when it started."""
    load = os.getloadavg()[0]
    confine = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    done, wall, by_group = run_sampled(
        [sys.executable, "-m", "launcher.cli", *args],
        _group,
        timeout=3600,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        preexec_fn=confine,
    )
    if done.returncode:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1])
    stages = {name: float(s) for name, s in STAGE.findall(done.stdout)}
    return {"wall": wall, "cpu": sum(by_group.values()), "by_group": by_group, "stages": stages, "load": load}


def _synth(folder: Path, rows: int) -> None:
    folder.mkdir(parents=True)
    _dfm(["data", "synth", "--format", "libsvm", "--rows", str(rows), "--files", "8", "--out", "data/clicks"], folder)


def _write_tasks() -> dict:
    from launcher.compile import compile_spec
    from launcher.data import prepare_job

    return prepare_job.write_tasks(compile_spec(str(SPEC)).spec)


def _span(values: list[float], digits: int = 1) -> str:
    low, high = min(values), max(values)
    return fmt(low, digits) if fmt(low, digits) == fmt(high, digits) else f"{fmt(low, digits)}-{fmt(high, digits)}"


def measure(quick: bool, context: dict) -> dict:
    rows = 100_000 if quick else 1_000_000
    repetitions = context.get("repetitions") or (1 if quick else 3)
    both = os.cpu_count() >= 2
    core_sets = {"1 core": {0}, **({"2 cores": {0, 1}} if both else {})}
    result = section(
        "Data preparation on local Spark",
        "`dfm data prepare configs/prepare-ps.yaml --local` as shipped: at most 2x the converter's CPU time per "
        "record, and at least 1.6x faster on 2 cores than on 1; configs/prepare-ps.yaml writes with at least a task "
        "per vCPU",
        f"`dfm data synth --format libsvm --rows {rows:,} --files 8 --out data/clicks`, then, alternated "
        f"{repetitions}x: `taskset -c 0 dfm data convert data/clicks/train --out converted --files 2 --force`, "
        "`taskset -c 0 dfm data prepare configs/prepare-ps.yaml --local --force` and the same with `-c 0,1`; "
        f"the prepare also on {SMALL_ROWS:,} rows; `bench/prepare.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-prepare-"))
    big, small = work / "big", work / "small"
    runs: dict[str, list[dict]] = {}

    def contender(name: str, args: list[str], folder: Path, cores: set[int]):
        def run() -> float:
            done = _dfm(args, folder, cores)
            runs.setdefault(name, []).append(done)
            return done["wall"]

        return run

    prepare = ["data", "prepare", str(SPEC), "--local", "--force"]
    try:
        _synth(big, rows)
        _synth(small, SMALL_ROWS)
        # the first --local run on a machine writes the JVM's class archive as it ends (~5 s, once): not measured
        _dfm(prepare, small)
        contenders = {
            "convert": contender(
                "convert",
                ["data", "convert", "data/clicks/train", "--out", "converted", "--files", "2", "--force"],
                big,
                {0},
            )
        }
        for label, cores in core_sets.items():
            contenders[f"prepare, {label}"] = contender(f"prepare, {label}", prepare, big, cores)
            contenders[f"prepare {SMALL_ROWS:,} rows, {label}"] = contender(
                f"prepare {SMALL_ROWS:,} rows, {label}", prepare, small, cores
            )
        alternate(contenders, repetitions)
        stats = json.loads((big / "data/prepared/prepare/stats.json").read_text())
        report = json.loads((big / "data/prepared/prepare/prepare.json").read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)

    convert_cpu = median([r["cpu"] for r in runs["convert"]]) / rows
    table = []
    for name, done in runs.items():
        count = SMALL_ROWS if "rows" in name else rows
        cpu = [r["cpu"] for r in done]
        groups = {g: median([r["by_group"].get(g, 0.0) for r in done]) for g in ("JVM", "Python workers", "dfm")}
        table.append(
            [
                name,
                _span([r["wall"] for r in done]),
                fmt(count / median([r["wall"] for r in done])),
                _span(cpu),
                fmt(median(cpu) / count * 1e6, 1),
                "" if "rows" in name else fmt(median(cpu) / count / convert_cpu, 2) + "x",
                " / ".join(fmt(groups[g], 1) for g in groups) if name != "convert" else "",
            ]
        )
    add_table(
        result,
        [
            "command",
            "wall s",
            "records/s",
            "CPU s",
            "CPU us per record",
            "vs convert",
            "JVM / Python workers / dfm CPU s",
        ],
        table,
        caption=f"{rows:,} rows (and {SMALL_ROWS:,} for the fixed cost); ranges over {repetitions} alternated rounds",
    )
    stage_rows = []
    for label in core_sets:
        done = runs[f"prepare, {label}"]
        names = list(done[0]["stages"])
        rest = median([r["wall"] - sum(r["stages"].values()) for r in done])
        stage_rows.append([label, *(fmt(median([r["stages"][n] for r in done]), 1) for n in names), fmt(rest, 1)])
    add_table(
        result,
        ["prepare", *names, "rest: CLI, JVM start, planning, stop"],
        stage_rows,
        caption="prepare's stages ([dfm-prepare] lines), median seconds",
    )
    prepare_cpu = median([r["cpu"] for r in runs[f"prepare, {list(core_sets)[-1]}"]]) / rows
    verdict(
        result,
        "prepare at most 2x the converter's CPU per record",
        prepare_cpu <= 2 * convert_cpu,
        f"{fmt(prepare_cpu * 1e6, 1)} us against {fmt(convert_cpu * 1e6, 1)} us: "
        f"{fmt(prepare_cpu / convert_cpu, 2)}x ({list(core_sets)[-1]})",
    )
    if both:
        ratios = [one["wall"] / two["wall"] for one, two in zip(runs["prepare, 1 core"], runs["prepare, 2 cores"])]
        verdict(
            result,
            "prepare at least 1.6x faster on 2 cores than on 1",
            median(ratios) >= 1.6,
            f"{fmt(median(ratios), 2)}x (each round's 1-core wall / 2-core wall: "
            f"{', '.join(fmt(r, 2) for r in ratios)})",
        )
    tasks = _write_tasks()
    add_table(
        result,
        ["spec", "cluster vCPUs", "files per worker", "write tasks (train + eval)"],
        [
            [
                "configs/prepare-ps.yaml",
                tasks["cluster_vcpus"],
                tasks["files_per_worker"],
                f"{tasks['train_files']} + {tasks['eval_files']}",
            ]
        ],
        caption="the write stage: one task per file",
    )
    verdict(
        result,
        "configs/prepare-ps.yaml writes with a task per vCPU",
        tasks["train_files"] >= tasks["cluster_vcpus"],
        f"{tasks['train_files']} train-file tasks on {tasks['cluster_vcpus']} vCPUs",
    )
    loads = [r["load"] for done in runs.values() for r in done]
    result["notes"].append(
        f"1-minute load average when each command started: {fmt(min(loads), 1)}-{fmt(max(loads), 1)} "
        f"(the machine's {os.cpu_count()} cores are shared): wall times depend on it, CPU seconds much less."
    )
    result["notes"].append(
        "Scaling on SageMaker (on paper): read, parse, statistics, split, balance and encode are per input split "
        "with no data movement (the statistics' partial aggregates are merged on the driver); one shuffle moves "
        "each encoded output record once over the network to the executor writing its file; writing is local and "
        "the ProcessingOutputs upload it. Time ~ input / (instances x cores) + one shuffle of the output size."
    )
    result["data"] = {
        "rows": rows,
        "repetitions": repetitions,
        "runs": runs,
        "convert_cpu_us_per_record": convert_cpu * 1e6,
        "prepare_cpu_us_per_record": prepare_cpu * 1e6,
        "train_rows": report["train"]["rows"],
        "feature_size": stats["feature_size"],
        "write_tasks": tasks,
    }
    return result


if __name__ == "__main__":  # python -m bench.prepare [--quick]
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
