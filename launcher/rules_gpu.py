"""Rules about GPUs: float16 where there is no GPU, and a model that must fit in one GPU's memory.

Under Horovod and MultiWorkerMirrored every GPU holds a whole replica of the model: the embedding tables,
their optimizer slots and, when the embedding gradients are all-reduced densely, a table-sized gradient.
The parameter-server layout keeps the tables in host memory instead (rules_ps_group checks that side). Both rules
read the hyperparameters as the bundled scripts parse them (rules_hparams.script_values).
"""

from __future__ import annotations

from launcher import catalog, contract, hosts, tasks
from launcher.findings import Finding, error, warning
from launcher.rules_hparams import script_values
from launcher.rules_ps_group import table_rows
from launcher.spec import Spec

MIXED_PRECISION = "hyperparameters.mixed_precision"
REPLICATED = {"horovod": "Horovod rank", "multi_worker_mirrored": "MultiWorkerMirrored replica"}


def check_mixed_precision_on_cpu(spec: Spec) -> list[Finding]:
    """float16 matmuls on a CPU run several times slower than float32: the bundled scripts' `auto` turns it
    on only where there are GPUs, so `true` on a CPU-only instance is a mistake."""
    values = script_values(spec)  # None: not the bundled scripts, or a bad value (reported on its own)
    info = catalog.instance(spec.instance.type)
    if values is None or info is None or info.gpus or values.mixed_precision != "true":
        return []
    return [error(MIXED_PRECISION, f"{spec.instance.type} has no GPU, and float16 on a CPU runs several times slower "
                                   "than float32: use mixed_precision: auto (float16 only on GPUs) or false, or a GPU instance type")]


def replicas(spec: Spec) -> int:
    """Model copies in sync across the job (Horovod ranks, or MWMS replicas: one per GPU)."""
    host = tasks.host_tasks(spec.instance.type, spec.distribution_kind, spec.processes_per_host)
    return spec.instance.count * host.replicas


def replica_bytes(rows: int, embedding_size: int, optimizer: str, dense_gradients: bool) -> int:
    """What one GPU holds for the tables: weights and optimizer slots, plus a table-sized gradient when
    it is all-reduced densely."""
    gradient = rows * (1 + embedding_size) * hosts.FLOAT_BYTES if dense_gradients else 0
    return hosts.embedding_bytes(rows, embedding_size, optimizer) + gradient


def _bigger_gpu(needed: int) -> str | None:
    """The catalogue's cheapest instance whose GPU keeps `needed` under the headroom fraction."""
    fits = [(info.usd_per_hour or float("inf"), name, info) for name, info in catalog.INSTANCES.items()
            if info.gpu_memory_gib and needed <= info.gpu_memory_gib * hosts.GIB * hosts.WARN_FRACTION]
    if not fits:
        return None
    _, name, info = min(fits)
    return f"{name} ({info.gpu} {info.gpu_memory_gib} GiB)"


def _field(spec: Spec) -> str:
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
    optimizer, embedding_size = values.optimizer, values.embedding_size
    mode = contract.bundled_hparams().resolve_sparse_allreduce(values.sparse_allreduce, rows, embedding_size,
                                                                values.batch_size, values.field_size, replicas(spec),
                                                                optimizer)
    needed = replica_bytes(rows, embedding_size, optimizer, mode == "dense")
    have = info.gpu_memory_gib * hosts.GIB
    slots = hosts.OPTIMIZER_SLOTS[optimizer]
    how = (f"feature_size {rows:,} x (1 + embedding_size {embedding_size}) x {hosts.FLOAT_BYTES} bytes x "
           f"(1 + {slots} {optimizer} slot{'s' if slots != 1 else ''}{' + 1 dense gradient' if mode == 'dense' else ''})")
    where = f"one {info.gpu} of {spec.instance.type} ({info.gpu_memory_gib} GiB)"
    bigger = _bigger_gpu(needed)
    fix = ("put the tables on parameter servers (entry_point: deepfm-ps, distribution: {parameter_server: {ps: "
           "{type: ml.r5.4xlarge, count: N}}})" + (f", a GPU with more memory ({bigger})" if bigger else "")
           + ", or a smaller feature_size" + (" or sparse_allreduce: gather" if mode == "dense" else ""))
    each = f"each {REPLICATED[kind]} holds the whole embedding tables: {hosts.gib(needed)} ({how})"
    if needed > have:
        return [error(_field(spec), f"{each}, more than {where}: {fix}")]
    if needed > have * hosts.WARN_FRACTION:
        return [warning(_field(spec), f"{each}, {needed / have:.0%} of {where}, leaving little for activations "
                                      f"and the CUDA context: {fix}")]
    return []


def one_host_ps_gpus(spec: Spec) -> int:
    """The GPUs of a parameter-server job the bundled deepfm-ps runs on one host (no ps group), 0 otherwise.
    SageMaker's toolkit writes a TF_CONFIG (and starts a ps) only with more than one host, so such a job is
    one process training on one GPU (train_ps.train_single_host): G - 1 of G GPUs idle."""
    info = catalog.instance(spec.instance.type)
    if (spec.distribution_kind != "parameter_server" or spec.entry_point != "deepfm-ps" or spec.instance.count != 1
            or spec.ps_group is not None or info is None):
        return 0
    return info.gpus


def check_one_host_ps_gpus(spec: Spec) -> list[Finding]:
    gpus = one_host_ps_gpus(spec)
    if gpus <= 1:
        return []
    return [error("instance.count", f"a parameter-server job on one host gets no parameter server: SageMaker's toolkit "
                                    f"starts one only with several hosts, so deepfm-ps trains as one process on 1 of "
                                    f"{spec.instance.type}'s {gpus} GPUs ({gpus - 1} idle): use entry_point: "
                                    "deepfm-mirrored with distribution: multi_worker_mirrored (one process drives "
                                    "every GPU), instance.count >= 2 (a worker task per GPU on each host), or a "
                                    "single-GPU instance type with distribution: none")]


def check_ps_pipe_channels(spec: Spec) -> list[Finding]:
    """deepfm-ps runs one worker task per GPU, and a Pipe-mode FIFO has one reader: each task needs its own
    training channel (train, train-1, ...), or the script stops at start-up."""
    if spec.data.mode != "Pipe" or spec.distribution_kind != "parameter_server" or spec.entry_point != "deepfm-ps":
        return []
    per_host = tasks.host_tasks(spec.instance.type, "parameter_server").worker_tasks
    channels = len(spec.train_sources)
    if per_host <= 1 or channels >= per_host:
        return []
    return [error("data.train", f"deepfm-ps runs {per_host} worker tasks on each {spec.instance.type} (one per GPU), and "
                                f"each reads its own Pipe-mode FIFO: list at least {per_host} training paths (the same "
                                "path may repeat), or use File/FastFile")]
