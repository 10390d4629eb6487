"""Item: `dfm data prepare --local` (local Spark, every core) against `dfm data convert` (one process) on the same
libsvm click log, back to back in one run; records/s end to end, seconds per stage, and the write stage's tasks
(one per file) for this spec and for configs/prepare-ps.yaml's cluster."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from bench.common import REPO, add_table, fmt, run_sampled, section, verdict

STAGE = re.compile(r"\[dfm-prepare\] (\w+) ([0-9.]+)s")


def _dfm(*args: str, cpu: list[float] | None = None) -> tuple[float, str]:
    """-> (wall seconds, stdout); cpu gets the CPU seconds of the command and everything it started (Spark's JVM
    and Python workers are not waited for by the command, so its rusage misses them): on a shared machine the
    wall time says little, the CPU time still compares."""
    done, wall, by_label = run_sampled(
        [sys.executable, "-m", "launcher.cli", *args], lambda process: "all", timeout=3600, cwd=REPO
    )
    if done.returncode:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1])
    if cpu is not None:
        cpu.append(sum(by_label.values()))
    return wall, done.stdout


def _spec(work: Path) -> Path:
    spec = {
        "name": "bench-prepare",
        "role": "arn:aws:iam::123456789012:role/dfm",
        "region": "us-east-1",
        "framework": {"version": "2.14", "python": "py310"},
        "output": "s3://dfm-bench/out/",
        "entry_point": "deepfm-ps",
        "instance": {"type": "ml.c5.2xlarge", "count": 2},
        "distribution": "parameter_server",
        "data": {"s3_shard": True, "train": "s3://dfm-bench/train/", "eval": "s3://dfm-bench/eval/"},
        "prepare": {
            "input": {"uri": "s3://dfm-bench/clicks/", "format": "libsvm", "local": str(work / "clicks/train")},
            "eval_fraction": 0.05,
            "stats": False,
        },
        "local": {"channels": {"train": str(work / "out/train"), "eval": str(work / "out/eval")}},
    }
    path = work / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _write_tasks() -> dict[str, dict]:
    from launcher.compile import compile_spec
    from launcher.data import prepare_job

    found = {}
    for name, path in (
        ("bench spec (1 x ml.m5.4xlarge)", None),
        ("configs/prepare-ps.yaml", REPO / "configs/prepare-ps.yaml"),
    ):
        if path is None:
            with tempfile.TemporaryDirectory() as work:
                found[name] = prepare_job.write_tasks(compile_spec(str(_spec(Path(work)))).spec)
        else:
            found[name] = prepare_job.write_tasks(compile_spec(str(path)).spec)
    return found


def measure(quick: bool, context: dict) -> dict:
    rows = 100_000 if quick else 1_000_000
    result = section(
        "Data preparation on local Spark",
        "prepare --local (Spark, every core) at least 2x convert's "
        "records/s (one process), with shuffle, eval split and the job's layout on top; "
        "configs/prepare-ps.yaml writes with at least a task per vCPU",
        f"`dfm data synth --format libsvm --rows {rows:,} --files 8`, then `dfm data prepare SPEC "
        "--local` (2 hosts x 1 worker, 5% eval, shuffle) and `dfm data convert --files 2`; "
        "`bench/prepare.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-prepare-"))
    try:
        _dfm(
            "data",
            "synth",
            "--format",
            "libsvm",
            "--rows",
            str(rows),
            "--files",
            "8",
            "--out",
            str(work / "clicks"),
            "--seed",
            "5",
        )
        cpu: list[float] = []
        loads = [os.getloadavg()[0]]  # the machine's load when each tool starts: the wall times depend on it
        convert_s, _ = _dfm(
            "data", "convert", str(work / "clicks/train"), "--out", str(work / "converted"), "--files", "2", cpu=cpu
        )
        loads.append(os.getloadavg()[0])
        prepare_s, output = _dfm("data", "prepare", str(_spec(work)), "--local", cpu=cpu)
        stages = {name: float(s) for name, s in STAGE.findall(output)}
        report = json.loads((work / "out/prepare/prepare.json").read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    add_table(
        result,
        ["tool", "seconds", "records/s", "CPU seconds", "records per CPU second"],
        [
            [
                "dfm data convert (1 process)",
                fmt(convert_s, 1),
                fmt(rows / convert_s),
                fmt(cpu[0], 1),
                fmt(rows / cpu[0]),
            ],
            [
                "dfm data prepare --local (Spark local[*])",
                fmt(prepare_s, 1),
                fmt(rows / prepare_s),
                fmt(cpu[1], 1),
                fmt(rows / cpu[1]),
            ],
        ],
    )
    add_table(
        result,
        ["stage", "seconds"],
        [[name, fmt(s, 1)] for name, s in stages.items()]
        + [["JVM start, planning, Python workers (rest)", fmt(prepare_s - sum(stages.values()), 1)]],
        caption="prepare's stages ([dfm-prepare] lines)",
    )
    ratio = (rows / prepare_s) / (rows / convert_s)
    verdict(
        result,
        "prepare at least 2x convert",
        ratio >= 2,
        f"prepare {fmt(rows / prepare_s)} records/s = {fmt(ratio, 2)}x convert's {fmt(rows / convert_s)}",
    )
    tasks = _write_tasks()
    add_table(
        result,
        ["spec", "cluster vCPUs", "files per worker", "write tasks (train + eval)"],
        [
            [name, t["cluster_vcpus"], t["files_per_worker"], f"{t['train_files']} + {t['eval_files']}"]
            for name, t in tasks.items()
        ],
        caption="the write stage: one task per file",
    )
    ps = tasks["configs/prepare-ps.yaml"]
    verdict(
        result,
        "configs/prepare-ps.yaml writes with a task per vCPU",
        ps["train_files"] >= ps["cluster_vcpus"],
        f"{ps['train_files']} train-file tasks on {ps['cluster_vcpus']} vCPUs",
    )
    result["notes"].append(
        "Scaling on SageMaker (on paper): read, parse, split, balance and encode are per input split with no data "
        "movement; one shuffle moves each encoded output record once over the network to the executor writing its "
        "file; writing is local and the ProcessingOutputs upload it. Time ~ input / (instances x cores) + one "
        "shuffle of the output size."
    )
    result["data"] = {
        "rows": rows,
        "convert_s": convert_s,
        "prepare_s": prepare_s,
        "convert_cpu_s": cpu[0],
        "prepare_cpu_s": cpu[1],
        "load_average": os.getloadavg(),
        "load_at_start": {"convert": loads[0], "prepare": loads[1]},
        "stages": stages,
        "train_rows": report["train"]["rows"],
        "write_tasks": tasks,
    }
    return result


if __name__ == "__main__":  # python -m bench.prepare [--quick]
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
