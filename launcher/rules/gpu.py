"""Rules about GPUs: float16 where there is no GPU, and a model that must fit in one GPU's memory.

Under Horovod and MultiWorkerMirrored every GPU holds a whole replica of the model: the embedding tables,
their optimizer slots, and at its peak the start-up broadcast's copies of the largest table or, when the
embedding gradients are all-reduced densely, a step's table-sized gradients and their packs.
The parameter-server layout keeps the tables in host memory instead (rules.ps_group checks that side). Both rules
read the hyperparameters as the bundled scripts parse them (rules.hparams.script_values).
"""

from __future__ import annotations

from typing import Any

from launcher.facts import catalog
from launcher.facts import contract
from launcher.plans import hosts
from launcher.plans import tasks
from launcher.rules.findings import Finding, error, warning
from launcher.rules.hparams import script_values
from launcher.rules.ps_group import table_rows
from launcher.spec import Spec

MIXED_PRECISION = "hyperparameters.mixed_precision"
REPLICATED = {"horovod": "Horovod rank", "multi_worker_mirrored": "MultiWorkerMirrored replica"}


def check_mixed_precision_on_cpu(spec: Spec) -> list[Finding]:
    """float16 matmuls on a CPU run several times slower than float32: the bundled scripts' `auto` turns it
    on only where there are GPUs, so `true` on a CPU-only instance is a mistake."""
    values = script_values(spec)  # None: not the bundled scripts, or a bad value (reported on its own)
    info = catalog.instance(spec.instance.type)
    if values is None or info is None or info.gpus or values.mixed_precision != "float16":
        return []
    return [
        error(
            MIXED_PRECISION,
            f"{spec.instance.type} has no GPU, and float16 on a CPU runs several times slower "
            "than float32: use mixed_precision: auto (float16 only on GPUs) or false, or a GPU instance type",
        )
    ]


def replicas(spec: Spec) -> int:
    """Model copies in sync across the job (Horovod ranks, or MWMS replicas: one per GPU)."""
    host = tasks.host_tasks(spec.instance.type, spec.distribution_kind, spec.processes_per_host)
    return spec.instance.count * host.replicas


# The start-up broadcast (deepfm_collectives.MirroredCollectives.broadcast) sends each large variable alone:
# the sum's input placed on the GPU (on GPUs 1..G-1 a copy of GPU 0's) and its output, two copies of the
# largest variable at once. bench/broadcast_memory.py measures 1.14-1.20 per replica on 2 logical CPU replicas
# (its verdict checks them against this count; the input of the first replica aliases its variable there).
BROADCAST_COPIES = 2
# A dense all-reduce holds the table-sized gradient, the pack it is concatenated into with the other gradients
# (MWMS's batch all-reduce; Horovod's fusion buffer) and the reduced pack: three at once. Not measured here.
DENSE_GRADIENT_COPIES = 3


def replica_bytes(
    rows: int, embedding_size: int, optimizer: str, dense_gradients: bool, baseline: bool = False
) -> tuple[int, str]:
    """What one GPU holds at its peak for the tables: weights and optimizer slots (and the baseline's), plus the
    larger of the start-up broadcast's copies of the largest table and, when the gradients are all-reduced densely, a
    step's table-sized gradients -> (bytes, how they were counted)."""
    tables = hosts.embedding_bytes(rows, embedding_size, optimizer, baseline)
    broadcast = BROADCAST_COPIES * rows * embedding_size * hosts.FLOAT_BYTES
    dense = DENSE_GRADIENT_COPIES * rows * (1 + embedding_size) * hosts.FLOAT_BYTES if dense_gradients else 0
    how = f"{hosts.embedding_words(rows, embedding_size, optimizer, baseline)}, plus "
    if dense > broadcast:
        how += (
            f"{DENSE_GRADIENT_COPIES} dense gradients in a step's all-reduce (the gradient, its pack, the reduced pack)"
        )
    else:
        how += f"{BROADCAST_COPIES} copies of the {rows:,} x {embedding_size} embedding table in the start-up broadcast"
    return tables + max(broadcast, dense), how


def _bigger_gpu(needed: int) -> str | None:
    """The catalogue's cheapest instance whose GPU keeps `needed` under the headroom fraction."""
    fits = [
        (info.usd_per_hour or float("inf"), name, info)
        for name, info in catalog.INSTANCES.items()
        if info.gpu_memory_gib and needed <= info.gpu_memory_gib * hosts.GIB * hosts.WARN_FRACTION
    ]
    if not fits:
        return None
    _, name, info = min(fits)
    return f"{name} ({info.gpu} {info.gpu_memory_gib} GiB)"


def replica_need(spec: Spec, values: Any, rows: int) -> tuple[int, str, str]:
    """What one replica (a Horovod rank, an MWMS replica) holds at its peak for the tables, how it was counted,
    and how its embedding gradients travel (dense or gather)."""
    mode = contract.bundled_hparams().resolve_sparse_allreduce(
        values.sparse_allreduce,
        rows,
        values.embedding_size,
        values.batch_size,
        values.field_size,
        replicas(spec),
        values.optimizer,
    )
    needed, how = replica_bytes(rows, values.embedding_size, values.optimizer, mode == "dense", values.baseline)
    return needed, how, mode


def table_field(spec: Spec) -> str:
    """The field that sizes the embedding tables, where a memory finding points."""
    if "feature_size" in spec.hyperparameters:
        return "hyperparameters.feature_size"
    return "features" if spec.features is not None else "instance.type"


def check_gpu_memory(spec: Spec) -> list[Finding]:
    kind = spec.distribution_kind
    values = script_values(spec)  # None: not the bundled scripts, or a bad value (reported on its own)
    info = catalog.instance(spec.instance.type)
    if kind not in REPLICATED or values is None or info is None or not info.gpus or info.gpu_memory_gib is None:
        return []
    rows = table_rows(spec, values)
    if not rows:  # an invalid features: section, which check_features reports
        return []
    needed, how, mode = replica_need(spec, values, rows)
    have = info.gpu_memory_gib * hosts.GIB
    where = f"one {info.gpu} of {spec.instance.type} ({info.gpu_memory_gib} GiB)"
    bigger = _bigger_gpu(needed)
    fix = (
        "put the tables on parameter servers (entry_point: deepfm-ps, distribution: {parameter_server: {ps: "
        "{type: ml.r5.4xlarge, count: N}}})"
        + (f", a GPU with more memory ({bigger})" if bigger else "")
        + ", or a smaller feature_size"
        + (" or sparse_allreduce: gather" if mode == "dense" else "")
    )
    each = f"each {REPLICATED[kind]} holds the whole embedding tables: {hosts.gib(needed)} ({how})"
    if needed > have:
        return [error(table_field(spec), f"{each}, more than {where}: {fix}")]
    if needed > have * hosts.WARN_FRACTION:
        return [
            warning(
                table_field(spec),
                f"{each}, {needed / have:.0%} of {where}, leaving little for activations and the CUDA context: {fix}",
            )
        ]
    return []


def one_host_ps_gpus(spec: Spec) -> int:
    """The GPUs of a parameter-server job the bundled deepfm-ps runs on one host (no ps group), 0 otherwise.
    SageMaker's toolkit writes a TF_CONFIG (and starts a ps) only with more than one host, so such a job is
    one process training on one GPU (train_ps.train_single_host): G - 1 of G GPUs idle."""
    info = catalog.instance(spec.instance.type)
    if (
        spec.distribution_kind != "parameter_server"
        or spec.entry_point != "deepfm-ps"
        or spec.instance.count != 1
        or spec.ps_group is not None
        or info is None
    ):
        return 0
    return info.gpus


def check_one_host_ps_gpus(spec: Spec) -> list[Finding]:
    gpus = one_host_ps_gpus(spec)
    if gpus <= 1:
        return []
    return [
        error(
            "instance.count",
            f"a parameter-server job on one host gets no parameter server: SageMaker's toolkit "
            f"starts one only with several hosts, so deepfm-ps trains as one process on 1 of "
            f"{spec.instance.type}'s {gpus} GPUs ({gpus - 1} idle): use entry_point: "
            "deepfm-mirrored with distribution: multi_worker_mirrored (one process drives "
            "every GPU), instance.count >= 2 (a worker task per GPU on each host), or a "
            "single-GPU instance type with distribution: none",
        )
    ]


def check_ps_pipe_channels(spec: Spec) -> list[Finding]:
    """deepfm-ps runs one worker task per GPU, and a Pipe-mode FIFO has one reader: each task needs its own
    training channel (train, train-1, ...), or the script stops at start-up."""
    if spec.data.mode != "Pipe" or spec.distribution_kind != "parameter_server" or spec.entry_point != "deepfm-ps":
        return []
    per_host = tasks.host_tasks(spec.instance.type, "parameter_server").worker_tasks
    channels = len(spec.train_sources)
    if per_host <= 1 or channels >= per_host:
        return []
    return [
        error(
            "data.train",
            f"deepfm-ps runs {per_host} worker tasks on each {spec.instance.type} (one per GPU), and "
            f"each reads its own Pipe-mode FIFO: list at least {per_host} training paths (the same "
            "path may repeat), or use File/FastFile",
        )
    ]
