"""DeepFM with SageMaker's parameter-server distribution, or plainly on one host (no TF_CONFIG).

Roles, from the TF_CONFIG the SageMaker TensorFlow toolkit writes (`master` = first host, `ps` on
every host at 2223 started by the toolkit itself, `worker` = the other hosts at 2222):
- master -> renamed chief: runs the training loop with deepfm_coordinator's steps. It also starts one
  worker task of its own (a child process at a free port, appended to the cluster) so that the master
  host's share of the data is trained on too; DFM_PS_CHIEF_WORKER=0 turns that off.
- worker: serves a tf.distribute.Server and exits once the chief's port has gone away.
On a host with G > 1 GPUs (SM_NUM_GPUS) every worker host, the master's included, runs G worker tasks,
each pinned to its GPU and reading its own shard (ps_gpu_workers): ParameterServerStrategy must never see
more than one GPU per worker task.
- ps (only when a launcher other than the toolkit starts it through this script): same, as a ps.
Without TF_CONFIG it runs the training loop with deepfm_sync's steps as a single process (one host), unless
the `ps_group` hyperparameter names the parameter servers' instance group of a heterogeneous job: then every
host builds the cluster from resourceconfig.json (hetero_cluster) and runs its own tasks (run_heterogeneous).
Both cluster layouts are data (the jobs of a host's tasks, a ChiefLayout) for one chief (train_chief).
"""

import json
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass

import hetero_cluster
import ps_gpu_workers as gpu_workers
from deepfm_container import start_or_exit
from deepfm_log import log, log_peak_memory
from deepfm_tuning import (
    HOST_ROLES_ENV,
    configure_tensorflow,
    per_process_threads,
    roles_from_environment,
    server_config,
    set_thread_environment,
)

PROG = "train_ps.py"
CHIEF_WORKER_ENV = "DFM_PS_CHIEF_WORKER"
# Set by a heterogeneous chief for the child that runs its host's worker task: the task's name ("worker:0").
HETERO_TASK_ENV = "DFM_HETERO_TASK"
# This process's role and host, named by its memory line as it exits (exit_now).
PROCESS = {}


def main(argv):
    hp, env = start_or_exit(argv, PROG)
    PROCESS["host"] = env.current_host
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = tf_config.get("cluster", {})
    if not cluster and hp.ps_group:
        return run_heterogeneous(hp, env, argv)
    if not cluster or sum(len(v) for v in cluster.values()) <= 1:
        PROCESS["role"] = "single"
        return train_single_host(thread_budget(hp, env, ["single process"]), env)
    cluster, task_type, task_index = rename_master(cluster, tf_config["task"])
    PROCESS["role"] = task_type
    per_host = gpu_workers.workers_per_host(env.num_gpus)
    hp = thread_budget(hp, env, roles_from_environment() or host_roles(toolkit_jobs(task_type, per_host)))
    if task_type == "ps":
        return serve_until_chief_done(hp, env, cluster, task_type, task_index)
    if task_type == "worker":
        return serve_worker_tasks(hp, env, cluster, task_index, argv, per_host)
    return train_chief(hp, env, toolkit_chief_layout(cluster, per_host), argv)


def thread_budget(hp, env, roles):
    """This host's vCPUs split over the processes it runs (`roles`), for the thread pools left at 0; the
    OpenMP environment set before TensorFlow starts. The processes this one starts inherit the roles."""
    hp = per_process_threads(hp, env.num_cpus, len(roles), roles)
    set_thread_environment(hp, env)
    os.environ[HOST_ROLES_ENV] = ",".join(roles)
    return hp


def host_roles(jobs):
    """The processes on a host whose tasks are of `jobs`, in either cluster layout: one ps server for all its
    ps tasks (the toolkit's own process, or this script's), then the chief and one per worker task."""
    return (["ps server"] if "ps" in jobs else []) + [job for job in jobs if job != "ps"]


def toolkit_jobs(task_type, per_host):
    """The jobs of a host's tasks in the toolkit's layout: a ps on every host, and the chief with its worker
    tasks (unless DFM_PS_CHIEF_WORKER=0) on the master host, else its worker tasks."""
    workers = ["worker"] * per_host
    if task_type == "chief":
        return ["ps", "chief"] + (workers if chief_runs_worker() else [])
    return ["ps"] + workers


def rename_master(cluster, task):
    """TF2's ParameterServerStrategy knows `chief`, not TF1's `master`."""
    cluster = {("chief" if job == "master" else job): list(addrs) for job, addrs in cluster.items()}
    task_type = "chief" if task["type"] == "master" else task["type"]
    return cluster, task_type, int(task["index"])


def train_single_host(hp, env):
    """The synchronous loop with one process's collectives. One process, one replica: nothing needs equal
    batch shapes, so each epoch's last partial batch is trained on too."""
    compute_dtype = configure_tensorflow(hp, env)
    import deepfm_sync
    from deepfm_collectives import SingleProcess
    from deepfm_worker_input import ALONE

    collectives = SingleProcess()
    trainer, learning_rate = deepfm_sync.build_sync_trainer(hp, collectives, compute_dtype)
    log(f"single host: optimizer={hp.optimizer} learning_rate={learning_rate:g}")
    deepfm_sync.run(hp, env, trainer, collectives, ALONE, whole_batches=False)
    return 0


def chief_runs_worker():
    return os.environ.get(CHIEF_WORKER_ENV, "1").lower() not in ("0", "false", "no")


def training_hosts(env):
    """Hosts that run a worker task: all, or all but the master when its own worker is off."""
    return list(env.hosts) if chief_runs_worker() else list(env.hosts[1:])


def serve_worker_tasks(hp, env, cluster, task_index, argv, per_host):
    """A worker host of the toolkit's layout: its first task (this process, GPU 0) and, on a host with
    per_host GPUs, per_host - 1 more as child processes, each on its own GPU, port and shard. A process
    started as one of those (or as one of the chief's worker tasks) gets the cluster already expanded."""
    if gpu_workers.is_extra_task():
        rank = gpu_workers.local_rank()
    else:
        rank, task_index = 0, task_index * per_host
        cluster = dict(cluster, worker=gpu_workers.expand_workers(cluster.get("worker", []), per_host))
        os.environ.update(gpu_workers.gpu_environment(0, per_host))  # before TensorFlow starts
        for k in range(1, per_host):
            tf_config = {"cluster": cluster, "task": {"type": "worker", "index": task_index + k}}
            start_child(argv, {"TF_CONFIG": json.dumps(tf_config), **gpu_workers.gpu_environment(k, per_host)})
    return serve_until_chief_done(hp, env, cluster, "worker", task_index, local_rank=rank, per_host=per_host)


def serve_until_chief_done(hp, env, cluster, task_type, task_index, data_hosts=None, local_rank=0, per_host=1):
    """data_hosts: the hosts whose workers share the training data, in shard order (default: training_hosts);
    this task is worker `local_rank` of the `per_host` on its host."""
    configure_tensorflow(hp, env)  # the chief traces the steps, in the dtype this logs
    import tensorflow as tf

    if task_type == "worker":
        from deepfm_worker_shard import write_worker_shard

        hosts = list(data_hosts) if data_hosts is not None else training_hosts(env)
        workdir = gpu_workers.task_workdir(env.base_dir, local_rank, per_host)
        channels, mode, (num_shards, index) = write_worker_shard(
            hp, env, hosts, task_index, local_rank, per_host, workdir
        )
        if mode.lower() == "pipe":
            import sagemaker_tensorflow  # noqa: F401  registers the PipeModeDataset op in this server
        os.chdir(workdir)  # the chief's dataset function uses paths relative to this
        log(
            f"worker {task_index} on {env.current_host}: channels={channels} mode={mode} "
            f"shard={index}/{num_shards} task={local_rank}/{per_host} "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(all)')}"
        )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster),
        job_name=task_type,
        task_index=task_index,
        protocol="grpc",
        config=server_config(),
        start=True,
    )
    chief_host, chief_port = cluster["chief"][0].rsplit(":", 1)
    # the chief ends its own worker tasks with SIGTERM: they still say their peak memory
    signal.signal(signal.SIGTERM, lambda signum, frame: exit_now(128 + signum))
    log(f"{task_type} {task_index} serving {server.target}; waiting for the chief at {chief_host}:{chief_port}")
    seen = wait_until_gone(chief_host, chief_port)
    log(f"{task_type} {task_index}: chief {'finished' if seen else 'never appeared'}; exiting")
    exit_now(0 if seen else 1)


@dataclass(frozen=True)
class ChiefLayout:
    """What the chief of a cluster layout starts and waits for: the cluster it trains with, the extra
    environment of each worker task it starts on its own host (this script again), the other tasks
    (hetero_cluster.Task), and the worker tasks per host (more than one: the GPUs are theirs)."""

    cluster: dict
    children: tuple
    tasks: tuple
    per_host: int

    def task_at(self, device):
        """The task a TensorFlow device name names, or None (hetero_cluster.ps_failure_message asks)."""
        return next((t for t in self.tasks if device == t.device or device.startswith(t.device + "/")), None)


def toolkit_chief_layout(cluster, per_host):
    """The toolkit's layout: one worker per other host, expanded to per_host tasks, and the master host's own
    worker tasks (unless DFM_PS_CHIEF_WORKER=0)."""
    cluster = dict(cluster, worker=gpu_workers.expand_workers(cluster.get("worker", []), per_host))
    children = []
    if chief_runs_worker():
        cluster, children = chief_worker_tasks(cluster, per_host)
    tasks = [
        hetero_cluster.Task(job, index, address.rsplit(":", 1)[0], address)
        for job, addresses in cluster.items()
        if job != "chief"
        for index, address in enumerate(addresses)
    ]
    return ChiefLayout(cluster, tuple(children), tuple(tasks), per_host)


def chief_worker_tasks(cluster, per_host=1):
    """The master host's own worker tasks (one per GPU, one on a CPU host) at free ports outside the ephemeral
    range, appended to `worker`. No other host derives them: the chief hands its cluster to every task when it
    connects (remote eager contexts). -> (the cluster with them, each one's extra environment)."""
    chief_host = cluster["chief"][0].rsplit(":", 1)[0]
    first = len(cluster.get("worker", []))
    ports = [hetero_cluster.free_port() for _ in range(per_host)]
    cluster = dict(cluster, worker=list(cluster.get("worker", [])) + [f"{chief_host}:{port}" for port in ports])
    children = []
    for rank in range(per_host):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": first + rank}}
        children.append(
            {
                "TF_CONFIG": json.dumps(tf_config),
                gpu_workers.LOCAL_WORKER_ENV: str(rank),
                **gpu_workers.gpu_environment(rank, per_host),
            }
        )
    return cluster, children


def hetero_chief_layout(cluster, per_host):
    """A heterogeneous job's layout (hetero_cluster.HeteroCluster): the chief's host runs worker 0."""
    workers = [t for t in cluster.local_tasks() if t.job == "worker"]
    children = [
        {HETERO_TASK_ENV: w.name, **gpu_workers.gpu_environment(rank, per_host)} for rank, w in enumerate(workers)
    ]
    return ChiefLayout(
        cluster.cluster_spec(), tuple(children), tuple(t for t in cluster.tasks if t.job != "chief"), per_host
    )


def train_chief(hp, env, layout, argv):
    """The chief of either layout: start its host's worker tasks, wait for every task, run the coordinator's
    training. A task that never came up or a dead ps ends the run with one line naming it; else its traceback."""
    from deepfm_coordinator import train_with_coordinator

    children = []
    try:
        for extra_env in layout.children:
            children.append(start_child(argv, extra_env))
        if not layout.cluster.get("worker"):
            raise hetero_cluster.ClusterError("no worker task: with DFM_PS_CHIEF_WORKER=0 a single host cannot train")
        if layout.per_host > 1:  # the GPUs are the worker tasks'; the chief traces and evaluates on the CPU
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        hetero_cluster.wait_for_tasks(layout.tasks)
        return train_with_coordinator(hp, env, layout.cluster)
    except Exception as err:  # noqa: BLE001
        missing = isinstance(err, hetero_cluster.ClusterError)
        message = str(err) if missing else hetero_cluster.ps_failure_message(err, layout)
        if message is None:
            raise
        for child in children:
            stop_child(child)
        # Exit before the failed run is torn down: its remote functions' cleanup would log more errors.
        fail(message, exit_at_once=True)
    finally:
        for child in children:
            stop_child(child)


# ---- a heterogeneous job: ps and workers in their own instance groups ----


def run_heterogeneous(hp, env, argv):
    """This host's tasks of the cluster in resourceconfig.json: a ps host serves its ps tasks; the
    first worker host runs the chief and (as a child process) worker 0; every other worker host serves
    its worker. A worker's data shard is its host's position in the worker group."""
    per_host = gpu_workers.workers_per_host(env.num_gpus)  # a ps host's own count: its view of the workers
    try:  # is unused (the chief's cluster reaches every task)
        cluster = hetero_cluster.build_cluster(
            hetero_cluster.read_resource_config(),
            hp.ps_group,
            ps_per_host=hp.ps_per_host,
            workers_per_host=per_host,
            addresses=hetero_cluster.addresses_from_env(),
        )
    except hetero_cluster.ClusterError as err:
        return fail(err)
    hp = thread_budget(hp, env, roles_from_environment() or host_roles([t.job for t in cluster.local_tasks()]))
    mine = {task.name: task for task in cluster.local_tasks()}
    chosen = os.environ.get(HETERO_TASK_ENV)
    task = mine.get(chosen) if chosen else cluster.local_tasks()[0]
    if task is None:
        return fail(f"{HETERO_TASK_ENV}={chosen} names no task of {cluster.current_host} ({', '.join(mine)})")
    PROCESS["role"] = task.job
    if task.job == "ps":
        return serve_ps_tasks(hp, env, cluster)
    if task.job == "worker":
        rank = task.index % per_host
        if not chosen:  # this host's other worker tasks, one per GPU
            os.environ.update(gpu_workers.gpu_environment(rank, per_host))
            for other in [t for t in mine.values() if t.job == "worker" and t is not task]:
                start_child(
                    argv, {HETERO_TASK_ENV: other.name, **gpu_workers.gpu_environment(other.index % per_host, per_host)}
                )
        return serve_until_chief_done(
            hp,
            env,
            cluster.cluster_spec(),
            "worker",
            task.index,
            cluster.worker_hosts,
            local_rank=rank,
            per_host=per_host,
        )
    return train_chief(hp, env, hetero_chief_layout(cluster, per_host), argv)


def serve_ps_tasks(hp, env, cluster):
    configure_tensorflow(hp, env)
    import tensorflow as tf

    def start_server(task):
        return tf.distribute.Server(
            tf.train.ClusterSpec(cluster.cluster_spec()),
            job_name="ps",
            task_index=task.index,
            protocol="grpc",
            config=server_config(),
            start=True,
        )

    return hetero_cluster.serve_until_chief_done(cluster, start_server, log=log)


def fail(message, exit_at_once=False):
    print(f"[dfm] error: {message}", file=sys.stderr, flush=True)
    if exit_at_once:
        exit_now(1)
    return 1


# ---- the processes of a parameter-server cluster ----


def start_child(argv, extra_env):
    """This script again, as a child process of the chief, with extra_env added to the environment."""
    return subprocess.Popen([sys.executable, os.path.abspath(__file__)] + list(argv), env=dict(os.environ, **extra_env))


def stop_child(child):
    if child is None or child.returncode is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def wait_until_gone(host, port, appear_timeout=1800.0, poll=1.0):
    """Block until host:port has been reachable and then is not (the chief has finished); give up if it
    never appears within appear_timeout. -> True when it was seen going away."""
    return hetero_cluster.wait_until_gone(f"{host}:{port}", appear_timeout=appear_timeout, poll=poll)


def exit_now(code=0):
    """Leave without waiting on TensorFlow's server threads (server.join() never returns); a process that knows
    its role and ends well (or by the chief's SIGTERM) says its peak resident memory first: after a failure the
    error stays the last line."""
    if "role" in PROCESS and code in (0, 128 + signal.SIGTERM):
        log_peak_memory(PROCESS["role"], PROCESS.get("host", ""))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except SystemExit as done:  # a bad flag: start_or_exit already said which
        code = done.code
    except BaseException:  # noqa: B902  a failed chief must not hang on the coordinator's threads
        traceback.print_exc()
        code = 1
    exit_now(code or 0)
