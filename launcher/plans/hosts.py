"""A job's hosts: a tuple of instance groups, the one cluster model. A job of identical hosts is one group
(SageMaker's `homogeneousCluster`); parameter servers on their own instances make two (workers, then ps).

Pure (no I/O, no SageMaker import). Computed here from the groups, for every job alike: the host names
(algo-1..N across the groups), the resourceconfig.json SageMaker writes per host, which channels reach which
group, what runs on each host, the cost ceiling, the group checks against the service model, and the
embedding memory estimate. The bundled script's side of the ps-group layout is entrypoints/hetero_cluster.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from launcher.facts import catalog
from launcher.facts import service_model

HOMOGENEOUS_GROUP = "homogeneousCluster"  # SageMaker's name for the one group of a job without InstanceGroups
WORKER_GROUP = "worker"
PS_GROUP = "ps"
NETWORK_INTERFACE = "eth0"
FLOAT_BYTES = 4  # the tables are float32 (mixed precision casts only the MLP's compute)
# Optimizer slots per table element in the bundled scripts (deepfm_model.SparseOptimizer.build; a test
# builds the real optimizer and counts them): lazy Adam m and v, Adagrad's accumulator, FTRL's
# accumulator and linear term, none for SGD.
OPTIMIZER_SLOTS = {"adam": 2, "adagrad": 1, "ftrl": 2, "sgd": 0}
# The logistic-regression baseline (hyperparameter baseline, deepfm_baseline): a weight per id and its lazy Adam's
# two moments, partitioned over the ps tasks as the tables are.
BASELINE_FLOATS = 3
WARN_FRACTION = 0.7  # the ps process, gRPC buffers and the OS need the rest
# A training process's own peak beyond the tables it holds: TensorFlow, the traced steps, the input pipeline,
# gRPC buffers. Measured (each process's ru_maxrss, its `[dfm] memory` line) at 585-592 MiB for the chief and
# the workers of a 2-host parameter-server run on TF 2.14, the same with a 20,000-id and a 5.3M-id table.
PROCESS_WORKING_SET = 640 << 20
# A ps task's peak over its share of the tables and slots: writing a checkpoint or the export, a ps grows by about its
# share of the weights (not of the slots). Measured 1.60x (BENCHMARKS.md report 23: 48M ids, embedding 16, Adagrad,
# the baseline, a fresh start that writes checkpoints, TF 2.14); 749 MB over a 514 MiB share with a 20,000-id table,
# where the working set is most of it.
PS_SHARE_FACTOR = 1.6
# A ps task of a job that restores (it keeps checkpoints, so a lost host, a spot interruption or recover: starts it
# again from them; or it warm-starts) peaks at about twice its share: TensorFlow's restore reads all a ps holds before
# it assigns any, beside the values the variables were initialized with. Measured 2.10x over the working set
# (report 23, the same run, resumed after a lost worker).
PS_RESTORE_FACTOR = 2.1


def ps_share_factor(restores: bool) -> float:
    """A ps task's peak over its share of the tables and slots: PS_RESTORE_FACTOR in a job that may restore."""
    return PS_RESTORE_FACTOR if restores else PS_SHARE_FACTOR


GIB = 1 << 30
# The bundled script's hyperparameters for this layout (the launcher sets them; the script reads them
# to find its groups in resourceconfig.json).
PS_GROUP_HYPERPARAMETER = "ps_group"
PS_PER_HOST_HYPERPARAMETER = "ps_per_host"


@dataclass(frozen=True)
class InstanceGroup:
    name: str
    instance_type: str
    count: int
    role: str  # "worker" | "ps"

    def request(self) -> dict[str, Any]:
        """ResourceConfig.InstanceGroups[] of CreateTrainingJob."""
        return {"InstanceGroupName": self.name, "InstanceType": self.instance_type, "InstanceCount": self.count}

    def sdk_kwargs(self) -> dict[str, Any]:
        """JSON-able kwargs of sagemaker.instance_group.InstanceGroup(...)."""
        return {"instance_group_name": self.name, "instance_type": self.instance_type, "instance_count": self.count}


def one_group(instance_type: str, count: int) -> tuple[InstanceGroup, ...]:
    """The hosts of a job of identical hosts."""
    return (InstanceGroup(HOMOGENEOUS_GROUP, instance_type, count, "worker"),)


def layout(worker_type: str, worker_count: int, ps_type: str, ps_count: int) -> tuple[InstanceGroup, ...]:
    """The two groups of a heterogeneous ps job: workers first (SageMaker numbers hosts algo-1.. in the
    order of the request's groups, so the chief, the first worker host, is algo-1), then the ps."""
    return (
        InstanceGroup(WORKER_GROUP, worker_type, worker_count, "worker"),
        InstanceGroup(PS_GROUP, ps_type, ps_count, "ps"),
    )


def max_groups() -> int:
    return service_model.limit("InstanceGroups", "max") or 5


def group_problems(groups: Iterable[InstanceGroup]) -> list[str]:
    """What SageMaker would refuse in the groups: too many, duplicate or invalid names, empty groups."""
    groups = list(groups)
    problems = []
    if len(groups) > max_groups():
        problems.append(f"{len(groups)} instance groups, SageMaker allows at most {max_groups()}")
    names = [g.name for g in groups]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"instance group name {name!r} is used twice: names must be unique")
    for group in groups:
        for problem in service_model.value_problems("InstanceGroupName", group.name):
            problems.append(f"instance group name {group.name!r}: {problem}")
        if group.count < 1:
            problems.append(f"instance group {group.name!r} has {group.count} instances: it needs at least 1")
    return problems


def channel_instance_groups(channel_kind: str) -> list[str] | None:
    """InstanceGroupNames for a channel: S3 channels (training and eval) to the worker group only, so the
    ps hosts download nothing; the chief, which evaluates, is a worker host. EFS/FSx channels cannot be
    restricted (FileSystemDataSource has no InstanceGroupNames): they are mounted on every host. None:
    no restriction."""
    return [WORKER_GROUP] if channel_kind == "s3" else None


def host_names(groups: Iterable[InstanceGroup]) -> dict[str, list[str]]:
    """group name -> its hosts: algo-1..algo-N numbered across the groups in request order."""
    hosts, number = {}, 1
    for group in groups:
        hosts[group.name] = [f"algo-{i}" for i in range(number, number + group.count)]
        number += group.count
    return hosts


def all_hosts(groups: Iterable[InstanceGroup]) -> list[str]:
    return [host for hosts in host_names(groups).values() for host in hosts]


def group_of(groups: Iterable[InstanceGroup], host: str) -> InstanceGroup:
    groups = list(groups)
    return next(g for g in groups if host in host_names(groups)[g.name])


def resource_configs(groups: Iterable[InstanceGroup]) -> dict[str, dict[str, Any]]:
    """host -> its resourceconfig.json, as SageMaker writes it (one group: `homogeneousCluster`):
    `current_host`, `current_instance_type`, `current_group_name`, `hosts` (all groups), `instance_groups`
    (each group's name, type and hosts) and `network_interface_name`."""
    groups = list(groups)
    hosts = host_names(groups)
    every_host = [h for g in groups for h in hosts[g.name]]
    described = [
        {"instance_group_name": g.name, "instance_type": g.instance_type, "hosts": hosts[g.name]} for g in groups
    ]
    configs = {}
    for group in groups:
        for host in hosts[group.name]:
            configs[host] = {
                "current_host": host,
                "current_instance_type": group.instance_type,
                "current_group_name": group.name,
                "hosts": list(every_host),
                "instance_groups": [dict(d, hosts=list(d["hosts"])) for d in described],
                "network_interface_name": NETWORK_INTERFACE,
            }
    return configs


def costs(
    groups: Iterable[InstanceGroup], max_run_s: float, warm_pool_s: float = 0.0, *, spot: bool = False
) -> dict[str, Any]:
    """The cost ceiling per group and in all: on-demand list price x count x (max_run + warm pool)."""
    hours = (max_run_s + warm_pool_s) / 3600
    rows, total = [], 0.0
    for group in groups:
        info = catalog.instance(group.instance_type)
        price = info.usd_per_hour if info is not None else None
        row = {
            "group": group.name,
            "role": group.role,
            "instance_type": group.instance_type,
            "instance_count": group.count,
            "instance_hourly_usd": price,
            "max_usd": round(price * group.count * hours, 2) if price is not None else None,
        }
        if price is None:
            row["note"] = f"{group.instance_type} is not in dfm's price table"
            total = math.nan
        else:
            total += row["max_usd"]
        rows.append(row)
    unknown = [row["note"] for row in rows if "note" in row]
    if unknown:
        note = "; ".join(unknown)
    elif spot:
        note = "on-demand ceiling: spot bills the spot price (often 60-90% less) for the time actually trained"
    else:
        note = "ceiling: on-demand us-east-1 list price x count x (max_run + warm pool); billed per second used"
    return {
        "groups": rows,
        "max_hours": round(max_run_s / 3600, 3),
        "warm_pool_hours": round(warm_pool_s / 3600, 3),
        "max_usd": None if math.isnan(total) else round(total, 2),
        "spot": spot,
        "note": note,
    }


# ---- embedding memory ----


def embedding_bytes(feature_size: int, embedding_size: int, optimizer: str, baseline: bool = False) -> int:
    """The two tables (first-order weights and embeddings: feature_size x (1 + embedding_size) float32)
    and their optimizer slots, all held by the parameter servers; with `baseline`, the logistic regression's
    weights and Adam moments beside them."""
    floats = (1 + embedding_size) * (1 + OPTIMIZER_SLOTS[optimizer]) + (BASELINE_FLOATS if baseline else 0)
    return feature_size * floats * FLOAT_BYTES


def embedding_words(feature_size: int, embedding_size: int, optimizer: str, baseline: bool = False) -> str:
    """How embedding_bytes counted them, for a finding."""
    slots = OPTIMIZER_SLOTS[optimizer]
    words = (
        f"feature_size {feature_size:,} x (1 + embedding_size {embedding_size}) x {FLOAT_BYTES} bytes x "
        f"(1 + {slots} {optimizer} slot{'s' if slots != 1 else ''})"
    )
    if baseline:
        words += f" + {BASELINE_FLOATS} floats per id for the baseline (its weight and Adam moments)"
    return words


def gib(value: float) -> str:
    return f"{value / GIB:,.1f} GiB"


def embedding_memory_findings(
    feature_size: int,
    embedding_size: int,
    optimizer: str,
    ps: InstanceGroup,
    restores: bool = False,
    baseline: bool = False,
) -> list[tuple[str, str]]:
    """[(severity, message)]: "error" when the ps processes at their peak (ps_share_factor x the tables and slots,
    plus a working set each) exceed the ps group's memory, "warning" above WARN_FRACTION of it; nothing for an
    instance type dfm does not know. `restores`: the job may restore a checkpoint; `baseline`: it trains the
    logistic-regression baseline."""
    info = catalog.instance(ps.instance_type)
    if info is None:
        return []
    tables = embedding_bytes(feature_size, embedding_size, optimizer, baseline)
    factor = ps_share_factor(restores)
    needed = math.ceil(tables * factor) + ps.count * PROCESS_WORKING_SET
    available = info.memory_gib * GIB * ps.count
    how = (
        f"{embedding_words(feature_size, embedding_size, optimizer, baseline)} = {gib(tables)}, "
        f"x {factor} at the ps processes' peak{' (they restore checkpoints)' if restores else ''} + "
        f"{gib(PROCESS_WORKING_SET)} each"
    )
    have = f"{ps.count} x {ps.instance_type} ({info.memory_gib} GiB each) = {gib(available)}"
    share = needed / available
    per_instance = info.memory_gib * GIB * WARN_FRACTION - PROCESS_WORKING_SET
    enough = max(ps.count + 1, math.ceil(tables * factor / per_instance))
    if share > 1:
        return [
            (
                "error",
                f"the embedding tables need {gib(needed)} ({how}), more than the ps group's {have}: "
                f"use count {enough} or a larger memory instance for the ps, or a smaller feature_size",
            )
        ]
    if share > WARN_FRACTION:
        return [
            (
                "warning",
                f"the embedding tables need {gib(needed)} ({how}), {share:.0%} of the ps group's "
                f"{have}: the ps processes need headroom; count {enough} keeps them under "
                f"{WARN_FRACTION:.0%}",
            )
        ]
    return []


def script_hyperparameters(ps_per_host: int = 1) -> dict[str, Any]:
    """What the launcher adds to the bundled script's hyperparameters for this layout."""
    return {PS_GROUP_HYPERPARAMETER: PS_GROUP, PS_PER_HOST_HYPERPARAMETER: ps_per_host}
