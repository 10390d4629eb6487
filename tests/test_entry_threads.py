"""Thread budgets: each host's vCPUs split over the processes it runs (ps server, chief, worker tasks, per-GPU
worker tasks, Horovod ranks) for TensorFlow's intra-op and inter-op pools, OpenMP and tf.data; explicit
hyperparameters win. A faked 8-vCPU, 4-GPU host: SM_NUM_CPUS / SM_NUM_GPUS as the container sets them."""

import json

import pytest

import entry_support as es
import deepfm_container
import deepfm_hparams
import deepfm_tuning
import train_ps
from deepfm_tuning import HOST_ROLES_ENV

KNOBS = ("intra_op_threads", "inter_op_threads", "omp_num_threads", "data_threads")


def host(tmp_path, monkeypatch, cpus=8, gpus=4, hosts=("algo-1", "algo-2"), current="algo-1"):
    env = es.make_container(tmp_path, ["train"], hosts=hosts, current_host=current, num_cpus=cpus)
    env["SM_NUM_GPUS"] = str(gpus)
    for key in ("OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_SETTINGS", HOST_ROLES_ENV, train_ps.CHIEF_WORKER_ENV):
        monkeypatch.setenv(key, "")  # recorded, so what the budget sets is undone after the test
        monkeypatch.delenv(key)
    return deepfm_container.load_env(env)


def budget(container, roles, *argv):
    return train_ps.thread_budget(deepfm_hparams.parse_hyperparameters(list(argv)), container, roles)


@pytest.mark.parametrize(
    "task_type, chief_worker, roles, share",
    [
        ("chief", "1", ["ps server", "chief"] + ["worker"] * 4, 1),  # 8 vCPUs over 6 processes: 1 each
        ("chief", "0", ["ps server", "chief"], 4),  # DFM_PS_CHIEF_WORKER=0: the master host trains nothing
        ("worker", "1", ["ps server"] + ["worker"] * 4, 1),  # 8 over 5
    ],
)
def test_a_four_gpu_host_splits_its_vcpus_over_its_processes(
    tmp_path, monkeypatch, task_type, chief_worker, roles, share
):
    container = host(tmp_path, monkeypatch)
    monkeypatch.setenv(train_ps.CHIEF_WORKER_ENV, chief_worker)
    per_host = train_ps.gpu_workers.workers_per_host(container.num_gpus)
    assert train_ps.host_roles(train_ps.toolkit_jobs(task_type, per_host)) == roles
    hp = budget(container, roles)
    assert [getattr(hp, knob) for knob in KNOBS] == [share] * 4
    assert train_ps.os.environ["OMP_NUM_THREADS"] == str(share)
    assert train_ps.os.environ[HOST_ROLES_ENV] == ",".join(roles)  # what the worker tasks it starts inherit
    assert deepfm_tuning.roles_from_environment() == roles


def test_a_cpu_host_and_explicit_values(tmp_path, monkeypatch):
    container = host(tmp_path, monkeypatch, gpus=0)
    hp = budget(container, train_ps.host_roles(train_ps.toolkit_jobs("chief", 1)))  # ps server, chief, its worker
    assert [getattr(hp, knob) for knob in KNOBS] == [2, 2, 2, 2]
    assert hp.thread_budget == "8 vCPUs / 3 processes on this host: ps server, chief, worker"
    hp = budget(container, train_ps.host_roles(train_ps.toolkit_jobs("worker", 1)))
    assert [getattr(hp, knob) for knob in KNOBS] == [4, 4, 4, 4]
    hp = budget(
        container, ["ps server", "worker"], "--intra_op_threads", "6", "--omp_num_threads", "3", "--data_threads", "5"
    )
    assert [getattr(hp, knob) for knob in KNOBS] == [6, 4, 3, 5]  # explicit values win
    assert train_ps.os.environ["OMP_NUM_THREADS"] == "3"
    hp = budget(host(tmp_path / "small", monkeypatch, cpus=2, gpus=4), ["ps server", "chief"] + ["worker"] * 4)
    assert [getattr(hp, knob) for knob in KNOBS] == [1, 1, 1, 1]  # never 0 (which would mean all vCPUs)


def hetero_roles(cluster):
    return train_ps.host_roles([task.job for task in cluster.local_tasks()])


def test_horovod_ranks_and_heterogeneous_hosts(tmp_path, monkeypatch):
    from test_entry_hetero import SIX_HOSTS, resource_config

    import hetero_cluster as hc

    container = host(tmp_path, monkeypatch)
    hp = deepfm_tuning.per_process_threads(deepfm_hparams.parse_hyperparameters([]), 8, 4, ["Horovod rank"] * 4)
    assert [getattr(hp, knob) for knob in KNOBS] == [2] * 4 and hp.thread_budget.endswith(": 4 Horovod ranks")
    # a ps-group job whose worker hosts have 4 GPUs: the first worker host runs the chief and 4 worker tasks
    cluster = hc.build_cluster(resource_config(SIX_HOSTS, "algo-1"), "ps", workers_per_host=4)
    roles = hetero_roles(cluster)
    assert roles == ["chief"] + ["worker"] * 4
    assert [getattr(budget(container, roles), knob) for knob in KNOBS] == [1] * 4
    ps_host = hc.build_cluster(resource_config(SIX_HOSTS, "algo-6"), "ps", ps_per_host=2)
    assert hetero_roles(ps_host) == ["ps server"]  # its 2 ps tasks are one process
    assert hetero_roles(hc.build_cluster(resource_config(SIX_HOSTS, "algo-3"), "ps")) == ["worker"]


def test_nothing_the_budgets_set_outlives_these_tests():
    # the pytest process starts the scripts of the other tests with its own environment
    assert HOST_ROLES_ENV not in train_ps.os.environ


@pytest.mark.runtimes
def test_tf_data_gets_the_process_share_as_its_private_pool(tmp_path):
    tf = pytest.importorskip("tensorflow")
    import deepfm_input

    hp = deepfm_tuning.per_process_threads(deepfm_hparams.parse_hyperparameters([]), 8, 4)
    es.write_tfrecords(tmp_path / "train", es.synth_split(64, 0, seed=1, feature_size=600)[0], 1)
    cfg = deepfm_input.config_from_hparams(hp, "File", str(tmp_path), str(tmp_path), str(tmp_path))
    dataset = deepfm_input.make_dataset(cfg, ["train"])
    assert dataset.options().threading.private_threadpool_size == 2
    assert sum(int(tf.shape(labels)[0]) for _, labels in dataset) == 64
    default = deepfm_input.make_dataset(
        deepfm_input.config_from_hparams(
            deepfm_hparams.parse_hyperparameters([]), "File", str(tmp_path), str(tmp_path), str(tmp_path)
        ),
        ["train"],
    )
    assert default.options().threading.private_threadpool_size is None  # not budgeted: TensorFlow's own pool
    assert json.loads(json.dumps(vars(hp)["thread_budget"])) == "8 vCPUs / 4 processes on this host"


@pytest.mark.parametrize(
    "environ, cpus, threads",
    [
        ({}, 1, 2),  # a server on one core: TensorFlow's default pool would have one thread
        ({}, 2, 0),
        ({}, 36, 0),  # else TensorFlow's default stands
        ({"TF_NUM_INTEROP_THREADS": "1"}, 8, 2),  # an explicit one-thread pool too
        ({"TF_NUM_INTEROP_THREADS": "4"}, 1, 0),
    ],
)
def test_a_servers_inter_op_pool_never_has_a_single_thread(environ, cpus, threads):
    assert deepfm_tuning.server_inter_op_threads(environ, cpus) == threads
