"""deepfm-ps on multi-GPU hosts: one worker task per GPU, each pinned to its GPU and reading its own shard.

No GPU here: SM_NUM_GPUS says how many the host has (what the container tells the script), TensorFlow sees
none, so each task's CUDA_VISIBLE_DEVICES pins nothing; the cluster's shape, the shards and the step count
are real. A worker that sees 2 GPUs is faked by telling ParameterServerStrategy so (its GPU discovery
patched in the chief), and must be refused.
"""

import json

import pytest
from test_entry_hetero import SIX_HOSTS, resource_config
from test_entry_ps import HP, group_gone, loopback_cluster, stop_all, two_hosts_s3_sharded

import entry_support as es
import hetero_cluster as hc
import ps_gpu_workers as gw


def test_worker_tasks_per_host_and_their_addresses():
    assert [gw.workers_per_host(g) for g in (0, 1, 4)] == [1, 1, 4]
    assert gw.expand_workers(["algo-2:2222", "algo-3:2222"], 2) == [
        "algo-2:2222",
        "algo-2:2322",
        "algo-3:2222",
        "algo-3:2322",
    ]
    assert gw.expand_workers(["algo-2:2222"], 1) == ["algo-2:2222"]
    assert gw.gpu_environment(3, 4) == {"CUDA_VISIBLE_DEVICES": "3", gw.LOCAL_WORKER_ENV: "3"}
    assert gw.gpu_environment(0, 1) == {}  # one GPU (or none): the process keeps what it sees


@pytest.mark.parametrize(
    "host, rank, expected", [("algo-1", 0, (0, 8, 2)), ("algo-1", 3, (3, 8, 2)), ("algo-2", 1, (5, 8, 2))]
)
def test_placement_feeds_the_shard_table_with_workers_per_host(host, rank, expected):
    import deepfm_input as di
    from deepfm_worker_input import Placement

    assert gw.placement(["algo-1", "algo-2"], host, rank, 4) == expected
    where = Placement(*expected)
    shard = di.shard_for(where.num_hosts, where.host_index, where.workers_per_host, where.local_rank, False, False)
    assert shard == (8, expected[0])  # every task its own eighth of the data
    assert di.shard_for(where.num_hosts, where.host_index, where.workers_per_host, where.local_rank, False, True) == (
        4,
        rank,
    )  # S3 already split the hosts: the tasks of one host split its objects


def test_hetero_cluster_runs_one_worker_task_per_gpu():
    cluster = hc.build_cluster(resource_config(SIX_HOSTS, "algo-1"), "ps", workers_per_host=2)
    assert cluster.cluster_spec()["worker"] == [
        "algo-1:2223",
        "algo-1:2323",
        "algo-2:2223",
        "algo-2:2323",
        "algo-3:2223",
        "algo-3:2323",
        "algo-4:2223",
        "algo-4:2323",
    ]
    assert [t.name for t in cluster.local_tasks()] == ["chief:0", "worker:0", "worker:1"]
    assert hc.PORT_STRIDE == gw.PORT_STRIDE


def test_more_than_one_replica_per_worker_is_refused_with_the_fix():
    assert gw.in_worker_replicas_problem(1) is None
    assert "one worker task per GPU" in gw.in_worker_replicas_problem(2)


def two_host_cluster(tmp_path, rows, num_gpus):
    bases, envs, parts, evaluation = two_hosts_s3_sharded(tmp_path, rows, 256)
    for base, env, part in zip(bases, envs, parts):
        es.write_tfrecords(base / "input/data/train", part, 4)
        es.write_tfrecords(base / "input/data/eval", evaluation, 1)
        env["SM_NUM_GPUS"] = str(num_gpus)
        env["SM_NUM_CPUS"] = "8"  # what an 8-vCPU instance's container says (the threads are split, not pinned)
    return bases, envs


def run(tmp_path, bases, envs, hp, chief_boot=None, wait_all=True):
    """The toolkit's ps on both hosts, train_ps.py on each host; -> (codes, chief log, worker log, procs).
    wait_all=False: only the chief's exit is awaited (a chief that fails fast may be gone before the
    other tasks saw it, and they then wait for it to appear)."""
    cluster = loopback_cluster()
    procs = [es.start_toolkit_ps(cluster, i, envs[i], tmp_path / f"ps{i}.log") for i in range(2)]
    try:
        procs.append(
            es.start_script(
                bases[1],
                "train_ps.py",
                hp,
                envs[1],
                tmp_path / "worker.log",
                {"TF_CONFIG": es.sagemaker_tf_config(cluster, "worker", 0)},
            )
        )
        procs.append(
            es.start_script(
                bases[0],
                "train_ps.py",
                hp,
                envs[0],
                tmp_path / "chief.log",
                {"TF_CONFIG": es.sagemaker_tf_config(cluster, "master", 0)},
                boot=chief_boot,
            )
        )
        codes = [procs[-1].wait(timeout=400)]
        codes += [p.wait(timeout=60) for p in reversed(procs[:-1])] if wait_all else []
    finally:
        stop_all(procs)
    return codes, (tmp_path / "chief.log").read_text(), (tmp_path / "worker.log").read_text(), procs


@pytest.mark.slow
def test_two_gpu_hosts_run_four_worker_tasks_each_batch_counted_once(tmp_path):
    rows, batch = 4096, 128
    bases, envs = two_host_cluster(tmp_path, rows, num_gpus=2)
    hp = dict(HP, batch_size=batch, log_steps=8, mixed_precision="true")
    codes, chief, worker, procs = run(tmp_path, bases, envs, hp)
    assert codes == [0, 0, 0, 0], chief[-3000:] + worker[-2000:]
    assert all(group_gone(proc) for proc in procs)  # the extra worker tasks too
    assert "chief: 4 workers, 2 ps, replicas_in_sync=1 per worker task" in chief
    # the worker host: its two tasks, GPU 0 and 1, each half of the host's S3 objects
    assert "shard=0/2 task=0/2 CUDA_VISIBLE_DEVICES=0" in worker
    assert "shard=1/2 task=1/2 CUDA_VISIBLE_DEVICES=1" in worker
    for rank in (0, 1):  # the chief's host likewise (its worker tasks log into the chief's log)
        assert (
            f"on algo-1: channels=['train'] mode=File shard={rank}/2 task={rank}/2 CUDA_VISIBLE_DEVICES={rank}" in chief
        )
    # each task its own shard file (the traced dataset function reads it relative to the task's directory)
    shard_files = {
        (host, rank): (tmp_path / host / f"dfm-worker-task-{rank}" / "dfm-worker-shard.txt").read_text().split()
        for host in ("algo-1", "algo-2")
        for rank in (0, 1)
    }
    assert sorted(f[2] for f in shard_files.values()) == ["0", "1", "2", "3"]
    assert all(f[:2] == ["2", str(rank)] for (_, rank), f in shard_files.items())
    assert "training data exhausted on every worker" in chief  # all 4 tasks reported their end
    # 8 vCPUs split over each host's processes, logged once by each: the master host runs the toolkit's ps
    # server, the chief and 2 worker tasks, the other host the ps server and 2 worker tasks
    master = (
        "intra_op_threads=2 inter_op_threads=2 data_threads=2 KMP_AFFINITY=granularity=fine,compact,1,0 "
        "OMP_NUM_THREADS=2"
    )
    assert (
        chief.count(master) == 3
        and chief.count("(8 vCPUs / 4 processes on this host: ps server, chief, 2 workers)") == 3
    )
    assert worker.count(master) == 2 and worker.count("(8 vCPUs / 3 processes on this host: ps server, 2 workers)") == 2
    # the chief traces the steps in the float16 mixed_precision asks for (its own GPUs hidden); the workers say so too
    assert "mixed_precision=float16 " in chief and worker.count("mixed_precision=float16 ") == 2
    # one step per batch: each of the 4 tasks reads 2 of the 8 files (1024 rows, 8 batches of 128)
    assert es.metric_lines(chief, "train")[-1]["step"] == rows // batch
    # the 4 tasks evaluate the replicated eval (256 rows) together, each row once
    assert "evaluated 256 rows on 4 worker(s)" in chief


@pytest.mark.slow
def test_a_worker_seeing_two_gpus_is_refused(tmp_path):
    """The old layout (one worker task per host) on a 2-GPU host: the strategy would make 2 replicas."""
    bases, envs = two_host_cluster(tmp_path, 1024, num_gpus=0)
    codes, chief, _, procs = run(
        tmp_path, bases, envs, HP, chief_boot=es.FAKE_PS_WORKER_GPUS.format(count=2), wait_all=False
    )
    assert codes == [1]
    assert "ParameterServerStrategy sees 2 GPUs on each worker task" in chief
    assert "one worker task per GPU" in chief and "[dfm] train " not in chief
    assert group_gone(procs[-1])  # the chief's own worker task went with it


@pytest.mark.slow
def test_ps_group_layout_runs_one_worker_task_per_gpu_on_every_worker_host(tmp_path):
    """The heterogeneous layout (resourceconfig.json), worker hosts with 2 GPUs: 4 worker tasks, task k of
    a host at 2223 + 100k, each with its own GPU and shard; every process exits."""
    from test_entry_ps_hetero import HOSTS, HeteroJob

    job = HeteroJob(tmp_path, dict(HP, log_steps=16, ps_group="ps"))
    job.addresses.update({f"{h}:{hc.WORKER_PORT + hc.PORT_STRIDE}": f"127.0.0.1:{es.free_port()}" for h in HOSTS[:2]})
    for host, env in job.envs.items():
        env[hc.ADDRESSES_ENV] = json.dumps(job.addresses)
        env["SM_NUM_GPUS"] = "2" if host in HOSTS[:2] else "0"
    try:
        job.start()
        codes = {host: proc.wait(timeout=400) for host, proc in job.procs.items()}
    finally:
        job.stop()
    chief, worker = job.log("algo-1"), job.log("algo-2")
    assert codes == {"algo-1": 0, "algo-2": 0, "algo-3": 0}, (
        chief[-3000:] + worker[-2000:] + job.stderr("algo-1")[-2000:]
    )
    assert job.leftovers() == []
    assert "chief: 4 workers, 1 ps, replicas_in_sync=1 per worker task" in chief
    for host, text, first in (("algo-1", chief, 0), ("algo-2", worker, 2)):
        for rank in (0, 1):
            assert (
                f"worker {first + rank} on {host}: channels=['train'] mode=File shard={first + rank}/4 "
                f"task={rank}/2 CUDA_VISIBLE_DEVICES={rank}"
            ) in text
    assert "training data exhausted on every worker" in chief
    # both hosts hold the same two files (40 + 24 batches): the 4 tasks' shards cover them once
    assert es.metric_lines(chief, "train")[-1]["step"] == 40 + 24
