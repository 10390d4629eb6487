"""train_mirrored.py for real: two hosts' workers on loopback under MultiWorkerMirroredStrategy."""

import json
import os
import signal
import subprocess

import numpy as np
import pytest

import entry_support as es
import train_mirrored

HPS = {"field_size": 10, "feature_size": 1000, "deep_layers": [32, 32], "batch_size": 128, "log_steps": 4,
       "epochs": 1, "shuffle_buffer": 100, "learning_rate": 0.05}
HOSTS = ["algo-1", "algo-2"]


def test_tf_config_matches_the_container_toolkit_layout():
    assert train_mirrored.tf_config_from_hosts(HOSTS, "algo-2") == {
        "cluster": {"worker": ["algo-1:8890", "algo-2:8890"]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}


@pytest.mark.slow
def test_two_workers_end_identical_and_only_the_first_exports(tmp_path):
    # Uneven on purpose: host 1 reads 1024 rows (8 batches), host 2 only 512 (4 batches).
    train, held_out = es.synth_split(1536, 512, seed=5, feature_size=HPS["feature_size"], field_size=HPS["field_size"])
    ports = [es.free_port(), es.free_port()]
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    procs, logs = [], []
    for index, host in enumerate(HOSTS):
        base = tmp_path / host
        env = es.make_container(base, ["train", "eval"], hosts=HOSTS, current_host=host,
                                s3_sharded=("train", "eval"), num_cpus=1)
        # ShardedByS3Key: each host holds only its own objects.
        part = train.take(0, 1024) if index == 0 else train.take(1024, 1536)
        es.write_tfrecords(base / "input" / "data" / "train", part, 2)
        es.write_tfrecords(base / "input" / "data" / "eval", held_out.take(index * 256, index * 256 + 256), 1)
        extra = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index},
                                          "environment": "cloud"}),
                 "DFM_DUMP_WEIGHTS": str(tmp_path / "dump")}
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


_SPARSE_CHECK = """
import tensorflow as tf
from train_mirrored import MirroredCollectives
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


@pytest.mark.slow
def test_embedding_gradients_stay_sparse_through_the_average():
    done = subprocess.run([es.PYTHON, "-c", _SPARSE_CHECK], cwd=es.ENTRYPOINTS, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0 and "sparse ok" in done.stdout, done.stderr[-2000:]
