"""Rules about GPUs: float16 where there is no GPU, and a model that must fit in one GPU's memory.

Under Horovod and MultiWorkerMirrored every GPU holds a whole replica of the model: the embedding tables,
their optimizer slots and, when the embedding gradients are all-reduced densely, a table-sized gradient.
The parameter-server layout keeps the tables in host memory instead (rules_hetero checks that side).
"""

from __future__ import annotations

from launcher import catalog, contract, gpu_tasks, hetero
from launcher.findings import Finding, error, warning
from launcher.rules_hetero import table_rows
from launcher.spec import Spec

MIXED_PRECISION = "hyperparameters.mixed_precision"
REPLICATED = {"horovod": "Horovod rank", "multi_worker_mirrored": "MultiWorkerMirrored replica"}


def _is_true(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in contract.bundled_hparams().TRUE_WORDS)


def check_mixed_precision_on_cpu(spec: Spec) -> list[Finding]:
    """float16 matmuls on a CPU run several times slower than float32: the bundled scripts' `auto` turns it
    on only where there are GPUs, so `true` on a CPU-only instance is a mistake."""
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return []
    info = catalog.instance(spec.instance.type)
    if info is None or info.gpus or not _is_true(spec.hyperparameters.get("mixed_precision")):
        return []
    return [error(MIXED_PRECISION, f"{spec.instance.type} has no GPU, and float16 on a CPU runs several times slower "
                                   "than float32: use mixed_precision: auto (float16 only on GPUs) or false, or a GPU instance type")]


def replicas(spec: Spec) -> int:
    """Model copies in sync across the job (Horovod ranks, or MWMS replicas: one per GPU)."""
    host = gpu_tasks.tasks_per_host(spec.instance.type, spec.distribution_kind, spec.processes_per_host)
    return spec.instance.count * host.replicas


def sparse_allreduce(hyperparameters: dict, defaults: dict, rows: int, copies: int) -> str:
    """The bundled scripts' resolved `sparse_allreduce` (dense | gather) for a table of `rows` rows."""
    def value(name):
        return hyperparameters.get(name, defaults[name])

    return contract.bundled_hparams().resolve_sparse_allreduce(
        str(value("sparse_allreduce")).lower(), rows, int(value("embedding_size")), int(value("batch_size")),
        int(value("field_size")), copies, str(value("optimizer")).lower())


def replica_bytes(rows: int, embedding_size: int, optimizer: str, dense_gradients: bool) -> int:
    """What one GPU holds for the tables: weights and optimizer slots, plus a table-sized gradient when
    it is all-reduced densely."""
    gradient = rows * (1 + embedding_size) * hetero.FLOAT_BYTES if dense_gradients else 0
    return hetero.embedding_bytes(rows, embedding_size, optimizer) + gradient


def _bigger_gpu(needed: int) -> str | None:
    """The catalogue's cheapest instance whose GPU keeps `needed` under the headroom fraction."""
    fits = [(info.usd_per_hour or float("inf"), name, info) for name, info in catalog.INSTANCES.items()
            if info.gpu_memory_gib and needed <= info.gpu_memory_gib * hetero.GIB * hetero.WARN_FRACTION]
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
    if kind not in REPLICATED or spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return []
    info = catalog.instance(spec.instance.type)
    if info is None or not info.gpus or info.gpu_memory_gib is None:
        return []
    defaults = contract.bundled_hparams().DEFAULTS
    hyperparameters = spec.hyperparameters
    optimizer = str(hyperparameters.get("optimizer", defaults["optimizer"])).lower()
    rows = table_rows(spec, defaults)
    if not rows or optimizer not in hetero.OPTIMIZER_SLOTS:  # check_features / the hyperparameter rule report those
        return []
    embedding_size = int(hyperparameters.get("embedding_size", defaults["embedding_size"]))
    mode = sparse_allreduce(dict(hyperparameters), defaults, rows, replicas(spec))
    needed = replica_bytes(rows, embedding_size, optimizer, mode == "dense")
    have = info.gpu_memory_gib * hetero.GIB
    slots = hetero.OPTIMIZER_SLOTS[optimizer]
    how = (f"feature_size {rows:,} x (1 + embedding_size {embedding_size}) x {hetero.FLOAT_BYTES} bytes x "
           f"(1 + {slots} {optimizer} slot{'s' if slots != 1 else ''}{' + 1 dense gradient' if mode == 'dense' else ''})")
    where = f"one {info.gpu} of {spec.instance.type} ({info.gpu_memory_gib} GiB)"
    bigger = _bigger_gpu(needed)
    fix = ("put the tables on parameter servers (entry_point: deepfm-ps, distribution: {parameter_server: {ps: "
           "{type: ml.r5.4xlarge, count: N}}})" + (f", a GPU with more memory ({bigger})" if bigger else "")
           + ", or a smaller feature_size" + (" or sparse_allreduce: gather" if mode == "dense" else ""))
    each = f"each {REPLICATED[kind]} holds the whole embedding tables: {hetero._gib(needed)} ({how})"
    if needed > have:
        return [error(_field(spec), f"{each}, more than {where}: {fix}")]
    if needed > have * hetero.WARN_FRACTION:
        return [warning(_field(spec), f"{each}, {needed / have:.0%} of {where}, leaving little for activations "
                                      f"and the CUDA context: {fix}")]
    return []


def check_ps_pipe_channels(spec: Spec) -> list[Finding]:
    """deepfm-ps runs one worker task per GPU, and a Pipe-mode FIFO has one reader: each task needs its own
    training channel (train, train-1, ...), or the script stops at start-up."""
    if spec.data.mode != "Pipe" or spec.distribution_kind != "parameter_server" or spec.entry_point != "deepfm-ps":
        return []
    tasks = gpu_tasks.tasks_per_host(spec.instance.type, "parameter_server").worker_tasks
    channels = len(spec.train_sources)
    if tasks <= 1 or channels >= tasks:
        return []
    return [error("data.train", f"deepfm-ps runs {tasks} worker tasks on each {spec.instance.type} (one per GPU), and "
                                f"each reads its own Pipe-mode FIFO: list at least {tasks} training paths (the same "
                                "path may repeat), or use File/FastFile")]


def check_dense_adam(spec: Spec) -> list[Finding]:
    """The bundled scripts refuse it at start-up (deepfm_hparams): say so offline."""
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return []
    defaults = contract.bundled_hparams().DEFAULTS
    optimizer = str(spec.hyperparameters.get("optimizer", defaults["optimizer"])).lower()
    if str(spec.hyperparameters.get("sparse_allreduce", "")).lower() != "dense" or optimizer != "adam":
        return []
    return [error("hyperparameters.sparse_allreduce", "dense would make the lazy Adam dense (every row's moments decaying "
                                                      "each step): use gather or auto with adam, or another optimizer")]
