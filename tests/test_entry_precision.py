"""A bfloat16 job on every distribution of the bundled scripts (one host, parameter servers, Horovod,
MultiWorkerMirrored), and float16 under parameter servers: each trains, exports float32 serving, and every
process logs the dtype it computes in. mixed_precision is explicit here, so the same jobs run on CPUs with and
without bfloat16 instructions (without, TensorFlow emulates it: slower, the same results' kind)."""

import numpy as np
import pytest

import entry_support as es
import test_entry_horovod as hvd
import test_entry_mirrored as mirrored
import test_entry_ps as ps

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too

LOGGED = "the MLP computes in {dtype} (mixed_precision={dtype})"


def exported_probabilities(text):
    (path,) = [line.split()[-1] for line in text.splitlines() if "[dfm] exported " in line]
    probs = ps.predict_saved_model(path, field_size=39)
    assert probs.dtype == np.float32 and np.all((probs > 0) & (probs < 1))


@pytest.mark.slow
def test_one_host_trains_in_bfloat16(tmp_path):
    env = es.make_container(tmp_path, ["train", "eval"])
    train, evaluation = es.synth_split(8000, 2000, seed=5, feature_size=20000)
    es.write_tfrecords(tmp_path / "input/data/train", train, 2)
    es.write_tfrecords(tmp_path / "input/data/eval", evaluation, 1)
    proc = es.start_script(
        tmp_path, "train_ps.py", dict(ps.HP, epochs=2, mixed_precision="bfloat16"), env, tmp_path / "run.log"
    )
    assert proc.wait(timeout=300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    text = (tmp_path / "run.log").read_text()
    assert LOGGED.format(dtype="bfloat16") in text
    assert es.metric_lines(text, "eval")[-1]["auc"] > 0.55
    exported_probabilities(text)


@pytest.mark.slow
@pytest.mark.parametrize("word, dtype", [("bfloat16", "bfloat16"), ("true", "float16")])
def test_parameter_server_cluster_trains_in_the_asked_precision(tmp_path, word, dtype):
    """The chief traces the steps the workers run: they compute in the asked dtype (float16 with loss
    scaling), where they used to fall back to float32 in silence."""
    bases, envs, parts, evaluation = ps.two_hosts_s3_sharded(tmp_path, 12000, 3000)
    for base, part in zip(bases, parts):
        es.write_tfrecords(base / "input/data/train", part, 2)
        es.write_tfrecords(base / "input/data/eval", evaluation, 1)
    codes, chief, worker, procs = ps.run_cluster(
        tmp_path, bases, envs, dict(ps.HP, epochs=2, max_steps=60, mixed_precision=word)
    )
    assert codes == [0, 0, 0, 0], chief[-3000:] + worker[-2000:]
    logged = f"the MLP computes in {dtype} (mixed_precision={dtype})"
    assert logged in chief and logged in worker
    (evaluated,) = es.metric_lines(chief, "eval")
    assert evaluated["step"] == 60 and evaluated["auc"] > 0.55
    exported_probabilities(chief)
    assert all(ps.group_gone(proc) for proc in procs)


@hvd.horovod_run
def test_horovod_ranks_train_in_bfloat16_and_end_identical(tmp_path):
    env = hvd._container(tmp_path, {"train": [1024] * 2})
    text = hvd._launch(tmp_path, env, dict(hvd.HPS, epochs=1, mixed_precision="bfloat16"))
    assert len(hvd._lines(text, LOGGED.format(dtype="bfloat16"))) == 2  # both ranks
    dumps = hvd._dumps(tmp_path)
    hvd._assert_identical(dumps)
    assert [int(d["step"]) for d in dumps] == [8, 8]


@pytest.mark.slow
def test_multi_worker_mirrored_workers_train_in_bfloat16_and_end_identical(tmp_path):
    train, held_out = es.synth_split(
        1024, 256, seed=9, feature_size=mirrored.HPS["feature_size"], field_size=mirrored.HPS["field_size"]
    )
    texts, dumps = mirrored._run_workers(
        tmp_path, dict(mirrored.HPS, mixed_precision="bfloat16"), [train.take(0, 512), train.take(512, 1024)], held_out
    )
    assert all(LOGGED.format(dtype="bfloat16") in text for text in texts)
    for key in dumps[0]:
        np.testing.assert_array_equal(dumps[0][key], dumps[1][key], err_msg=key)
    assert not np.allclose(dumps[0]["v01"], 0)
