"""Warm start (deepfm_warm_start): a fresh run restores an earlier run's checkpoint (any shard count, into any) or
exported model, keeps a grown table's old rows and its new rows fresh, and stops on a shape that cannot map."""

import os
import shutil
import tarfile

import numpy as np
import pytest

import entry_support as es
import deepfm_hparams as H
from deepfm_container import ContainerEnv

pytestmark = pytest.mark.runtimes  # checkpoint keys and SavedModel layouts are TensorFlow's


def hparams(*argv, warm_start="all", steps="restart"):
    hp = H.parse_hyperparameters(
        ["--field_size", "3", "--feature_size", "100", "--embedding_size", "4", "--deep_layers", "8", *argv]
    )
    hp.warm_start, hp.warm_start_steps, hp.warm_start_source = warm_start, steps, "day-1"
    return hp


def batch(field_size=3, rows=32, seed=0, ids=100):
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    return (
        {
            "ids": tf.constant(rng.integers(0, ids, (rows, field_size)), tf.int64),
            "values": tf.constant(rng.random((rows, field_size)), tf.float32),
        },
        tf.constant(rng.integers(0, 2, rows), tf.float32),
    )


def partition(trainer_model, counts, tables=("first_order", "embeddings")):
    """The model's `tables` as ShardedVariables of `counts` rows each (as ParameterServerStrategy makes them)."""
    import tensorflow as tf
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    for name in tables:
        whole, first, shards = getattr(trainer_model, name).numpy(), 0, []
        for index, rows in enumerate(counts):
            shards.append(tf.Variable(whole[first : first + rows], name=f"{name}/part_{index}"))
            first += rows
        setattr(trainer_model, name, ShardedVariable(shards))


def trainer_for(hp, shards=None, tables=("first_order", "embeddings")):
    """A trainer as build_trainer makes it; `shards`: its `tables` partitioned into these row counts."""
    import deepfm_training as T
    from deepfm_metrics import StreamingMetrics
    from deepfm_model import build_model

    model = build_model(hp)
    if shards:
        partition(model, shards, tables)
    optimizer = T.SparseOptimizer(hp.optimizer, hp.learning_rate)
    return T.Trainer(model, optimizer, StreamingMetrics(name="train"), StreamingMetrics(name="eval"))


def trained_source(tmp_path, hp, shards=None, steps=3, tables=("first_order", "embeddings")):
    """A run of `steps` steps saved by the CheckpointKeeper into the warmstart channel. -> (trainer, env)."""
    from deepfm_checkpoint import CheckpointKeeper

    source = trainer_for(hp, shards, tables)
    for step in range(steps):
        source.train_step(batch(seed=step, field_size=hp.field_size, ids=hp.feature_size))
    folder = tmp_path / "input" / "data" / "warmstart"
    CheckpointKeeper(source, str(folder), 1).maybe_save(steps, force=True)
    return source, env_for(tmp_path, "warmstart")


def env_for(base, channel):
    return ContainerEnv(
        base_dir=str(base), hosts=["algo-1"], current_host="algo-1", channels=[channel], model_dir="", num_cpus=1
    )


def predictions(trainer, field_size=3):
    features, _ = batch(seed=99, rows=64, field_size=field_size)
    return trainer.model.predict(features["ids"], features["values"]).numpy()


def full(var):
    from deepfm_variables import full_value

    return full_value(var).numpy()


def slot_tables(trainer):
    """{slot name: the whole embeddings slot} (its shards concatenated)."""
    model, optimizer = trainer.model, trainer.optimizer
    from deepfm_variables import flat_variables

    shards = flat_variables([model.embeddings])
    index = {id(v): i for i, v in enumerate(trainer.variables)}
    names = optimizer.slots[index[id(shards[0])]].keys()
    return {n: np.concatenate([optimizer.slots[index[id(s)]][n].numpy() for s in shards]) for n in names}


@pytest.fixture(autouse=True)
def no_channel_variables(monkeypatch):
    for name in ("SM_CHANNEL_WARMSTART", "SM_CHANNEL_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "source_shards, target_shards", [(None, None), ([60, 40], None), (None, [30, 30, 40]), ([60, 40], [45, 55])]
)
def test_a_restored_model_predicts_what_its_source_does_and_keeps_its_slots(
    tmp_path, capsys, source_shards, target_shards
):
    import deepfm_warm_start as W

    hp = hparams("--batch_norm", "true")
    source, env = trained_source(tmp_path, hp, source_shards)
    target = trainer_for(hp, target_shards)
    assert not np.allclose(predictions(target), predictions(source))  # a fresh model differs
    line = W.restore(hp, env, target)
    np.testing.assert_array_equal(predictions(target), predictions(source))
    for name, table in slot_tables(source).items():
        np.testing.assert_array_equal(slot_tables(target)[name], table)
    assert int(target.optimizer.iterations.numpy()) == 0 and list(target.progress.numpy()) == [0, 0]
    assert (
        line.startswith("warm start: restored ")
        and "(weights and their optimizer slots) from day-1 (checkpoint" in line
    )
    assert line.endswith("steps restart") and line in capsys.readouterr().out


@pytest.mark.parametrize("batch_norm", ["true", "false"])
@pytest.mark.parametrize("tables", [(), ("embeddings",), ("first_order", "embeddings")])
def test_an_optimizer_without_slots_restores_from_a_whole_or_partitioned_source(tmp_path, tables, batch_norm):
    """sgd keeps no slots: a whole table is then stored only under model/ (a small first-order table stays whole
    under parameter servers while the embeddings are split)."""
    import deepfm_warm_start as W

    hp = hparams("--batch_norm", batch_norm, "--optimizer", "sgd", "--learning_rate", "0.5")
    source, env = trained_source(tmp_path, hp, [60, 40], tables=tables)
    target = trainer_for(hp)
    line = W.restore(hp, env, target)
    np.testing.assert_array_equal(predictions(target), predictions(source))
    assert f"restored {11 if batch_norm == 'true' else 7} variables (weights) from day-1" in line


@pytest.mark.parametrize("kind", ["adagrad", "sgd"])
def test_a_partitioned_runs_checkpoint_holds_each_table_once_and_resumes(tmp_path, kind):
    """Its floats are the model's and the optimizer's slots, each once (a second list of the shards would save the
    tables twice, and a resume would read them twice)."""
    import tensorflow as tf
    from deepfm_checkpoint import CheckpointKeeper

    hp = hparams("--optimizer", kind)
    source, _ = trained_source(tmp_path, hp, [60, 40])
    prefix = tf.train.latest_checkpoint(str(tmp_path / "input" / "data" / "warmstart"))
    saved = sum(int(np.prod(shape)) for key, shape in tf.train.list_variables(prefix) if "VARIABLE_VALUE" in key)
    slots = [var for slots in source.optimizer.slots for var in slots.values()]
    state = sum(int(np.prod(v.shape)) for v in source.model.all_variables + slots)
    scalars = 5  # the optimizer's iterations and learning rate, the progress pair, the save counter
    assert saved == state + scalars, (saved, state)
    resumed = trainer_for(hp, [60, 40])
    keeper = CheckpointKeeper(resumed, str(tmp_path / "input" / "data" / "warmstart"), 1)
    assert keeper.restore_latest() == 3
    np.testing.assert_array_equal(predictions(resumed), predictions(source))
    for name, table in slot_tables(source).items():  # each shard's slots, read one shard at a time
        np.testing.assert_array_equal(slot_tables(resumed)[name], table)
    for a, b in zip(resumed.optimizer.slots, source.optimizer.slots):
        assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in b)


@pytest.mark.parametrize("kind", ["adagrad", "sgd"])
def test_a_checkpoint_that_saved_the_shards_twice_still_warm_starts(tmp_path, kind):
    """The scripts' earlier checkpoints also saved the optimizer's list of the tables' shards (optimizer/_variables/N),
    and with it the dense variables whose path there was the shorter (batch norm's)."""
    import tensorflow as tf
    import deepfm_warm_start as W
    from deepfm_checkpoint import CheckpointKeeper

    hp = hparams("--batch_norm", "true", "--optimizer", kind)
    source = trainer_for(hp, [60, 40])
    for step in range(3):
        source.train_step(batch(seed=step))
    source.optimizer._variables = list(source.optimizer._variables)  # tracked: saved, as they were
    folder = tmp_path / "input" / "data" / "warmstart"
    CheckpointKeeper(source, str(folder), 1).maybe_save(3, force=True)
    keys = [key for key, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(folder)))]
    assert "optimizer/_variables/1/.ATTRIBUTES/VARIABLE_VALUE" in keys
    target = trainer_for(hp, [30, 70])
    W.restore(hp, env_for(tmp_path, "warmstart"), target)
    np.testing.assert_array_equal(predictions(target), predictions(source))


def test_continue_keeps_the_sources_step(tmp_path):
    import deepfm_warm_start as W

    hp = hparams(steps="continue")
    _, env = trained_source(tmp_path, hp, steps=3)
    target = trainer_for(hp)
    W.restore(hp, env, target)
    assert int(target.optimizer.iterations.numpy()) == 3 and list(target.progress.numpy()) == [0, 3]


@pytest.mark.parametrize("target_shards", [None, [50, 50, 50]])
def test_a_grown_table_keeps_the_old_rows_bit_for_bit_and_starts_the_new_ones_fresh(tmp_path, target_shards):
    import deepfm_warm_start as W

    hp = hparams()
    source, env = trained_source(tmp_path, hp)
    grown = hparams("--feature_size", "150")
    target = trainer_for(grown, target_shards)
    fresh = {name: full(getattr(target.model, name)) for name in ("first_order", "embeddings")}
    fresh_slots = slot_tables(target)
    W.restore(grown, env, target)
    for name in ("first_order", "embeddings"):
        restored = full(getattr(target.model, name))
        np.testing.assert_array_equal(restored[:100], full(getattr(source.model, name)))
        np.testing.assert_array_equal(restored[100:], fresh[name][100:])
    for name, table in slot_tables(source).items():
        np.testing.assert_array_equal(slot_tables(target)[name][:100], table)
        np.testing.assert_array_equal(slot_tables(target)[name][100:], fresh_slots[name][100:])


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--embedding_size", "6"], "holds model/embeddings in shape [100, 4], this run's is [100, 6]"),
        (["--feature_size", "80"], "holds model/first_order in shape [100, 1], this run's is [80, 1]"),
        (["--deep_layers", "16"], "holds model/kernels/0 in shape [12, 8], this run's is [12, 16]"),
        (["--field_size", "5"], "holds model/kernels/0 in shape [12, 8], this run's is [20, 8]"),
        (["--optimizer", "adagrad"], "was written with optimizer adam (slots: m, v), this run uses adagrad"),
    ],
)
def test_a_shape_that_cannot_map_stops_naming_the_variable_and_both_shapes(tmp_path, capsys, argv, words):
    import deepfm_warm_start as W

    _, env = trained_source(tmp_path, hparams())
    other = hparams(*argv)
    with pytest.raises(SystemExit) as stop:
        W.restore(other, env, trainer_for(other))
    assert stop.value.code == 1
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("[dfm] error: warm start from day-1: checkpoint ckpt-3 ") and words in line, line
    assert line.endswith("no model exported")


def test_embeddings_only_restores_the_tables_when_the_layers_differ(tmp_path, capsys):
    import deepfm_warm_start as W

    source, env = trained_source(tmp_path, hparams())
    other = hparams("--deep_layers", "[16, 4]", "--field_size", "5", warm_start="embeddings")
    target = trainer_for(other)
    kernel = target.model.kernels[0].numpy().copy()
    line = W.restore(other, env, target)
    np.testing.assert_array_equal(full(target.model.embeddings), full(source.model.embeddings))
    np.testing.assert_array_equal(full(target.model.first_order), full(source.model.first_order))
    np.testing.assert_array_equal(target.model.kernels[0].numpy(), kernel)
    assert "restored 6 variables (embedding tables and their optimizer slots)" in line


def test_a_model_tar_gz_restores_the_weights(tmp_path):
    import deepfm_warm_start as W
    from deepfm_checkpoint import export_saved_model

    hp = hparams("--batch_norm", "true")
    source, _ = trained_source(tmp_path / "day-1", hp)
    exported = export_saved_model(source.model, hp, str(tmp_path / "exported"), version=1764300000)
    channel = tmp_path / "input" / "data" / "model"
    channel.mkdir(parents=True)
    with tarfile.open(channel / "model.tar.gz", "w:gz") as tar:
        tar.add(exported, arcname="1764300000")
        tar.add(__file__, arcname="code/notes.py")  # other files beside the model
    before = (channel / "model.tar.gz").read_bytes()
    target = trainer_for(hp)
    slots = slot_tables(target)
    line = W.restore(hp, env_for(tmp_path, "model"), target)
    np.testing.assert_array_equal(predictions(target), predictions(source))
    for name, table in slots.items():
        np.testing.assert_array_equal(slot_tables(target)[name], table)  # a model has no slots: fresh ones
    assert "(weights) from day-1 (model version 1764300000), steps restart" in line
    assert (channel / "model.tar.gz").read_bytes() == before and os.listdir(channel) == ["model.tar.gz"]


def test_a_checkpoint_of_something_else_is_not_a_dfm_checkpoint(tmp_path, capsys):
    import tensorflow as tf

    import deepfm_warm_start as W

    folder = tmp_path / "input" / "data" / "warmstart"
    tf.train.CheckpointManager(tf.train.Checkpoint(w=tf.Variable([1.0])), str(folder), 1).save()
    listed = sorted(os.listdir(folder))
    with pytest.raises(SystemExit):
        W.restore(hparams(), env_for(tmp_path, "warmstart"), trainer_for(hparams()))
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "holds no first_order and embeddings tables: not a dfm checkpoint or model" in line
    assert sorted(os.listdir(folder)) == listed


@pytest.mark.parametrize(
    "layout, words",
    [
        (None, "warm start source day-1 does not exist"),
        ({}, "warm start source day-1 is empty"),
        ({"notes.txt": "x"}, "is not a dfm checkpoint folder: no 'checkpoint' file"),
    ],
)
def test_a_source_that_is_missing_empty_or_foreign_is_refused_before_tensorflow_starts(tmp_path, layout, words):
    import deepfm_warm_start as W

    env = env_for(tmp_path, "warmstart")
    if layout is not None:
        folder = tmp_path / "input" / "data" / "warmstart"
        folder.mkdir(parents=True)
        for name, text in layout.items():
            (folder / name).write_text(text)
    assert words in W.source_problem(hparams(), env)
    assert W.source_problem(hparams(warm_start=""), env) is None


@pytest.mark.parametrize("script", ["train_ps.py", "train_mirrored.py"])
def test_a_script_given_an_empty_source_says_so_in_its_first_line_and_exits_1(tmp_path, script):
    hps = {"warm_start": "embeddings", "warm_start_source": "s3://bucket/day-1/model.tar.gz"}
    env = es.make_container(tmp_path, ["train", "model"], hyperparameters=hps)
    proc = es.start_script(tmp_path, script, hps, env, tmp_path / "log.txt", boot=WARM_HPARAMS_BOOT)
    assert proc.wait(timeout=120) == 1
    first = (tmp_path / "log.txt").read_text().splitlines()[0]
    assert first == (
        f"[dfm] error: warm start source s3://bucket/day-1/model.tar.gz is empty (channel 'model', "
        f"{tmp_path / 'input' / 'data' / 'model'}); no model exported"
    )
    assert os.listdir(tmp_path / "input" / "data" / "model") == []


@pytest.mark.slow
def test_a_run_whose_shapes_cannot_map_exits_1_before_training_and_exports_nothing(tmp_path):
    hp = hparams()
    trained_source(tmp_path / "source", hp)
    base = tmp_path / "job"
    train, _ = es.synth_split(512, 0, seed=3, feature_size=100, field_size=3)
    hps = {"field_size": 3, "feature_size": 100, "embedding_size": 6, "deep_layers": [8], "batch_size": 64}
    hps.update({"max_steps": 4, "warm_start": "all", "warm_start_source": "s3://bucket/day-1/checkpoints"})
    env = es.make_container(base, ["train", "warmstart"], hyperparameters=hps)
    es.write_tfrecords(base / "input" / "data" / "train", train, 1)
    shutil.copytree(
        tmp_path / "source" / "input" / "data" / "warmstart", base / "input" / "data" / "warmstart", dirs_exist_ok=True
    )
    proc = es.start_script(base, "train_ps.py", hps, env, tmp_path / "log.txt", boot=WARM_HPARAMS_BOOT)
    assert proc.wait(timeout=300) == 1
    lines = (tmp_path / "log.txt").read_text().splitlines()
    errors = [line for line in lines if line.startswith("[dfm] error:")]
    assert errors == [
        "[dfm] error: warm start from s3://bucket/day-1/checkpoints: checkpoint ckpt-3 holds model/embeddings in "
        "shape [100, 4], this run's is [100, 6]; train with the source's settings, or warm_start: embeddings when only "
        "the layers differ; no model exported"
    ], lines
    assert not [line for line in lines if line.startswith("[dfm] train step=")]
    assert os.listdir(base / "model") == []


# The warm-start hyperparameters, until deepfm_hparams declares them (setdefault: harmless once it does); then the
# script as __main__ (start_script's boot).
WARM_HPARAMS = """
import runpy, sys
import deepfm_hparams as h
h.DEFAULTS.setdefault("warm_start", "")
h.DEFAULTS.setdefault("warm_start_steps", "restart")
h.DEFAULTS.setdefault("warm_start_source", "")
h.CHOICES.setdefault("warm_start", ("", "all", "embeddings"))
h.CHOICES.setdefault("warm_start_steps", ("restart", "continue"))
"""
WARM_HPARAMS_BOOT = (
    WARM_HPARAMS
    + """
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
)


def ps_cluster(tmp_path, hp, tag, warm_source=None, rows=4000):
    """Two hosts of SageMaker's parameter-server layout on loopback (2 ps), each with its half of `train` and, with
    `warm_source`, a copy of that checkpoint folder as its `warmstart` channel; the master's own worker off (it would
    start without the warm-start hyperparameters' boot). -> (exit codes, chief log, the chief's base)."""
    from test_entry_ps import loopback_cluster, stop_all

    hosts = ["algo-1", "algo-2"]
    channels = ["train"] + (["warmstart"] if warm_source else [])
    train, _ = es.synth_split(rows, 0, seed=5, feature_size=20000)
    cluster, procs, bases = loopback_cluster(), [], []
    for i, host in enumerate(hosts):
        base = tmp_path / tag / host
        env = es.make_container(base, channels, hosts=hosts, current_host=host, s3_sharded=("train",))
        es.write_tfrecords(base / "input/data/train", train.take(i * rows // 2, (i + 1) * rows // 2), 1)
        if warm_source:
            shutil.copytree(warm_source, base / "input/data/warmstart", dirs_exist_ok=True)
        bases.append((base, env))
    try:
        procs += [es.start_toolkit_ps(cluster, i, bases[i][1], tmp_path / f"{tag}-ps{i}.log") for i in range(2)]
        for (base, env), (role, name) in reversed(list(zip(bases, [("master", "chief"), ("worker", "worker")]))):
            extra = {"TF_CONFIG": es.sagemaker_tf_config(cluster, role, 0), "DFM_PS_CHIEF_WORKER": "0"}
            log = tmp_path / f"{tag}-{name}.log"
            procs.append(es.start_script(base, "train_ps.py", hp, env, log, extra, boot=WARM_HPARAMS_BOOT))
        codes = [proc.wait(timeout=300) for proc in reversed(procs)]
    finally:
        stop_all(procs)
    return codes, (tmp_path / f"{tag}-chief.log").read_text(), bases[0][0]


PS_HP = {"feature_size": 20000, "deep_layers": [32, 16], "batch_size": 128, "optimizer": "adagrad", "log_steps": 2}
STILL = 1e-30  # a learning rate whose updates vanish below float32's precision: the run keeps what it restored


def exported_predictions(log):
    from test_entry_ps import predict_saved_model

    (exported,) = [line.split()[-1] for line in log.splitlines() if line.startswith("[dfm] exported ")]
    return predict_saved_model(exported)


@pytest.mark.slow
def test_a_two_ps_run_restores_a_one_host_source_and_predicts_what_it_does(tmp_path):
    from test_entry_ps import checkpoint_predictions

    source_hp = H.parse_hyperparameters(es.argv_for(PS_HP))
    trained_source(tmp_path / "day-1", source_hp)  # its tables whole
    folder = tmp_path / "day-1" / "input" / "data" / "warmstart"
    hp = dict(PS_HP, max_steps=4, learning_rate=STILL, warm_start="all", warm_start_source="day-1")
    codes, chief, _ = ps_cluster(tmp_path, hp, "day-2", warm_source=folder)
    assert codes == [0, 0, 0, 0], chief[-3000:]
    assert "embeddings in 2 shard(s)" in chief
    (line,) = [line for line in chief.splitlines() if "warm start:" in line]
    # 10 variables (the first-order table in 1 shard, the embeddings in 2, 7 dense ones) and their 10 accumulators
    assert line == (
        "[dfm] warm start: restored 20 variables (weights and their optimizer slots) from day-1 (checkpoint ckpt-3), "
        "steps restart"
    )
    assert "trained steps 0..4 on " in chief  # restarted at step 0
    np.testing.assert_allclose(exported_predictions(chief), checkpoint_predictions(folder / "ckpt-3", PS_HP), rtol=1e-6)


@pytest.mark.slow
def test_a_one_host_run_restores_a_two_ps_source_and_predicts_what_it_does(tmp_path):
    from test_entry_ps import checkpoint_predictions

    codes, chief, base = ps_cluster(tmp_path, dict(PS_HP, max_steps=10, learning_rate=0.1), "day-1")
    assert codes == [0, 0, 0, 0] and "embeddings in 2 shard(s)" in chief, chief[-3000:]
    job = tmp_path / "day-2"
    hp = dict(PS_HP, max_steps=2, learning_rate=STILL, warm_start="all", warm_start_source="day-1")
    env = es.make_container(job, ["train", "warmstart"], hyperparameters=hp)
    train, _ = es.synth_split(1000, 0, seed=6, feature_size=20000)
    es.write_tfrecords(job / "input/data/train", train, 1)
    shutil.copytree(base / "checkpoints", job / "input/data/warmstart", dirs_exist_ok=True)
    proc = es.start_script(job, "train_ps.py", hp, env, tmp_path / "one.log", boot=WARM_HPARAMS_BOOT)
    code = proc.wait(timeout=300)
    log = (tmp_path / "one.log").read_text()
    assert code == 0, log[-3000:]
    assert "from day-1 (checkpoint ckpt-10), steps restart" in log
    expected = checkpoint_predictions(base / "checkpoints" / "ckpt-10", PS_HP)
    np.testing.assert_allclose(exported_predictions(log), expected, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.horovod
def test_two_horovod_ranks_start_from_a_partitioned_source_alike(tmp_path):
    """Rank 0 restores a checkpoint whose tables are in 2 shards (as a parameter-server job writes them), the
    start broadcast hands it to rank 1: both end with the source's weights (the learning rate too small to move
    them)."""
    es.require("horovod")
    import subprocess

    from test_entry_horovod import HPS, MPIRUN

    source_hp = H.parse_hyperparameters(es.argv_for(HPS))
    source, _ = trained_source(tmp_path / "day-1", source_hp, shards=[600, 400])
    hps = dict(HPS, max_steps=2, epochs=1, learning_rate=STILL, warm_start="all", warm_start_source="day-1")
    env = es.make_container(tmp_path / "base", ["train", "warmstart"])
    train, _ = es.synth_split(1024, 0, seed=3, feature_size=HPS["feature_size"], field_size=HPS["field_size"])
    es.write_tfrecords(tmp_path / "base/input/data/train", train, 2)
    shutil.copytree(tmp_path / "day-1/input/data/warmstart", tmp_path / "base/input/data/warmstart", dirs_exist_ok=True)
    env["DFM_DUMP_WEIGHTS"] = str(tmp_path / "dump")
    exported = [arg for name in env if name.startswith(("SM_", "SAGEMAKER_", "DFM_", "TF_CPP")) for arg in ("-x", name)]
    script = [es.PYTHON, "-c", WARM_HPARAMS_BOOT, "train_horovod.py", *es.argv_for(hps)]
    command = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-bind-to", "none", *exported, *script]
    run = subprocess.run(command, cwd=tmp_path / "base/code", env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "(weights and their optimizer slots) from day-1 (checkpoint ckpt-3), steps restart" in run.stdout
    dumps = [np.load(tmp_path / "dump" / f"rank-{rank}.npz") for rank in range(2)]
    for index, var in enumerate(source.model.all_variables):
        for dump in dumps:
            np.testing.assert_allclose(dump[f"v{index:02d}"], full(var), rtol=1e-6, atol=1e-20, err_msg=str(index))


@pytest.mark.slow
def test_multi_worker_mirrored_replicas_start_from_the_source_in_every_copy(tmp_path):
    """MultiWorkerMirrored with 2 local replicas (the CPU split in two): rank 0 restores a partitioned source into
    its mirrored variables, and both copies of every variable hold the source's values."""
    hps = dict(PS_HP, feature_size=1000, field_size=10, max_steps=2, learning_rate=STILL)
    source_hp = H.parse_hyperparameters(es.argv_for(hps))
    source, _ = trained_source(tmp_path / "day-1", source_hp, shards=[600, 400])
    hps.update(warm_start="all", warm_start_source="day-1")
    env = es.make_container(tmp_path / "base", ["train", "warmstart"])
    train, _ = es.synth_split(2048, 0, seed=3, feature_size=1000, field_size=10)
    es.write_tfrecords(tmp_path / "base/input/data/train", train, 2)
    shutil.copytree(tmp_path / "day-1/input/data/warmstart", tmp_path / "base/input/data/warmstart", dirs_exist_ok=True)
    boot = WARM_HPARAMS + "sys.argv = ['-c', '2'] + sys.argv[1:]\n" + es._LOCAL_CPU_REPLICAS  # 2 CPU replicas
    extra = {"DFM_DUMP_WEIGHTS": str(tmp_path / "dump")}
    proc = es.start_script(tmp_path / "base", "train_mirrored.py", hps, env, tmp_path / "run.log", extra, boot=boot)
    code = proc.wait(timeout=300)
    log = (tmp_path / "run.log").read_text()
    assert code == 0, log[-3000:]
    assert "local_replicas=2" in log and "from day-1 (checkpoint ckpt-3), steps restart" in log
    dump = np.load(tmp_path / "dump" / "rank-0.npz")
    for index, var in enumerate(source.model.all_variables):
        for copy in (f"v{index:02d}", f"v{index:02d}_c1"):
            np.testing.assert_allclose(dump[copy], full(var), rtol=1e-6, atol=1e-20, err_msg=copy)
