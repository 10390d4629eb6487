"""What runs on one training host, by instance type and distribution: processes and model replicas.

Pure (no I/O). For the dry run's cluster view and the GPU rules. The bundled scripts decide the same
from SM_NUM_GPUS (entrypoints/ps_gpu_workers.py, train_mirrored.py, SageMaker's mpirun for Horovod).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher import catalog


@dataclass(frozen=True)
class HostTasks:
    worker_tasks: int  # training processes on the host (PS worker tasks, Horovod ranks, MWMS workers)
    replicas_per_task: int  # model copies each process drives (MWMS: one per GPU)
    gpus_per_task: int  # GPUs each process sees

    @property
    def replicas(self) -> int:
        return self.worker_tasks * self.replicas_per_task


def tasks_per_host(instance_type: str, distribution: str, processes_per_host: int = 1) -> HostTasks:
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
