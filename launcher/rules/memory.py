"""The embedding tables in the hosts' memory, for every layout the bundled scripts run.

What one host holds: on one host (`none`, or a parameter-server job on one host, where no ps starts) the whole
tables and their optimizer slots; with parameter servers on every host, its share of them (the tables are split
over the hosts' ps); on CPU hosts under Horovod or MultiWorkerMirrored, a whole replica per process (each rank
or replica holds the tables, at its peak as `rules.gpu.replica_bytes` counts). GPU hosts of the replicated
layouts hold the tables on the GPUs (`rules.gpu`), a ps group on its own instances (`rules.ps_group`).
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


class HostNeed(NamedTuple):
    needed: int  # bytes one host holds for the tables
    how: str  # how they were counted
    layout: str  # what the layout puts on each host
    fix: str  # the layout's own way to need less per host


def _slots(optimizer: str) -> str:
    slots = hosts.OPTIMIZER_SLOTS[optimizer]
    return f"{slots} {optimizer} slot{'s' if slots != 1 else ''}"


def host_need(spec: Spec, values, rows: int, memory_gib: int) -> HostNeed | None:
    """What one host of `spec.instance` holds for the tables, or None where another rule checks it."""
    kind, count = spec.distribution_kind, spec.instance.count
    tables = hosts.embedding_bytes(rows, values.embedding_size, values.optimizer)
    how = (
        f"feature_size {rows:,} x (1 + embedding_size {values.embedding_size}) x {hosts.FLOAT_BYTES} bytes x "
        f"(1 + {_slots(values.optimizer)})"
    )
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
        enough = max(count + 1, math.ceil(tables / per_host_fit))
        return HostNeed(
            math.ceil(tables / count),
            how,
            f"split over the {count} hosts' parameter servers",
            f"instance.count {enough} (more ps to split them over), or the ps on their own memory-"
            "optimized instances (distribution: {parameter_server: {ps: {type: ml.r5.24xlarge, count: N}}})",
        )
    if kind in ("none", "parameter_server") and spec.ps_group is None:
        enough = max(2, math.ceil(tables / per_host_fit))
        return HostNeed(
            tables,
            how,
            "all on one process" if count == 1 else "whole on each host",
            f"parameter servers on {enough} hosts, which split the tables (distribution: parameter_server, "
            f"instance.count: {enough})",
        )
    return None


def _bigger_host(needed: int) -> str | None:
    """The catalogue's cheapest instance type whose memory keeps `needed` under the headroom fraction."""
    fits = [
        (info.usd_per_hour or float("inf"), name, info)
        for name, info in catalog.INSTANCES.items()
        if needed <= info.memory_gib * hosts.GIB * hosts.WARN_FRACTION
    ]
    if not fits:
        return None
    _, name, info = min(fits)
    return f"{name} ({info.memory_gib} GiB)"


def check_host_memory(spec: Spec) -> list[Finding]:
    values = script_values(spec)  # None: not the bundled scripts, or a bad value (reported on its own)
    info = catalog.instance(spec.instance.type)
    if values is None or info is None:
        return []
    rows = table_rows(spec, values)
    if not rows:  # an invalid features: section, which check_features reports
        return []
    need = host_need(spec, values, rows, info.memory_gib)
    if need is None:
        return []
    have = info.memory_gib * hosts.GIB
    bigger = _bigger_host(need.needed)
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
    """`local.memory_per_host` below what one host holds for the tables in this layout (host_need): the local run
    would only end out of memory."""
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
            f"{text} is less than the {hosts.gib(need.needed)} the embedding tables alone need on each simulated "
            f"host ({need.layout}: {need.how}): give the hosts more than that (TensorFlow itself needs room too), "
            f"or use {need.fix}",
        )
    ]
