"""One parameter-server worker task per GPU of a host (seed 004's layout).

ParameterServerStrategy counts the GPUs each worker task sees (`_set_num_gpus` over the workers' remote
devices) and makes that its `num_replicas_in_sync`: a worker seeing 4 GPUs would run every scheduled
step as 4 replicas of one batch, with aggregating variables, metrics assigned per replica and the step
counter advanced 4 times per batch. The bundled script never lets a worker see more than one GPU: a
host with G GPUs (SM_NUM_GPUS) runs G worker tasks, task k pinned with CUDA_VISIBLE_DEVICES=k and
reading local shard k of its host (the shard table with workers_per_host = G).

Addresses: the toolkit's worker task of a host keeps its port P; the host's task k > 0 listens at
P + PORT_STRIDE x k, so every host derives the same addresses from TF_CONFIG alone (the chief's own
worker tasks listen at free ports: the chief hands its cluster to every task). Standard library only: this runs before
TensorFlow starts, and CUDA_VISIBLE_DEVICES must be set before it does.
"""

import os

LOCAL_WORKER_ENV = "DFM_LOCAL_WORKER"  # set on a host's worker task k (its GPU and local rank)
PORT_STRIDE = 100  # toolkit ports: worker 2222, ps 2223; extra worker tasks 2322, 2422, ...


def workers_per_host(num_gpus):
    """Worker tasks on a host with `num_gpus` GPUs: one per GPU, one on a CPU host."""
    return max(1, int(num_gpus))


def local_rank(environ=None):
    """This process's worker task on its host (0: the task the toolkit or the chief started first)."""
    env = os.environ if environ is None else environ
    return int(env.get(LOCAL_WORKER_ENV, "0"))


def is_extra_task(environ=None):
    env = os.environ if environ is None else environ
    return LOCAL_WORKER_ENV in env


def gpu_environment(rank, per_host):
    """The variables pinning worker task `rank` of a host to its GPU (nothing on a single-GPU or CPU host)."""
    if per_host <= 1:
        return {}
    return {"CUDA_VISIBLE_DEVICES": str(rank), LOCAL_WORKER_ENV: str(rank)}


def task_address(address, rank):
    """The address of a host's worker task `rank`, from its first task's `host:port`."""
    host, port = address.rsplit(":", 1)
    return f"{host}:{int(port) + PORT_STRIDE * rank}"


def expand_workers(addresses, per_host):
    """The toolkit's one worker address per host -> per_host addresses per host, host by host."""
    return [task_address(address, rank) for address in addresses for rank in range(per_host)]


def placement(hosts, host, rank, per_host):
    """(rank, size, num_hosts) of worker task `rank` on `host` among `hosts` (each with per_host tasks),
    for deepfm_worker_input.Placement: the shard table reads host index and local rank from it."""
    if not 0 <= rank < per_host:
        raise ValueError(f"worker task {rank} of {per_host} on {host}")
    return hosts.index(host) * per_host + rank, len(hosts) * per_host, len(hosts)


def task_workdir(base_dir, rank, per_host):
    """The working directory of worker task `rank`: the chief's traced dataset function reads its shard
    file and the data through paths relative to it, so the tasks of one host each need their own
    (with `input` linked to the host's). A host's only task keeps the base dir itself."""
    if per_host <= 1:
        return base_dir
    workdir = os.path.join(base_dir, f"dfm-worker-task-{rank}")
    os.makedirs(workdir, exist_ok=True)
    link = os.path.join(workdir, "input")
    if not os.path.islink(link):
        os.symlink(os.path.join(base_dir, "input"), link)
    return workdir


def in_worker_replicas_problem(num_replicas):
    """Why a strategy with more than one replica per worker must not train, or None."""
    if num_replicas <= 1:
        return None
    return (
        f"ParameterServerStrategy sees {num_replicas} GPUs on each worker task, so it would run every "
        f"batch as {num_replicas} replicas (each applying the same batch, the step counter advancing "
        f"{num_replicas} per batch, metrics written per replica): run one worker task per GPU, each with "
        "CUDA_VISIBLE_DEVICES set to its GPU (deepfm-ps does this when SM_NUM_GPUS > 1)"
    )
