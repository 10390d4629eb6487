"""Item: the peak memory of the synchronous start-up broadcast (deepfm_collectives).

MultiWorkerMirrored (MirroredCollectives). Before: every variable cast to float64 and concatenated into
one vector, summed, split and cast back (about 7x the float32 state at once). After: each large variable
in its own dtype, small ones packed by dtype. Each contender runs in its own process under
MultiWorkerMirroredStrategy with 2 logical CPU devices as replicas (standing in for 2 GPUs, whose memory
no CPU run can measure), on a table and its Adagrad slot; the peak is the growth of the process's maximum
resident set over the broadcast.

Horovod (HorovodCollectives), 2 ranks under `horovodrun --gloo` in the tf-2.12 runtime (the only one with
Horovod; skipped without it). Before: hvd.broadcast_variables as it was called, each rank receiving into new
tensors and then assigning them (one traced function: the received copies of the whole state can live at
once). After: in place (`inplace=True`), received straight into the variables. The peak is rank 1's (a
receiver), on the same state, differing per rank before the broadcast and checked equal to rank 0's after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pathlib import Path

from bench.common import REPO, add_table, fmt, median, section, verdict

ROWS = {True: 1_000_000, False: 4_000_000}
COLUMNS = 9  # first-order weight + embedding 8
REPLICAS = 2  # logical CPU devices standing in for GPUs

_CHILD = """
import json, resource, sys
sys.path.insert(0, {entrypoints!r})
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as cars

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
def two_cpus(self, cluster_resolver, worker_device):
    return tuple(f"{{worker_device}}/device:CPU:{{i}}" for i in range(2)), "CPU"
cars.CollectiveAllReduceExtended._initialize_local_devices = two_cpus
from deepfm_collectives import MirroredCollectives

strategy = tf.distribute.MultiWorkerMirroredStrategy()
collectives = MirroredCollectives(strategy, 0)
rows, columns, contender = {rows}, {columns}, {contender!r}


def float64_packed(variables):  # the broadcast before this change
    packed = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in variables], axis=0)
    total = collectives._local(collectives._sum(packed))
    for var, part in zip(variables, tf.split(total, [int(tf.size(v)) for v in variables])):
        var.assign(tf.reshape(tf.cast(part, var.dtype), var.shape))


with strategy.scope():
    variables = [tf.Variable(tf.random.stateless_normal([rows, columns], seed=[1, k])) for k in range(2)]
    variables += [tf.Variable(tf.zeros([400, 400])) for _ in range(3)] + [tf.Variable(tf.constant(0, tf.int64))]
broadcast = collectives.broadcast if contender == "after" else float64_packed
small = [tf.Variable(tf.zeros([2]))]
broadcast(small)  # start the collectives (and their threads) before measuring
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
broadcast(variables)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
state = sum(v.shape.num_elements() * v.dtype.size for v in variables)
print(json.dumps({{"peak_growth": (after - before) * 1024, "state": state}}))
"""


_HOROVOD_CHILD = """
import json, resource, sys
sys.path.insert(0, {entrypoints!r})
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd
from deepfm_collectives import HorovodCollectives

hvd.init()
collectives, rank = HorovodCollectives(hvd), hvd.rank()
rows, columns, contender = {rows}, {columns}, {contender!r}


def state(rank):
    return ([tf.random.stateless_normal([rows, columns], seed=[rank, k]) for k in range(2)]
            + [tf.fill([400, 400], float(rank))] * 3 + [tf.constant(2**40 + rank, tf.int64)])


variables = [tf.Variable(value, name=f"v{{k}}") for k, value in enumerate(state(rank))]
if contender == "after":
    broadcast = collectives.broadcast
else:  # the call before this change
    broadcast = lambda variables: hvd.broadcast_variables(variables, root_rank=0)
broadcast([tf.Variable(tf.zeros([2]), name="warm")])  # start the collectives before measuring
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
broadcast(variables)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
exact = all(np.array_equal(v.numpy(), e.numpy()) for v, e in zip(variables, state(0)))
total = sum(v.shape.num_elements() * v.dtype.size for v in variables)
print("RESULT " + json.dumps({{"rank": rank, "peak_growth": (after - before) * 1024, "state": total, "exact": exact}}))
"""


def horovod_python() -> Path | None:
    """The tf-2.12 runtime's interpreter, when it is set up with Horovod (make setup)."""
    from launcher.local.runtime import runtimes_root

    python = runtimes_root() / "tf-2.12" / "bin" / "python"
    return python if python.with_name("horovodrun").exists() else None


def _run_horovod(python: Path, contender: str, rows: int) -> dict:
    """-> rank 1's measurement (a receiver), after checking both ranks hold rank 0's values exactly."""
    code = _HOROVOD_CHILD.format(entrypoints=str(REPO / "entrypoints"), rows=rows, columns=COLUMNS, contender=contender)
    done = subprocess.run(
        [str(python.with_name("horovodrun")), "--gloo", "-np", "2", "-H", "localhost:2", str(python), "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
    )
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT " in line]
    if done.returncode != 0 or len(results) != 2:
        raise RuntimeError(
            (done.stderr or done.stdout).strip().splitlines()[-1]
            if (done.stderr or done.stdout).strip()
            else "no output"
        )
    if not all(r["exact"] for r in results):
        raise RuntimeError(f"Horovod broadcast ({contender}): a rank does not hold rank 0's values")
    return next(r for r in results if r["rank"] == 1)


def _run(contender: str, rows: int) -> dict:
    code = _CHILD.format(entrypoints=str(REPO / "entrypoints"), rows=rows, columns=COLUMNS, contender=contender)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (2 if quick else 3)
    rows = ROWS[quick]
    result = section(
        "Start-up broadcast memory",
        "the synchronous broadcast's peak stays within 3x the float32 state (was ~7x: one float64 copy of everything)",
        f"`bench/broadcast_memory.py`: MultiWorkerMirrored, 2 logical CPU replicas, a {rows:,} x {COLUMNS} table "
        "and its slot plus an MLP; growth of the maximum resident set over one broadcast",
    )
    growth = {"before": [], "after": []}
    state = 0
    for _ in range(repetitions):
        for contender in ("before", "after"):
            measured = _run(contender, rows)
            growth[contender].append(measured["peak_growth"])
            state = measured["state"]
    peaks = {name: median(values) for name, values in growth.items()}
    add_table(
        result,
        ["broadcast", "peak growth (MiB)", "x float32 state"],
        [[name, fmt(peaks[name] / 2**20), fmt(peaks[name] / state, 2) + "x"] for name in ("before", "after")],
        caption=f"float32 state {fmt(state / 2**20)} MiB; median of {repetitions} runs each",
    )
    result["data"] = {"state_bytes": state, **{f"{k}_bytes": v for k, v in peaks.items()}}
    ratio = peaks["after"] / state
    verdict(
        result, "peak <= 3x the state", ratio <= 3, f"after {fmt(ratio, 2)}x, before {fmt(peaks['before'] / state, 2)}x"
    )
    from launcher.rules.gpu import BROADCAST_COPIES

    largest = rows * COLUMNS * 4  # the table (its slot is as large): each large variable travels alone
    copies = peaks["after"] / REPLICAS / largest
    result["data"]["after_copies_per_replica"] = copies
    verdict(
        result,
        f"per replica <= the per-GPU memory rule's {BROADCAST_COPIES} copies of the largest variable",
        copies <= BROADCAST_COPIES,
        f"{fmt(copies, 2)} copies per replica: a margin of "
        f"{fmt(BROADCAST_COPIES - copies, 2)} copy (launcher/rules/gpu.py)",
    )
    _measure_horovod(result, rows, repetitions)
    return result


HOROVOD_GOAL = "Horovod in place: a receiving rank's peak grows by under a quarter of the largest variable"


def _measure_horovod(result: dict, rows: int, repetitions: int) -> None:
    python = horovod_python()
    if python is None:
        verdict(result, HOROVOD_GOAL, None, "not measured: no tf-2.12 runtime with Horovod (make setup)")
        return
    growth = {"before": [], "after": []}
    state = 0
    for _ in range(repetitions):
        for contender in ("before", "after"):
            measured = _run_horovod(python, contender, rows)
            growth[contender].append(measured["peak_growth"])
            state = measured["state"]
    peaks = {name: median(values) for name, values in growth.items()}
    add_table(
        result,
        ["Horovod broadcast (rank 1)", "peak growth (MiB)", "x float32 state"],
        [[name, fmt(peaks[name] / 2**20), fmt(peaks[name] / state, 2) + "x"] for name in ("before", "after")],
        caption=f"2 ranks, `horovodrun --gloo` in the tf-2.12 runtime; before = hvd.broadcast_variables, "
        f"after = in place; float32 state {fmt(state / 2**20)} MiB; median of {repetitions} runs each",
    )
    result["data"].update({f"horovod_{k}_bytes": v for k, v in peaks.items()})
    largest = rows * COLUMNS * 4
    copies = {name: peak / largest for name, peak in peaks.items()}
    result["data"]["horovod_after_copies"] = copies["after"]
    verdict(
        result,
        HOROVOD_GOAL,
        copies["after"] < 0.25,
        f"after {fmt(copies['after'], 2)} copies of the largest variable, before {fmt(copies['before'], 2)}",
    )
