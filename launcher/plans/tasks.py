"""What runs on each host of a job: shown by the dry run, and the container addresses `--local` maps to loopback.

Per host, by instance type (`host_tasks`, pure): the bundled deepfm-ps runs one worker task per GPU (a worker
that saw several would run each batch once per GPU), Horovod one rank per process, MultiWorkerMirrored one
process driving every GPU. A parameter-server job on its own ps group is laid out by the bundled script itself: its own
cluster
builder (entrypoints/hetero_cluster.py, loaded by `contract.bundled_cluster`) reads the resourceconfig.json
SageMaker writes (`hosts.resource_configs`), so the launcher shows exactly the tasks the script will start.
Every other layout is the SageMaker TensorFlow toolkit's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.facts import catalog
from launcher.facts import contract
from launcher.plans import hosts


@dataclass(frozen=True)
class HostTasks:
    worker_tasks: int  # training processes on the host (PS worker tasks, Horovod ranks, MWMS workers)
    replicas_per_task: int  # model copies each process drives (MWMS: one per GPU)
    gpus_per_task: int  # GPUs each process sees

    @property
    def replicas(self) -> int:
        return self.worker_tasks * self.replicas_per_task


def host_tasks(instance_type: str, distribution: str, processes_per_host: int = 1) -> HostTasks:
    """distribution: the spec's kind (parameter_server, horovod, multi_worker_mirrored, none).

    parameter_server (deepfm-ps): one worker task per GPU, each seeing one; one task on a CPU host.
    horovod: processes_per_host ranks (SageMaker's mpirun), each pinned to one GPU.
    multi_worker_mirrored and none: one process driving every GPU of the host as a replica.
    An instance type dfm does not know is taken as a CPU host."""
    info = catalog.instance(instance_type)
    gpus = info.gpus if info is not None else 0
    if distribution == "parameter_server":
        return HostTasks(max(gpus, 1), 1, 1 if gpus else 0)
    if distribution == "horovod":
        return HostTasks(processes_per_host, 1, 1 if gpus else 0)
    if distribution == "multi_worker_mirrored":
        return HostTasks(1, max(gpus, 1), gpus)
    return HostTasks(1, 1, gpus)


def _ps_workers_per_host(plan: Any) -> int:
    return host_tasks(plan.instance_type, "parameter_server").worker_tasks


def script_cluster(plan: Any) -> Any:
    """The bundled script's cluster of a ps-group job (hetero_cluster.HeteroCluster)."""
    config = next(iter(hosts.resource_configs(plan.instance_groups).values()))
    # as many parameter servers per host as the script is told (a script of yours: the script's default, unless
    # your hyperparameters say ps_per_host)
    per_host = plan.hyperparameters.get(
        hosts.PS_PER_HOST_HYPERPARAMETER, contract.bundled_hparams().DEFAULTS[hosts.PS_PER_HOST_HYPERPARAMETER]
    )
    return contract.bundled_cluster().build_cluster(
        config, hosts.PS_GROUP, ps_per_host=per_host, workers_per_host=_ps_workers_per_host(plan)
    )


def tasks_by_host(plan: Any) -> dict[str, list[str]]:
    """host -> the processes that run there (`ps`, `master`, `worker:1`, `rank:3`, `chief:0`, `script`)."""
    names = hosts.all_hosts(plan.instance_groups)
    kind, per_host = plan.distribution.kind, plan.distribution.processes_per_host
    if not plan.toolkit_cluster:
        if not plan.bundled:  # your script builds the cluster from resourceconfig.json
            return {host: ["script"] for host in names}
        tasks = script_cluster(plan).tasks
        return {host: [t.name for t in tasks if t.host == host] for host in names}
    if kind == "parameter_server" and len(names) > 1 and plan.bundled:
        # the toolkit starts a ps on each host; TF_CONFIG's workers are the other hosts, and the master also
        # runs its own host's worker tasks (appended after them)
        per, others = _ps_workers_per_host(plan), names[1:]
        found = {host: ["ps", *(f"worker:{i * per + k}" for k in range(per))] for i, host in enumerate(others)}
        return {names[0]: ["ps", "master", *(f"worker:{len(others) * per + k}" for k in range(per))], **found}
    if kind == "parameter_server" and len(names) > 1:  # your script beside the toolkit's ps
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
    return [
        {
            "group": g.name,
            "role": g.role,
            "instance_type": g.instance_type,
            "instance_count": g.count,
            "hosts": {host: tasks[host] for host in by_group[g.name]},
        }
        for g in plan.instance_groups
    ]
