"""What runs on each host of a job: shown by the dry run, and the container addresses `--local` maps to loopback.

A parameter-server job on its own ps group is laid out by the bundled script itself: its own cluster
builder (entrypoints/hetero_cluster.py, loaded by `contract.bundled_cluster`) reads the resourceconfig.json
SageMaker writes (`hosts.resource_configs`), so the launcher shows exactly the tasks the script will start.
Every other layout is the SageMaker TensorFlow toolkit's.
"""

from __future__ import annotations

from typing import Any

from launcher import contract, hosts


def script_cluster(plan: Any) -> Any:
    """The bundled script's cluster of a ps-group job (hetero_cluster.HeteroCluster)."""
    config = next(iter(hosts.resource_configs(plan.instance_groups).values()))
    return contract.bundled_cluster().build_cluster(config, hosts.PS_GROUP, ps_per_host=plan.distribution.ps_per_host)


def tasks_by_host(plan: Any) -> dict[str, list[str]]:
    """host -> the processes that run there (`ps`, `master`, `worker:1`, `rank:3`, `chief:0`, `script`)."""
    names = hosts.all_hosts(plan.instance_groups)
    kind, per_host = plan.distribution.kind, plan.distribution.processes_per_host
    if not plan.distribution.toolkit:
        if not plan.bundled:  # your script builds the cluster from resourceconfig.json
            return {host: ["script"] for host in names}
        tasks = script_cluster(plan).tasks
        return {host: [t.name for t in tasks if t.host == host] for host in names}
    if kind == "parameter_server" and len(names) > 1:  # the toolkit starts a ps beside the script on each host
        return {host: ["ps", "master" if i == 0 else f"worker:{i - 1}"] for i, host in enumerate(names)}
    if kind == "horovod":
        return {host: [f"rank:{i * per_host + k}" for k in range(per_host)] for i, host in enumerate(names)}
    if kind == "multi_worker_mirrored":
        return {host: [f"worker:{i}"] for i, host in enumerate(names)}
    return {host: ["script"] for host in names}


def container_addresses(plan: Any) -> list[str]:
    """Every host:port a task of the bundled script's ps-group cluster listens on, in task order."""
    return [task.address for task in script_cluster(plan).tasks]


def describe(plan: Any) -> list[dict[str, Any]]:
    """Each instance group with its hosts and what runs on each, for the dry run."""
    by_group, tasks = hosts.host_names(plan.instance_groups), tasks_by_host(plan)
    return [{"group": g.name, "role": g.role, "instance_type": g.instance_type, "instance_count": g.count,
             "hosts": {host: tasks[host] for host in by_group[g.name]}} for g in plan.instance_groups]
