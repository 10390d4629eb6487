"""Item: watching must not slow the job. Only the distributed item's watching rows: the 2-host parameter-server run
(demo model, each host on its own core) logging every 20 steps against every 50, its repetitions alternating. The
distributed item runs the same rows among its others; this one takes minutes instead of an hour."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bench.common import section
from bench.distributed import logging_report
from bench.distributed_runs import CORES, HOSTS, LOG_EVERY, LOG_GOAL, logging_runs, make_data, run_all


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (1 if quick else 3)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    result = section(
        "Watching a parameter-server run",
        f"the 2-host parameter server logging every {LOG_EVERY[0]} steps >= {LOG_GOAL}x its speed at {LOG_EVERY[1]}",
        "`dfm launch configs/ps.yaml --local --set local.cores_per_host=1 --set hyperparameters.log_steps=N` on "
        "synthetic data; steady examples/s between the first and last train line; `bench/watching.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-watching-"))
    try:
        data = make_data(work, 131_072)
        (work / "runs").mkdir()
        measured = run_all(logging_runs(data, quick), repetitions, quick, work / "runs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logging_report(result, measured, cpus >= HOSTS * CORES)
    return result
