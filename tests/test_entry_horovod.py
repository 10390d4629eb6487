"""train_horovod.py for real: 2 ranks under mpirun and horovodrun --gloo in a fake container tree.

Ranks read different shards, so they end with identical weights only if gradients are really averaged
and rank 0's start broadcast; uneven shards must end on one step count instead of deadlocking."""

import functools
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

import entry_support as es
import selection_support as ss
import deepfm_container as container
import deepfm_tuning
import deepfm_worker_input as worker_input

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too

MPIRUN = shutil.which("mpirun")
_OWN_HOROVODRUN = Path(es.PYTHON).with_name("horovodrun")  # this runtime's, not another on PATH
HOROVODRUN = str(_OWN_HOROVODRUN) if _OWN_HOROVODRUN.exists() else shutil.which("horovodrun")
HPS = {
    "field_size": 10,
    "feature_size": 1000,
    "deep_layers": [32, 32],
    "batch_size": 128,
    "log_steps": 4,
    "epochs": 2,
    "shuffle_buffer": 100,
    "learning_rate": 0.05,
    "checkpoint_steps": 8,
    "optimizer": "adagrad",
}  # the old default these settings were tuned with (and sparse_allreduce dense takes)
TIMEOUT = 150


def horovod_run(test):
    """Starts Horovod processes: slow, horovod, and skipped where the runtime has no Horovod (failed
    where DFM_EXPECT says it has)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        es.require("horovod")
        return test(*args, **kwargs)

    return pytest.mark.slow(pytest.mark.horovod(run))


def _lines(text, marker):
    """Lines carrying `marker`, whatever prefix the launcher adds ([1,0]<stdout>: or [0]<stdout>:)."""
    return [line for line in text.splitlines() if marker in line]


def _container(tmp_path, train_parts, channels=("train", "eval"), input_mode="File", eval_rows=512):
    """train_parts: {channel: [rows per file]}; one synthetic draw shared by every file."""
    total = sum(sum(rows) for rows in train_parts.values())
    train, held_out = es.synth_split(
        total, eval_rows, seed=3, feature_size=HPS["feature_size"], field_size=HPS["field_size"]
    )
    env = es.make_container(tmp_path / "base", list(channels), input_mode=input_mode)
    data = tmp_path / "base" / "input" / "data" if input_mode != "Pipe" else tmp_path / "staged"
    start = 0
    for channel, sizes in train_parts.items():
        for i, rows in enumerate(sizes):
            es.write_tfrecords(data / channel, train.take(start, start + rows), 1)
            (data / channel / "part-00000.tfrecord").rename(data / channel / f"file-{i:02d}.tfrecord")
            start += rows
    if "eval" in channels:
        es.write_tfrecords(data / "eval", held_out, 2)
    env["DFM_DUMP_WEIGHTS"] = str(tmp_path / "dump")
    return env


def _launch(tmp_path, env, hps, launcher="mpirun", ranks=2, log_name="run.log"):
    script = [es.PYTHON, "train_horovod.py", *es.argv_for(hps)]
    if launcher == "mpirun":
        exported = [
            arg for name in env if name.startswith(("SM_", "SAGEMAKER_", "DFM_", "TF_CPP")) for arg in ("-x", name)
        ]
        cmd = [
            MPIRUN,
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            str(ranks),
            "-bind-to",
            "none",
            "--tag-output",
            *exported,
            *script,
        ]
    else:
        cmd = [HOROVODRUN, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", *script]
    log_path = tmp_path / log_name
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=Path(env["SAGEMAKER_BASE_DIR"]) / "code",
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"{launcher} run did not finish in {TIMEOUT}s (deadlock?):\n{log_path.read_text()[-3000:]}")
    text = log_path.read_text()
    assert proc.returncode == 0, text[-4000:]
    return text


def _dumps(tmp_path, ranks=2):
    loaded = [np.load(tmp_path / "dump" / f"rank-{r}.npz") for r in range(ranks)]
    return [{k: d[k] for k in d.files} for d in loaded]


def _assert_identical(dumps):
    first = dumps[0]
    for other in dumps[1:]:
        assert first.keys() == other.keys()
        for key in first:
            np.testing.assert_array_equal(first[key], other[key], err_msg=key)


@horovod_run
def test_two_ranks_identical_weights_rank0_alone_checkpoints_and_exports_then_resumes(tmp_path):
    env = _container(tmp_path, {"train": [1024] * 4})
    # Run 1 stops at step 12 (a "spot interruption"); run 2 resumes there and finishes 2 epochs.
    # Run 1 all-gathers the embedding gradients, run 2 all-reduces them densely: both keep ranks equal.
    first = _launch(tmp_path, env, dict(HPS, max_steps=12, sparse_allreduce="gather"), log_name="first.log")
    assert "shard=0/2" in first and "shard=1/2" in first  # the ranks read different data
    assert "sparse_allreduce=gather" in first
    _assert_identical(_dumps(tmp_path))
    text = _launch(tmp_path, env, dict(HPS, sparse_allreduce="dense"), log_name="second.log")
    assert "sparse_allreduce=dense" in text
    assert "restored" in text and "continuing at step 12" in text
    dumps = _dumps(tmp_path)
    _assert_identical(dumps)
    # 4096 rows over 2 ranks = 16 whole batches each per epoch, 2 epochs: both ranks end at step 32.
    assert [int(d["step"]) for d in dumps] == [32, 32]
    # mpirun --tag-output prefixes each line with [1,<rank>]: metric lines and the export come from rank 0 only.
    tagged = _lines(text, "[dfm] train ") + _lines(text, "[dfm] eval ") + _lines(text, "[dfm] exported ")
    assert tagged and all(line.startswith("[1,0]") for line in tagged)
    # an evaluation after each epoch (the first resumed at step 12)
    assert [int(line.split("step=")[1].split()[0]) for line in _lines(text, "[dfm] eval ")][:2] == [16, 32]
    assert [int(line.split("step=")[1].split()[0]) for line in _lines(text, "[dfm] train ")] == [16, 20, 24, 28, 32]
    exports = sorted((tmp_path / "base" / "model").iterdir())
    assert len(exports) == 2 and all((p / "saved_model.pb").exists() for p in exports)
    assert (tmp_path / "base" / "checkpoints" / "ckpt-32.index").exists()


@horovod_run
def test_pipe_mode_own_channel_per_local_rank_and_uneven_shards_end_together(tmp_path):
    """Under horovodrun --gloo: local rank 0 streams `train` (1024 rows, 8 batches), local rank 1
    `train-1` (512 rows, 4 batches); both stop after 4 steps instead of deadlocking."""
    es.require("pipe")
    env = _container(
        tmp_path, {"train": [512, 512], "train-1": [512]}, channels=("train", "train-1"), input_mode="Pipe"
    )
    staged, data = tmp_path / "staged", tmp_path / "base" / "input" / "data"
    data.mkdir(parents=True, exist_ok=True)
    for channel in ("train", "train-1"):
        payload = b"".join(p.read_bytes() for p in sorted((staged / channel).iterdir()))
        es.feed_fifo(str(data / f"{channel}_0"), payload)
    text = _launch(tmp_path, env, dict(HPS, epochs=1, log_steps=1), launcher="gloo")  # horovodrun ships with Horovod
    assert "local_rank=0/2 channels=train mode=Pipe" in text
    assert "local_rank=1/2 channels=train-1 mode=Pipe" in text
    dumps = _dumps(tmp_path)
    _assert_identical(dumps)
    assert [int(d["step"]) for d in dumps] == [4, 4]
    assert "trained steps 0..4 on 2 workers" in text and len(_lines(text, "[dfm] train ")) == 4


def test_placement_fills_hosts_in_rank_order():
    places = [worker_input.Placement(rank, 6, 2) for rank in range(6)]
    assert [(p.host_index, p.local_rank, p.workers_per_host) for p in places] == [
        (0, 0, 3),
        (0, 1, 3),
        (0, 2, 3),
        (1, 0, 3),
        (1, 1, 3),
        (1, 2, 3),
    ]
    with pytest.raises(ValueError, match="do not divide"):
        worker_input.Placement(0, 5, 2)


def test_thread_pools_split_between_the_processes_of_a_host():
    import deepfm_hparams

    hp = deepfm_hparams.parse_hyperparameters(["--inter_op_threads", "3"])
    split = deepfm_tuning.per_process_threads(hp, cpus=8, processes=4)
    assert (split.intra_op_threads, split.inter_op_threads, split.omp_num_threads) == (2, 3, 2)
    assert deepfm_tuning.per_process_threads(hp, cpus=2, processes=4).intra_op_threads == 1


def test_pipe_mode_with_one_channel_for_several_local_ranks_is_refused(tmp_path):
    import deepfm_hparams

    es.make_container(tmp_path, ["train"], input_mode="Pipe")
    env = container.load_env({"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_CHANNELS": '["train"]'})
    hp = deepfm_hparams.parse_hyperparameters([])
    with pytest.raises(ValueError, match="one training channel per worker"):
        worker_input.train_dataset(hp, env, worker_input.Placement(1, 2, 1))


_SPARSE_CHECK = """
import tensorflow as tf
import horovod.tensorflow as hvd
from deepfm_collectives import HorovodCollectives

hvd.init()
collectives = HorovodCollectives(hvd)

@tf.function
def average():
    table_grad = tf.IndexedSlices(tf.ones([3, 4]) * 2.0, tf.constant([5, 1, 5]), tf.constant([100, 4]))
    return collectives.average_gradients([table_grad, tf.ones([2]), None])

sparse, dense, missing = average()
assert isinstance(sparse, tf.IndexedSlices), type(sparse)
assert sparse.indices.numpy().tolist() == [5, 1, 5] and missing is None
print("sparse ok", type(dense).__name__)
"""


@horovod_run
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


@horovod_run
def test_rank0_stops_every_rank_early_and_exports_the_best_evaluation(tmp_path):
    train, evaluation = ss.planted_overfit()
    env = es.make_container(tmp_path / "base", ["train", "eval"])
    es.write_tfrecords(tmp_path / "base" / "input" / "data" / "train", train, 2)
    es.write_tfrecords(tmp_path / "base" / "input" / "data" / "eval", evaluation, 2)
    env["DFM_DUMP_WEIGHTS"] = str(tmp_path / "dump")
    hps = ss.every(5)  # mid-epoch evaluations: every rank evaluates at the same step
    text = _launch(tmp_path, env, hps)  # fails on a hang: a rank left waiting in a collective
    dumps = _dumps(tmp_path)
    _assert_identical(dumps)  # both ranks stopped at the same step
    assert len(_lines(text, "early stopping at step")) == 1 and _lines(text, "early stopping")[0].startswith("[1,0]")
    untagged = re.sub(r"^\[1,\d+\]<stdout>:", "", text, flags=re.M)
    ss.assert_best_kept_and_stopped_early(untagged, tmp_path / "base" / "model", evaluation, hps)
