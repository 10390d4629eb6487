"""The embedding tables and the training processes in the hosts' memory, for every layout the bundled scripts run.

What each process holds (`host_need`, `plan_host_memory`): one host alone (`none`, or a parameter-server job on one
host, where no ps starts) holds the whole tables and their optimizer slots beside its working set. With parameter
servers each ps holds its share (weights and slots: the tables are split over the ps tasks, each shard initialized
where it lives; PS_SHARE_FACTOR at its peak, PS_RESTORE_FACTOR in a job that may restore a checkpoint); the chief
and every worker hold a working set (PROCESS_WORKING_SET) whatever the table, except where the chief writes the
checkpoints and the export itself: a checkpoint directory on the hosts' own disks (not `checkpoints.file_system`)
has the chief receive every ps's variables, all at once as TensorFlow's multi-device save runs, so its host needs
about twice the whole state more (CHIEF_WRITE_FACTOR).
On CPU hosts under Horovod or MultiWorkerMirrored, a whole replica per process (each rank or replica holds the
tables, at its peak as `rules.gpu.replica_bytes` counts). GPU hosts of the replicated layouts hold the tables on
the GPUs (`rules.gpu`), a ps group on its own instances (`rules.ps_group`; its worker group's first host, the
chief's, is checked here).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from launcher.facts import catalog
from launcher.plans import hosts
from launcher.plans import tasks
from launcher.rules.findings import Finding, error, warning
from launcher.rules.gpu import replica_need, table_field
from launcher.rules.hparams import script_values
from launcher.rules.ps_group import table_rows
from launcher.spec import Spec, size_bytes

PROCESS_WORKING_SET = hosts.PROCESS_WORKING_SET  # a chief's or worker's own peak (measured: plans.hosts)
# The chief that writes the checkpoints and the export itself (experimental_io_device: a checkpoint directory on the
# hosts' own disks) receives every ps's variables at once, as TensorFlow's multi-device save runs, and serializes
# them: measured 2,352 MB above its working set for 1,027 MiB of state (a 5.3M-id table, embedding 16, Adam) on
# TF 2.14.
CHIEF_WRITE_FACTOR = 2.3


class ProcessNeed(NamedTuple):
    role: str  # ps | chief | worker | single | rank | replica
    bytes: int
    what: str  # what it holds


class HostNeed(NamedTuple):
    needed: int  # bytes the busiest host's processes hold together
    how: str  # how the tables were counted
    layout: str  # what the layout puts on each host
    fix: str  # the layout's own way to need less per host
    processes: tuple = ()  # the busiest host's processes (ProcessNeed), where the layout knows them


def _tasks_write(spec: Spec) -> bool:
    """Whether the checkpoints go to a file system every host mounts, where each ps writes its own shards."""
    config = spec.checkpoint_config
    return config is not None and config.file_system is not None


def _ps(tables: int, count: int, factor: float) -> ProcessNeed:
    """A ps task holding 1/count of the tables and slots, at its peak."""
    return ProcessNeed(
        "ps",
        PROCESS_WORKING_SET + math.ceil(tables / count * factor),
        f"its working set + {factor} x its share of the tables and slots (1/{count})"
        + (", restoring a checkpoint" if factor == hosts.PS_RESTORE_FACTOR else ""),
    )


def _working(role: str, count: int = 1) -> list[ProcessNeed]:
    return [ProcessNeed(role, PROCESS_WORKING_SET, "its working set")] * count


def _chief(spec: Spec, state: int) -> ProcessNeed:
    """The chief: its working set, and the whole state when it writes the checkpoints (not on a shared file system)."""
    if _tasks_write(spec):
        return ProcessNeed("chief", PROCESS_WORKING_SET, "its working set (each ps writes its own checkpoint shards)")
    return ProcessNeed(
        "chief",
        PROCESS_WORKING_SET + math.ceil(state * CHIEF_WRITE_FACTOR),
        f"its working set + {CHIEF_WRITE_FACTOR} x every ps's variables ({hosts.gib(state)}) while it writes a "
        "checkpoint to its own disk",
    )


def _describe(processes) -> str:
    return " + ".join(f"{p.role} {hosts.gib(p.bytes)}" for p in processes)


def host_need(spec: Spec, values, rows: int, memory_gib: int) -> HostNeed | None:
    """What one host of `spec.instance` holds for the tables, or None where another rule checks it."""
    kind, count = spec.distribution_kind, spec.instance.count
    tables = hosts.embedding_bytes(rows, values.embedding_size, values.optimizer, values.baseline)
    how = hosts.embedding_words(rows, values.embedding_size, values.optimizer, values.baseline)
    per_host_fit = memory_gib * hosts.GIB * hosts.WARN_FRACTION
    if kind in ("horovod", "multi_worker_mirrored"):
        host = tasks.host_tasks(spec.instance.type, kind, spec.processes_per_host)
        if host.gpus_per_task:
            return None
        copies = host.replicas
        replica, replica_how, _ = replica_need(spec, values, rows)
        fitting = int(per_host_fit // replica) if replica else copies
        fewer = (
            f"processes_per_host {fitting} (each rank holds the whole tables), "
            if kind == "horovod" and 1 <= fitting < copies
            else ""
        )
        each = "rank" if kind == "horovod" else "replica"
        return HostNeed(
            replica * copies,
            replica_how,
            f"{copies} whole cop{'ies' if copies != 1 else 'y'}, one per {each}",
            f"{fewer}parameter servers, which split the tables over the hosts (entry_point: deepfm-ps, "
            f"distribution: parameter_server)",
        )
    if kind == "parameter_server" and spec.ps_group is None and count > 1:
        workers = tasks.host_tasks(spec.instance.type, kind).worker_tasks
        factor = hosts.ps_share_factor(spec.may_restore)
        processes = (
            _ps(tables, count, factor),
            _chief(spec, tables),
            *_working("worker", workers),
        )
        needed = sum(p.bytes for p in processes)
        working = (2 + workers) * PROCESS_WORKING_SET  # the chief's host's processes without a table in its chief
        enough = max(count + 1, math.ceil(tables * factor / max(per_host_fit - working, 1)))
        shared = (
            ""
            if _tasks_write(spec)
            else "checkpoints on a file system every host mounts (checkpoints: {file_system: ...}: each ps then "
            "writes its own share, and the chief holds no table), "
        )
        return HostNeed(
            needed,
            how,
            f"split over the {count} hosts' parameter servers; the chief's host: {_describe(processes)}",
            f"{shared}instance.count {enough} (more ps to split them over), or the ps on their own memory-"
            "optimized instances (distribution: {parameter_server: {ps: {type: ml.r5.24xlarge, count: N}}})",
            processes,
        )
    if kind == "parameter_server" and spec.ps_group is not None:
        workers = tasks.host_tasks(spec.instance.type, kind).worker_tasks
        processes = (_chief(spec, tables), *_working("worker", workers))
        if _tasks_write(spec):
            return None  # the worker hosts hold no table; rules.ps_group checks the ps group
        return HostNeed(
            sum(p.bytes for p in processes),
            how,
            f"the chief's host of the worker group: {_describe(processes)}",
            "checkpoints on a file system every host mounts (checkpoints: {file_system: ...}: each ps then writes "
            "its own share, and the chief holds no table)",
            processes,
        )
    if kind in ("none", "parameter_server") and spec.ps_group is None:
        enough = max(2, math.ceil(tables / per_host_fit))
        processes = (ProcessNeed("single", tables + PROCESS_WORKING_SET, "the whole tables and slots"),)
        return HostNeed(
            tables + PROCESS_WORKING_SET,
            how,
            "all on one process" if count == 1 else "whole on each host",
            f"parameter servers on {enough} hosts, which split the tables (distribution: parameter_server, "
            f"instance.count: {enough})",
            processes,
        )
    return None


def plan_host_memory(spec: Spec) -> HostNeed | None:
    """The memory the busiest host of `spec` needs (its processes together), or None where dfm cannot count it (not
    the bundled scripts, an unknown instance type, a bad value, GPU hosts of the replicated layouts)."""
    values = script_values(spec)
    info = catalog.instance(spec.instance.type)
    if values is None or info is None:
        return None
    rows = table_rows(spec, values)
    if not rows:
        return None
    return host_need(spec, values, rows, info.memory_gib)


MEMORY_OPTIMIZED = ("r", "x")  # the families whose names start so: the most memory per vCPU and per dollar


def _bigger_host(needed: int, gpus: bool = False) -> str | None:
    """The instance type to suggest for `needed` bytes under the headroom fraction: memory-optimized CPU types (the r
    and x families) first, then other CPU types, each by list price; GPU types only for a job on GPUs (`gpus`), after
    those; types without a known price are left out (they are not the cheapest that dfm knows of)."""

    def rank(name: str, info) -> tuple:
        family = name.split(".")[1]
        return (info.gpus > 0, not family.startswith(MEMORY_OPTIMIZED), info.usd_per_hour)

    fits = [
        (rank(name, info), name, info)
        for name, info in catalog.INSTANCES.items()
        if info.usd_per_hour is not None
        and not info.accelerators
        and (gpus or not info.gpus)
        and needed <= info.memory_gib * hosts.GIB * hosts.WARN_FRACTION
    ]
    if not fits:
        return None
    _, name, info = min(fits)
    return f"{name} ({info.memory_gib} GiB)"


def check_host_memory(spec: Spec) -> list[Finding]:
    need = plan_host_memory(spec)
    if need is None:
        return []
    info = catalog.instance(spec.instance.type)
    have = info.memory_gib * hosts.GIB
    bigger = _bigger_host(need.needed, gpus=info.gpus > 0)
    fix = (
        need.fix + (f", an instance type with more memory ({bigger})" if bigger else "") + ", or a smaller feature_size"
    )
    each = (
        f"the embedding tables need {hosts.gib(need.needed)} on each {spec.instance.type} ({need.layout}: {need.how})"
    )
    where = f"{spec.instance.type}'s {info.memory_gib} GiB"
    if need.needed > have:
        return [error(table_field(spec), f"{each}, more than {where}: use {fix}")]
    if need.needed > have * hosts.WARN_FRACTION:
        return [
            warning(
                table_field(spec),
                f"{each}, {need.needed / have:.0%} of {where}, leaving little for the processes and the OS: use {fix}",
            )
        ]
    return []


def check_local_memory(spec: Spec) -> list[Finding]:
    """`local.memory_per_host` below what the busiest host's processes hold in this layout (host_need): the local
    run would only end out of memory."""
    text = spec.local.memory_per_host
    values = script_values(spec)
    if text is None or values is None:
        return []
    rows = table_rows(spec, values)
    limit = size_bytes(text)
    need = host_need(spec, values, rows, limit / hosts.GIB) if rows else None
    if need is None or need.needed <= limit:
        return []
    return [
        error(
            "local.memory_per_host",
            f"{text} is less than the {hosts.gib(need.needed)} the busiest simulated host needs ({need.layout}: "
            f"{need.how}): give the hosts more than that, or use {need.fix}",
        )
    ]
