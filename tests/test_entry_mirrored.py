"""train_mirrored.py for real: hosts' workers on loopback under MultiWorkerMirroredStrategy, with one
replica per worker and with several local replicas (logical CPUs standing in for a host's GPUs)."""

import json
import os
import signal
import subprocess

import numpy as np
import pytest

import entry_support as es
import selection_support as ss
import train_mirrored

HPS = {
    "field_size": 10,
    "feature_size": 1000,
    "deep_layers": [32, 32],
    "batch_size": 128,
    "log_steps": 4,
    "epochs": 1,
    "shuffle_buffer": 100,
    "learning_rate": 0.05,
    "dropout": 0.0,  # no random masks: runs compare exactly
    "optimizer": "adagrad",
}  # the old default these settings were tuned with (auto then exchanges dense)
HOSTS = ["algo-1", "algo-2"]


def test_tf_config_matches_the_container_toolkit_layout():
    assert train_mirrored.tf_config_from_hosts(HOSTS, "algo-2") == {
        "cluster": {"worker": ["algo-1:8890", "algo-2:8890"]},
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }


@pytest.mark.runtimes
@pytest.mark.slow
def test_two_workers_end_identical_and_only_the_first_exports(tmp_path):
    # Uneven on purpose: host 1 reads 1024 rows (8 batches), host 2 only 512 (4 batches).
    train, held_out = es.synth_split(1536, 512, seed=5, feature_size=HPS["feature_size"], field_size=HPS["field_size"])
    ports = [es.free_port(), es.free_port()]
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    procs, logs = [], []
    for index, host in enumerate(HOSTS):
        base = tmp_path / host
        env = es.make_container(
            base, ["train", "eval"], hosts=HOSTS, current_host=host, s3_sharded=("train", "eval"), num_cpus=1
        )
        # ShardedByS3Key: each host holds only its own objects.
        part = train.take(0, 1024) if index == 0 else train.take(1024, 1536)
        es.write_tfrecords(base / "input" / "data" / "train", part, 2)
        es.write_tfrecords(base / "input" / "data" / "eval", held_out.take(index * 256, index * 256 + 256), 1)
        extra = {
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}, "environment": "cloud"}
            ),
            "DFM_DUMP_WEIGHTS": str(tmp_path / "dump"),
        }
        logs.append(tmp_path / f"{host}.log")
        procs.append(es.start_script(base, "train_mirrored.py", HPS, env, logs[-1], extra))
    try:
        codes = [proc.wait(150) for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("workers did not finish: " + logs[0].read_text()[-2000:] + logs[1].read_text()[-2000:])
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    dumps = [np.load(tmp_path / "dump" / f"rank-{r}.npz") for r in range(2)]
    for key in dumps[0].files:
        np.testing.assert_array_equal(dumps[0][key], dumps[1][key], err_msg=key)
    assert int(dumps[0]["step"]) == 4  # the smaller shard decides
    assert "workers=2" in texts[0]
    assert len(es.metric_lines(texts[0], "eval")) == 1 and not es.metric_lines(texts[1], "eval")
    assert [int(r["step"]) for r in es.metric_lines(texts[0], "train")] == [4]
    assert len(list((tmp_path / HOSTS[0] / "model").iterdir())) == 1
    assert not list((tmp_path / HOSTS[1] / "model").iterdir())
    assert not list((tmp_path / HOSTS[1] / "checkpoints").iterdir())


def _run_workers(tmp_path, hps, parts, held_out, local_cpu_replicas=None, tag="run", input_mode="File"):
    """One worker per host on loopback, host i reading parts[i]; -> (exit codes, logs, dumps)."""
    hosts = [f"algo-{i + 1}" for i in range(len(parts))]
    ports = [es.free_port() for _ in hosts]
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    procs, logs = [], []
    for index, (host, part) in enumerate(zip(hosts, parts)):
        base = tmp_path / tag / host
        env = es.make_container(
            base,
            ["train", "eval"],
            hosts=hosts,
            current_host=host,
            s3_sharded=("train", "eval"),
            num_cpus=1,
            input_mode=input_mode,
        )
        es.write_tfrecords(base / "input" / "data" / "train", part, 2)
        es.write_tfrecords(base / "input" / "data" / "eval", held_out, 1)
        extra = {"DFM_DUMP_WEIGHTS": str(tmp_path / tag / "dump")}
        if len(hosts) > 1:
            extra["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}, "environment": "cloud"}
            )
        logs.append(tmp_path / tag / f"{host}.log")
        procs.append(
            es.start_script(base, "train_mirrored.py", hps, env, logs[-1], extra, local_cpu_replicas=local_cpu_replicas)
        )
    try:
        codes = [proc.wait(200) for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("workers did not finish: " + "".join(log.read_text()[-2000:] for log in logs))
    texts = [log.read_text() for log in logs]
    assert codes == [0] * len(hosts), "".join(text[-3000:] for text in texts)
    dumps = [dict(np.load(tmp_path / tag / "dump" / f"rank-{r}.npz")) for r in range(len(hosts))]
    return texts, dumps


def _variables(dump):
    return [key for key in dump if "_c" not in key]


def _copies(dump, key):
    """Every local copy of variable `key` a worker dumped (the first, then `_c1`, `_c2`, ...)."""
    return [dump[key]] + [dump[k] for k in sorted(dump) if k.startswith(key + "_c")]


@pytest.mark.slow
def test_local_replicas_split_the_batch_and_match_one_device_on_the_same_global_batch(tmp_path):
    """2 local replicas x batch 64 vs 1 device x batch 128, same data in the same order, no LR scaling:
    equal weights only if each replica computed the gradient of its own half and they were averaged.
    The replicas' run stops at step 3 and resumes from its checkpoint: it must skip 3 steps x 2 replicas'
    batches to go on with the rows the one device trains on next."""
    # float32: a bfloat16 GEMM over half the batch rounds differently from one over the whole
    hps = dict(
        HPS, batch_size=64, shuffle_buffer=0, scale_lr=False, optimizer="adam", log_steps=4, mixed_precision="false"
    )
    train, held_out = es.synth_split(1024, 256, seed=9, feature_size=HPS["feature_size"], field_size=HPS["field_size"])
    _run_workers(tmp_path, dict(hps, max_steps=3), [train], held_out, local_cpu_replicas=2, tag="two")
    (two_log,), (two,) = _run_workers(tmp_path, hps, [train], held_out, local_cpu_replicas=2, tag="two")
    (one_log,), (one,) = _run_workers(tmp_path, dict(hps, batch_size=128), [train], held_out, tag="one")
    assert "continuing at step 3" in two_log
    assert "local_replicas=2 replicas=2 per_replica_batch=64 global_batch=128" in two_log
    assert "device:CPU:0,/job:localhost/replica:0/task:0/device:CPU:1" in two_log
    assert int(two["step"]) == int(one["step"]) == 8
    for key in one:
        copies = _copies(two, key)
        assert len(copies) == (1 if key == "step" else 2)
        for copy in copies[1:]:
            np.testing.assert_array_equal(copies[0], copy, err_msg=f"{key}: local copies differ")
        np.testing.assert_allclose(two[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert not np.allclose(one["v01"], 0)  # the embeddings did train
    # the resumed run's lines: step 4 (step 4 alone) and 8 (steps 5-8, as the one device's)
    losses = [[(row["step"], row["loss"]) for row in es.metric_lines(log, "train")] for log in (two_log, one_log)]
    assert [step for step, _ in losses[0]] == [step for step, _ in losses[1]] == [4, 8]
    np.testing.assert_allclose(losses[0][-1][1], losses[1][-1][1], rtol=1e-4)


@pytest.mark.slow
def test_two_hosts_with_two_local_replicas_each_end_identical(tmp_path):
    """4 replicas: every copy on every host ends equal; host 2's shard (576 rows = 9 batches of 64:
    4 steps of 2 x 64, then a batch for its first replica alone) decides the step count: no step runs
    with a replica short of a batch; the learning rate scales by replicas. FastFile channels (files
    streamed from S3 on first read) look like File to the script."""
    hps = dict(HPS, batch_size=64, log_steps=2)
    train, held_out = es.synth_split(1600, 256, seed=5, feature_size=HPS["feature_size"], field_size=HPS["field_size"])
    texts, dumps = _run_workers(
        tmp_path,
        hps,
        [train.take(0, 1024), train.take(1024, 1600)],
        held_out,
        local_cpu_replicas=2,
        input_mode="FastFile",
    )
    assert "mode=FastFile" in texts[0] and "mode=FastFile" in texts[1]
    assert "workers=2 local_replicas=2 replicas=4 per_replica_batch=64 global_batch=256" in texts[0]
    # no GPU: ring all-reduce; a 1000-row table all-reduces in fewer bytes than 4 replicas' gathered rows
    assert "communication=RING sparse_allreduce=dense" in texts[0]
    assert f"learning_rate={HPS['learning_rate'] * 4:g} (scale_lr=True)" in texts[0]
    assert [int(d["step"]) for d in dumps] == [4, 4]
    for key in _variables(dumps[0]):
        copies = _copies(dumps[0], key) + _copies(dumps[1], key)
        assert len(copies) == (2 if key == "step" else 4)
        for copy in copies[1:]:
            np.testing.assert_array_equal(copies[0], copy, err_msg=key)
        assert np.isfinite(copies[0]).all(), key
    assert [int(r["step"]) for r in es.metric_lines(texts[0], "train")] == [2, 4]
    assert not es.metric_lines(texts[1], "train") and len(es.metric_lines(texts[0], "eval")) == 1


_SPARSE_CHECK = """
import tensorflow as tf
from deepfm_collectives import MirroredCollectives
strategy = tf.distribute.MultiWorkerMirroredStrategy()
collectives = MirroredCollectives(strategy, 0)

def average():
    table_grad = tf.IndexedSlices(tf.ones([3, 4]), tf.constant([5, 1, 5]), tf.constant([100, 4]))
    return collectives.average_gradients([table_grad, None, tf.ones([2])])

sparse, missing, dense = tf.function(lambda: strategy.run(average))()
assert isinstance(sparse, tf.IndexedSlices), type(sparse)
assert sparse.indices.numpy().tolist() == [5, 1, 5] and missing is None
print("sparse ok")
"""


@pytest.mark.runtimes
@pytest.mark.slow
def test_embedding_gradients_stay_sparse_through_the_average():
    done = subprocess.run(
        [es.PYTHON, "-c", _SPARSE_CHECK],
        cwd=es.ENTRYPOINTS,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert done.returncode == 0 and "sparse ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_rank0_stops_both_workers_early_and_exports_the_best_evaluation(tmp_path):
    train, evaluation = ss.planted_overfit()
    hps = ss.every(5)  # mid-epoch evaluations: both workers evaluate at the same step
    texts, dumps = _run_workers(tmp_path, hps, [train.take(0, 1000), train.take(1000, 2000)], evaluation)
    for key in dumps[0]:  # both workers stopped at the same step with the same weights
        np.testing.assert_array_equal(dumps[0][key], dumps[1][key], err_msg=key)
    assert "early stopping" not in texts[1] and not es.metric_lines(texts[1], "eval")
    ss.assert_best_kept_and_stopped_early(texts[0], tmp_path / "run" / "algo-1" / "model", evaluation, hps)


_COMMUNICATION_CHECK = """
import tensorflow as tf
from deepfm_collectives import MirroredCollectives, communication_options, sparse_as_dense

implementations = tf.distribute.experimental.CommunicationImplementation
NCCL, RING = implementations.NCCL, implementations.RING
assert communication_options(tf, 4).implementation == NCCL and communication_options(tf, 0).implementation == RING
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options(tf, 2))
assert strategy.extended._communication_options.implementation == NCCL  # what the strategy will use
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options(tf, 0))
collectives = MirroredCollectives(strategy, 0)

def average():
    table_grad = tf.IndexedSlices(tf.ones([3, 4]), tf.constant([5, 1, 5]), tf.constant([100, 4]))
    return collectives.average_gradients(sparse_as_dense([table_grad, None]))

dense, missing = tf.function(lambda: strategy.run(average))()
assert isinstance(dense, tf.Tensor) and missing is None, type(dense)
expected = tf.math.unsorted_segment_sum(tf.ones([3, 4]), [5, 1, 5], 100)
assert (dense.numpy() == expected.numpy()).all()
print("communication ok")
"""


@pytest.mark.slow
def test_nccl_on_gpus_ring_on_cpus_and_the_dense_exchange():
    done = subprocess.run(
        [es.PYTHON, "-c", _COMMUNICATION_CHECK],
        cwd=es.ENTRYPOINTS,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert done.returncode == 0 and "communication ok" in done.stdout, done.stderr[-2000:]


def test_broadcast_groups_pack_small_variables_by_dtype_and_send_large_ones_alone():
    from types import SimpleNamespace

    from deepfm_collectives import broadcast_groups

    def var(name, elements, dtype="float32"):
        return SimpleNamespace(name=name, dtype=dtype, shape=SimpleNamespace(num_elements=lambda: elements))

    variables = [var("table", 500), var("w1", 40), var("step", 1, "int64"), var("w2", 50), var("w3", 30)]
    groups = [[v.name for v in group] for group in broadcast_groups(variables, 100)]
    assert groups == [["table"], ["w1", "w2"], ["w3"], ["step"]]


# Two workers whose variables differ (rank-dependent values, a large table sent alone, small ones packed,
# an int64 step above float32's exact range): after the broadcast both hold rank 0's values exactly.
_BROADCAST_CHECK = """
import json, os, sys
import numpy as np
import tensorflow as tf
import deepfm_collectives
from deepfm_collectives import MirroredCollectives

rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
collectives = MirroredCollectives(strategy, rank)
deepfm_collectives.PACK_ELEMENTS = 64
with strategy.scope():
    table = tf.Variable(tf.random.stateless_normal([300, 9], seed=[rank, 1]))
    small = [tf.Variable(tf.fill([4, 4], float(rank) + 0.1)), tf.Variable(tf.fill([3], float(rank) + 0.2))]
    step = tf.Variable(tf.constant(2**40 + 3 + rank, tf.int64))
collectives.broadcast([table, *small, step])
expected = tf.random.stateless_normal([300, 9], seed=[0, 1]).numpy()
assert np.array_equal(table.numpy(), expected)
assert np.all(small[0].numpy() == np.float32(0.1)) and np.all(small[1].numpy() == np.float32(0.2))
assert int(step.numpy()) == 2**40 + 3, int(step.numpy())
print("broadcast ok", rank)
"""


@pytest.mark.runtimes
@pytest.mark.slow
def test_broadcast_gives_every_worker_rank_0s_values_exactly(tmp_path):
    cluster = {"worker": [f"localhost:{es.free_port()}" for _ in range(2)]}
    procs = [
        subprocess.Popen(
            [es.PYTHON, "-c", _BROADCAST_CHECK],
            cwd=es.ENTRYPOINTS,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(
                os.environ,
                TF_CPP_MIN_LOG_LEVEL="2",
                CUDA_VISIBLE_DEVICES="",
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
            ),
        )
        for i in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0 and f"broadcast ok {rank}" in output, output[-2000:]


# Under the logical-CPU hook (2 local replicas): each step of the distributed input hands each replica its
# own batch of 4 rows, the replicas taking consecutive batches in turn; a worker whose last batch is for
# one replica alone has no whole step left, and the input goes on (never ending) with no whole step; a
# step's bad-row count sums its replicas' batches'. (Which device holds each batch is for a GPU to show: the
# logical CPUs share one memory and report their tensors on CPU:0.)
_PER_REPLICA_CHECK = """
import tensorflow as tf
from deepfm_sync_steps import bad_rows_in, take
from train_mirrored import per_replica

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rows = tf.data.Dataset.range(20).map(lambda i: ({"ids": tf.fill([3], i)}, tf.cast(i, tf.float32)))
# each batch counts bad rows of its own (raw input's per-batch scalar): here the sum of its labels
batches = rows.batch(4, drop_remainder=True).map(
    lambda f, l: (dict(f, _bad_rows=tf.cast(tf.reduce_sum(l), tf.int64)), l))
iterator = iter(per_replica(strategy, lambda: batches, 4))  # 5 batches: 2 steps + 1
seen, whole, bad = [], [], []
for _ in range(4):
    batch, have = take(iterator)
    whole.append(bool(have))
    labels = strategy.experimental_local_results(batch[1])
    if whole[-1]:
        seen.append([t.numpy().tolist() for t in labels])
        bad.append(int(bad_rows_in(batch)))
assert whole == [True, True, False, False], whole  # and it never ends
assert seen == [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10, 11], [12, 13, 14, 15]]], seen
assert bad == [0 + 1 + 2 + 3 + 4 + 5 + 6 + 7, 8 + 9 + 10 + 11 + 12 + 13 + 14 + 15], bad  # both replicas' counts
print("per replica ok")
"""


@pytest.mark.runtimes
@pytest.mark.slow
def test_each_local_replica_receives_its_own_batch_and_a_short_last_step_is_not_whole(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(_PER_REPLICA_CHECK)
    done = subprocess.run(
        [es.PYTHON, "-c", es._LOCAL_CPU_REPLICAS, "2", str(script)],
        cwd=es.ENTRYPOINTS,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(es.ENTRYPOINTS)),
    )
    assert done.returncode == 0 and "per replica ok" in done.stdout, done.stderr[-2000:]
