"""DeepFM on core TF: learns planted synthetic data, updates embeddings sparsely, streaming AUC,
export that loads and predicts, metric lines the launcher's regexes read."""

import re

import numpy as np
import pytest

import entry_support as es
import deepfm_hparams as H
import deepfm_log

tf = pytest.importorskip("tensorflow")
import deepfm_input as I  # noqa: E402
import deepfm_checkpoint as C  # noqa: E402
import deepfm_model as M  # noqa: E402
import deepfm_training as T  # noqa: E402
import deepfm_metrics as DM  # noqa: E402
import deepfm_variables as V  # noqa: E402

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too


def small_hp(**overrides):
    argv = [
        "--feature_size",
        "2000",
        "--deep_layers",
        "[64, 32]",
        "--batch_size",
        "256",
        "--learning_rate",
        "0.1",
        "--optimizer",
        "adagrad",
    ]  # the settings these tests were tuned with
    for key, value in overrides.items():
        argv += [f"--{key}", str(value)]
    return H.parse_hyperparameters(argv)


def random_batch(hp, rows=64, seed=0, id_range=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, id_range or hp.feature_size, size=(rows, hp.field_size))
    return (
        {"ids": tf.constant(ids, tf.int64), "values": tf.constant(rng.random((rows, hp.field_size)), tf.float32)},
        tf.constant(rng.integers(0, 2, rows), tf.float32),
    )


@pytest.mark.slow
def test_training_gets_close_to_the_teachers_auc(tmp_path):
    """50k rows from the planted teacher (600 ids, so most ids are seen often), 2 epochs: eval AUC
    within 0.05 of the teacher's own AUC on the same eval rows (the best any model can expect)."""
    train, evaluation = es.synth_split(50000, 6000, seed=11, feature_size=600)
    es.write_tfrecords(tmp_path / "train", train, 4)
    es.write_tfrecords(tmp_path / "eval", evaluation, 1)
    hp = small_hp(epochs=2, feature_size=600, learning_rate=0.3)
    trainer = T.build_trainer(hp)
    cfg = I.InputConfig(field_size=39, batch_size=hp.batch_size, data_dir=str(tmp_path))
    step = tf.function(trainer.train_step)
    for batch in I.make_dataset(cfg, ["train"], epochs=2):
        step(batch)
    assert int(trainer.optimizer.iterations.numpy()) == 2 * int(np.ceil(50000 / 256))
    loss, auc = DM.evaluate(trainer, I.make_dataset(cfg, ["eval"], training=False), step=0)
    assert auc > evaluation.teacher_auc - 0.05, (auc, evaluation.teacher_auc)
    assert loss < 0.55


@pytest.mark.parametrize("kind", ["adagrad", "ftrl", "sgd", "adam"])
def test_embedding_updates_touch_only_the_rows_in_the_batch(kind):
    hp = small_hp(optimizer=kind)
    trainer = T.build_trainer(hp)
    before = trainer.model.embeddings.numpy().copy()
    slots_before = {k: v.numpy().copy() for k, v in trainer.optimizer.slots[1].items()}
    batch = random_batch(hp, id_range=500)  # ids < 500 only
    with tf.GradientTape() as tape:
        logits, _ = trainer.model(batch[0]["ids"], batch[0]["values"], training=True)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch[1], logits=logits))
    assert isinstance(tape.gradient(loss, trainer.model.embeddings), tf.IndexedSlices)
    tf.function(trainer.train_step)(batch)
    after = trainer.model.embeddings.numpy()
    used = np.unique(batch[0]["ids"].numpy())
    untouched = np.setdiff1d(np.arange(hp.feature_size), used)
    np.testing.assert_array_equal(after[untouched], before[untouched])
    assert np.all(np.any(after[used] != before[used], axis=1))
    for name, slot in trainer.optimizer.slots[1].items():  # lazy Adam: moments of other rows untouched
        np.testing.assert_array_equal(slot.numpy()[untouched], slots_before[name][untouched])


def test_adam_follows_its_law_lazily_on_tables_and_in_full_on_dense_variables():
    """Two steps of the optimizer against Adam written out in numpy: dense moments decay everywhere, a
    table's only on the rows its gradient names (the fused dense op and the sparse path agree with it)."""
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-7
    dense, table = tf.Variable(np.ones([3, 2], np.float32)), tf.Variable(np.ones([5, 2], np.float32))
    opt = T.SparseOptimizer("adam", lr)
    opt.build([dense, table])
    rng = np.random.default_rng(0)
    steps = [
        (rng.normal(size=[3, 2]).astype(np.float32), np.array([1, 3]), rng.normal(size=[2, 2]).astype(np.float32))
        for _ in range(2)
    ]
    want = {"dense": np.ones([3, 2]), "table": np.ones([5, 2])}
    moments = {name: [np.zeros_like(value), np.zeros_like(value)] for name, value in want.items()}
    for t, (g_dense, rows, g_rows) in enumerate(steps, start=1):
        tf.function(opt.apply)([tf.constant(g_dense), tf.IndexedSlices(tf.constant(g_rows), tf.constant(rows))])
        scale = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        for name, where, grad in (("dense", slice(None), g_dense), ("table", rows, g_rows)):
            m, v = moments[name]
            m[where] = b1 * m[where] + (1 - b1) * grad
            v[where] = b2 * v[where] + (1 - b2) * grad**2
            want[name][where] -= scale * m[where] / (np.sqrt(v[where]) + eps)
    np.testing.assert_allclose(dense.numpy(), want["dense"], rtol=1e-5)
    np.testing.assert_allclose(table.numpy(), want["table"], rtol=1e-5)
    np.testing.assert_array_equal(opt.slots[1]["m"].numpy()[[0, 2, 4]], 0.0)


def test_adams_moment_math_runs_where_its_variable_lives():
    """Under parameter servers the variables and their moments sit on a ps: the moments must be updated
    there, so that only gradients cross to it (not the moments there and back each step)."""
    device = "/job:localhost/replica:0/task:0/device:CPU:0"
    with tf.device(device):
        dense, table = tf.Variable(tf.ones([3, 2])), tf.Variable(tf.ones([5, 2]))
    opt = T.SparseOptimizer("adam", 0.01)
    opt.build([dense, table])
    graph = (
        tf.function(opt.apply)
        .get_concrete_function(
            [tf.TensorSpec([3, 2]), tf.IndexedSlices(tf.TensorSpec([None, 2]), tf.TensorSpec([None], tf.int64))]
        )
        .graph
    )
    ops = graph.get_operations()
    assert [op.type for op in ops if op.type.startswith("ResourceApply")] == ["ResourceApplyAdam"]
    sparse = [op for op in ops if op.type in ("ResourceScatterUpdate", "ResourceScatterSub")]
    assert len(sparse) == 3
    for op in sparse:  # the update and the moment math feeding it (its indices come from the worker's dedup)
        for producer in (op, op.inputs[2].op):
            assert producer.device == device, (op.name, producer.name, producer.device)


@pytest.mark.parametrize("kind", ["adagrad", "sgd", "ftrl"])
def test_a_dense_gradient_leaves_rows_outside_the_batch_as_the_sparse_one_does_except_under_ftrl(kind):
    """Why sparse_allreduce never densifies FTRL's gradients: TF's FTRL sets every row it updates from
    `linear` and `accum`, and a zero-gradient row (not in the batch) with |linear| <= l1 becomes 0, so
    the dense update wipes the initial values of the whole table; Adagrad and SGD leave such rows alone."""
    init = np.random.default_rng(0).normal(0, 0.01, (6, 3)).astype(np.float32)
    grad = tf.IndexedSlices(tf.constant([[0.5, -0.5, 0.25]]), tf.constant([2]), tf.constant([6, 3]))
    results = []
    for gradient in (grad, tf.convert_to_tensor(grad)):
        var = tf.Variable(init)
        opt = T.SparseOptimizer(kind, 0.1)
        opt.build([var])
        opt.apply([gradient])
        results.append(var.numpy())
    sparse, dense = results
    np.testing.assert_array_equal(sparse[[0, 1, 3, 4, 5]], init[[0, 1, 3, 4, 5]])
    if kind == "ftrl":
        np.testing.assert_array_equal(dense[[0, 1, 3, 4, 5]], 0.0)
        assert H.resolve_sparse_allreduce("auto", 6, 2, 1, 1, 64, kind) == "gather"
        with pytest.raises(H.HyperparameterError, match="--sparse_allreduce: dense would zero every row"):
            H.parse_hyperparameters(["--sparse_allreduce", "dense", "--optimizer", kind])
    else:
        np.testing.assert_allclose(dense, sparse, rtol=1e-6)
        assert H.resolve_sparse_allreduce("auto", 6, 2, 1, 1, 64, kind) == "dense"


@pytest.mark.parametrize("bad_id", [2000, 2500, -1])
@pytest.mark.parametrize("lookup", ["cpu", "gpu"])
def test_an_id_outside_the_table_is_a_bad_row_on_every_device(monkeypatch, bad_id, lookup):
    """On a GPU tf.gather returns zeros for an id outside the table where the CPU raises: the model checks
    the ids itself, so both stop at the step with one line naming the id and feature_size. `gpu` runs the
    model with the lookup replaced by the GPU's behaviour (zeros for such ids)."""
    if lookup == "gpu":

        def gpu_lookup(params, ids):
            inside = (ids >= 0) & (ids < tf.shape(params, out_type=ids.dtype)[0])
            rows = tf.gather(params, tf.where(inside, ids, tf.zeros_like(ids)))
            return tf.where(inside[..., None], rows, tf.zeros_like(rows))

        monkeypatch.setattr(tf.nn, "embedding_lookup", gpu_lookup)
    hp = small_hp()
    trainer = T.build_trainer(hp)
    features, labels = random_batch(hp, rows=8)
    good = features["ids"].numpy()
    tf.function(trainer.train_step)((features, labels))  # ids in range train
    good[5, 3] = bad_id
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        tf.function(trainer.train_step)(({"ids": tf.constant(good), "values": features["values"]}, labels))
    assert deepfm_log.error_line(err.value.message) == (  # the assertion's data, in brackets as a raw bad row's
        f"[bad row: id {bad_id} (row 5 of the batch, field slot 3) is outside 0..1999: feature_size (2000) must "
        "exceed every id in the data; set it to the largest id + 1, or index the data for this model]"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad row: id"):
        trainer.model.predict(tf.constant(good), features["values"])


def test_duplicate_ids_in_a_batch_update_like_their_summed_gradient():
    """Adagrad must see one accumulated gradient per row, not one update per occurrence."""
    var = tf.Variable(tf.zeros([4, 2]))
    opt = T.SparseOptimizer("adagrad", 1.0)
    opt.build([var])
    grad = tf.IndexedSlices(tf.constant([[1.0, 1.0], [1.0, 1.0]]), tf.constant([2, 2]), tf.constant([4, 2]))
    opt.apply([grad])
    accum = 0.1 + 2.0**2  # summed gradient 2 squared, once
    np.testing.assert_allclose(var.numpy()[2], -2.0 / np.sqrt(accum), rtol=1e-5)
    np.testing.assert_array_equal(var.numpy()[[0, 1, 3]], 0.0)


def test_a_batch_looks_up_each_distinct_id_once_with_the_gradient_of_a_lookup_per_place():
    """The model gathers each distinct id of a batch once (under parameter servers only those rows cross from
    the ps): each table's gradient has one row per distinct id, through a partitioned table too, and equals
    the gradient of looking every place up on its own, summed per row."""
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    hp = small_hp(feature_size=1000, l2_reg=0.1, dropout=0)
    model = M.build_model(hp)
    halves = tf.split(model.embeddings.read_value(), 2)
    model.embeddings = ShardedVariable([tf.Variable(h, name=f"embeddings/part_{i}") for i, h in enumerate(halves)])
    features, labels = random_batch(hp, rows=64, id_range=900)  # 64 x 39 places, at most 900 ids
    ids, values = features["ids"], features["values"]
    tables = [model.first_order, *model.embeddings.variables]
    with tf.GradientTape() as tape:
        logits, l2 = model(ids, values, training=True)
        loss = tf.reduce_sum(logits * labels) + l2
    grads = tape.gradient(loss, tables)

    def per_place_loss():  # the model's forward pass with a lookup per place
        weights = tf.nn.embedding_lookup(model.first_order, ids)[..., 0]
        scaled = tf.nn.embedding_lookup(model.embeddings, ids) * values[..., None]
        summed = tf.reduce_sum(scaled, axis=1)
        fm = 0.5 * tf.reduce_sum(tf.square(summed) - tf.reduce_sum(tf.square(scaled), axis=1), axis=1)
        deep = model._mlp(tf.reshape(scaled, [64, -1]), model.kernels, model.biases, [], training=True)
        penalty = hp.l2_reg * (tf.nn.l2_loss(weights) + tf.nn.l2_loss(scaled / values[..., None])) / 64
        return tf.reduce_sum((tf.reduce_sum(weights * values, 1) + fm + deep + model.bias) * labels) + penalty

    with tf.GradientTape() as tape:
        reference = per_place_loss()
    expected = tape.gradient(reference, tables)
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-6)
    distinct = np.unique(ids.numpy())
    assert len(distinct) < ids.shape[0] * ids.shape[1] / 2
    assert len(expected[0].indices.numpy()) == ids.shape[0] * ids.shape[1]  # a lookup per place: a row per place
    for grad, want in zip(grads, expected):
        assert isinstance(grad, tf.IndexedSlices)
        assert len(np.unique(grad.indices.numpy())) == len(grad.indices.numpy())  # a row once
        np.testing.assert_allclose(
            tf.convert_to_tensor(grad).numpy(), tf.convert_to_tensor(want).numpy(), rtol=1e-5, atol=1e-7
        )
    first_order, *shards = grads
    assert len(first_order.indices.numpy()) == len(distinct)
    assert sum(len(g.indices.numpy()) for g in shards) == len(distinct)


def test_histogram_auc_matches_the_exact_auc():
    from launcher.data.synth import roc_auc

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 5000).astype(np.float32)
    probs = np.clip(0.5 * labels + 0.6 * rng.random(5000) - 0.05, 0, 1).astype(np.float32)
    metrics = DM.StreamingMetrics()
    losses = -np.log(np.where(labels > 0, probs, 1 - probs).clip(1e-7))
    metrics.update(tf.constant(labels), tf.constant(probs), tf.constant(losses))
    loss, auc, examples = metrics.result()
    assert examples == 5000
    assert abs(auc - roc_auc(labels, probs)) < 2e-3
    assert loss == pytest.approx(float(np.mean(losses)), rel=1e-5)
    metrics.reset()
    assert metrics.result()[2] == 0


def test_summed_result_reads_what_the_metrics_hold_and_resets_them():
    metrics = DM.StreamingMetrics(buckets=4)
    labels, probs = tf.constant([1.0, 0.0, 1.0]), tf.constant([0.9, 0.1, 0.3])
    metrics.update(labels, probs, tf.constant([0.5, 1.0, 1.5]))
    expected = metrics.result()
    assert DM.summed_result(metrics) == expected
    assert metrics.result()[2] == 0 and not metrics.totals.numpy().any()
    metrics.update(labels[:1], probs[:1], tf.constant([2.0]))  # the packed read is traced once, read again fresh
    assert DM.summed_result(metrics)[0::2] == (2.0, 1)


def test_what_is_added_while_the_metrics_are_taken_is_kept_for_the_next_take_and_each_take_sees_whole_adds():
    """A parameter-server chief takes the train metrics while the workers' closures add to them: an add that comes
    between a take's read and its reset stays for the next take, so the examples of all takes are all added; and
    each take holds whole adds (a closure's examples with their loss: a window's loss is never read as 0)."""
    import threading

    metrics = DM.StreamingMetrics(buckets=4)
    one = metrics.counts(tf.constant([1.0, 0.0]), tf.constant([0.9, 0.2]), tf.constant([0.5, 0.25]))
    add = tf.function(lambda: metrics.add(one))
    adds, finished = 5000, threading.Event()

    def closures():
        for _ in range(adds):
            add()
        finished.set()

    thread = threading.Thread(target=closures)
    totals, takes = np.zeros(3 + 2 * 4), 0
    thread.start()
    torn = []
    while not finished.is_set():
        taken = metrics.take().numpy()
        whole = taken[1] / 2  # each add: 2 examples, loss sum 0.75, one positive in bucket 3, one negative in 0
        if list(taken[:3]) != [0.75 * whole, 2 * whole, 0] or list(taken[3:]) != [0, 0, 0, whole, whole, 0, 0, 0]:
            torn.append(taken)
        totals += taken
        takes += 1
    thread.join()
    totals += metrics.take().numpy()
    assert takes > 10  # taken while the adds ran
    assert torn == []
    loss_sum, examples, skipped = totals[:3]
    assert (examples, loss_sum, skipped) == (2 * adds, 0.75 * adds, 0)
    assert list(totals[3:]) == [0, 0, 0, adds] + [adds, 0, 0, 0]  # positives then negatives per bucket


@pytest.mark.parametrize("batch_norm,dropout", [(False, 0.0), (True, 0.3)])
def test_exported_model_loads_and_predicts_probabilities(tmp_path, batch_norm, dropout):
    hp = small_hp(batch_norm=batch_norm, dropout=dropout)
    trainer = T.build_trainer(hp)
    step = tf.function(trainer.train_step)
    for seed in range(3):
        step(random_batch(hp, seed=seed))
    path = C.export_saved_model(trainer.model, hp, str(tmp_path), version=7)
    assert path == str(tmp_path / "7")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    features, _ = random_batch(hp, rows=16, seed=9)
    out = serve(feat_ids=features["ids"], feat_vals=features["values"])["probabilities"].numpy()
    assert out.shape == (16,)
    assert np.all((out > 0) & (out < 1))
    np.testing.assert_allclose(
        out, trainer.model.predict(features["ids"], features["values"]).numpy(), rtol=1e-5, atol=1e-6
    )


def test_export_after_negative_downsampling_serves_calibrated_probabilities(tmp_path):
    """negative_rate w: the export answers p / (p + (1 - p) / w) for the model's own p (both signatures' models)."""
    hp = small_hp(negative_rate=0.25)
    trainer = T.build_trainer(hp)
    tf.function(trainer.train_step)(random_batch(hp, seed=1))
    serve = tf.saved_model.load(C.export_saved_model(trainer.model, hp, str(tmp_path), version=1))
    features, _ = random_batch(hp, rows=32, seed=4)
    served = serve.signatures["serving_default"](feat_ids=features["ids"], feat_vals=features["values"])
    p = trainer.model.predict(features["ids"], features["values"]).numpy().astype(np.float64)
    np.testing.assert_allclose(served["probabilities"].numpy(), p / (p + (1 - p) / 0.25), rtol=1e-4, atol=1e-6)
    with pytest.raises(H.HyperparameterError, match="negative_rate"):
        small_hp(negative_rate=0)


def test_metric_lines_match_the_launchers_metric_definitions():
    from launcher.facts.conventions import METRIC_DEFINITIONS

    train = deepfm_log.format_metric("train", 1200, 0.4567891, 0.7812341, 23456.78)
    evaluation = deepfm_log.format_metric("eval", 1200, 0.45, 0.79)
    assert train == "[dfm] train step=1200 loss=0.456789 auc=0.781234 examples_per_sec=23456.8"
    found = {}
    for definition in METRIC_DEFINITIONS:
        for line in (train, evaluation):
            match = re.search(definition["Regex"], line)
            if match:
                found[definition["Name"]] = float(match.group(1))
    assert found == {
        "train:loss": 0.456789,
        "train:auc": 0.781234,
        "train:examples_per_sec": 23456.8,
        "train:step": 1200,
        "eval:loss": 0.45,
        "eval:auc": 0.79,
    }
    assert deepfm_log.format_exported("/opt/ml/model/1") == "[dfm] exported /opt/ml/model/1"


def test_the_scripts_warnings_reach_the_local_summary_once(capsys):
    from launcher.metric_lines import Progress

    deepfm_log.warn("the exported model is no better than chance")
    deepfm_log.warn("the exported model is no better than chance")
    progress = Progress()
    for line in capsys.readouterr().out.splitlines():
        assert not progress.feed("algo-1/master", line)  # not a metric line
    assert progress.warnings == ["the exported model is no better than chance"]


def test_float16_compute_trains_and_an_overflow_skips_the_update_and_halves_the_scale():
    hp = small_hp(optimizer="adagrad")
    trainer = T.build_trainer(hp, compute_dtype=tf.float16)
    step = tf.function(trainer.train_step)
    loss = step(random_batch(hp, seed=1))
    assert np.isfinite(loss.numpy()) and trainer.model.kernels[0].dtype == tf.float32
    assert int(trainer.optimizer.iterations.numpy()) == 1
    before = trainer.model.kernels[0].numpy().copy()
    trainer.loss_scale.scale.assign(3e38)  # scaled loss overflows float32: the step must be skipped
    step(random_batch(hp, seed=2))
    np.testing.assert_array_equal(trainer.model.kernels[0].numpy(), before)
    # the skipped step still used its batch: iterations (the resume step and the batches a restart skips,
    # and the loop's step that names checkpoints) counts it, so a resume neither repeats nor drops batches
    assert int(trainer.optimizer.iterations.numpy()) == 2
    assert trainer.loss_scale.scale.numpy() == pytest.approx(1.5e38)
    step(random_batch(hp, seed=3))  # the halved scale still overflows: skipped again, counted again
    assert int(trainer.optimizer.iterations.numpy()) == 3


@pytest.mark.parametrize("shape, parts", [([1001, 17], [500, 501]), ([7, 1], [3, 1, 3]), ([64, 33], [1, 62, 1])])
def test_a_partitioned_tables_shards_are_computed_alone_and_equal_the_whole_tables_rows(shape, parts):
    """What ParameterServerStrategy asks each shard of (partition_shape/partition_offset) is that shard's rows
    of the table one process would make with the same seed, bit for bit, without the other rows."""
    initial_value = M.normal_initializer(shape, 5, 0.01)
    whole = initial_value().numpy()
    np.testing.assert_array_equal(whole, tf.random.stateless_normal(shape, seed=[5, 7], stddev=0.01).numpy())
    first = 0
    for rows in parts:
        part = initial_value(partition_shape=[rows] + shape[1:], partition_offset=[first] + [0] * (len(shape) - 1))
        assert part.shape == (rows, *shape[1:])
        np.testing.assert_array_equal(part.numpy(), whole[first : first + rows])
        first += rows


def test_partitioned_tables_as_under_parameter_servers_stay_sparse_and_export_partitioned(tmp_path):
    """ParameterServerStrategy turns the tables into ShardedVariables; their per-shard gradients must
    stay IndexedSlices, and the export keeps each table in its parts (nothing gathers them) and serves what the
    model predicts, in one process."""
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    hp = small_hp(optimizer="adam", feature_size=1000)
    model = M.build_model(hp)
    halves = tf.split(model.embeddings.read_value(), 2)
    model.embeddings = ShardedVariable([tf.Variable(h, name=f"embeddings/part_{i}") for i, h in enumerate(halves)])
    trainer = T.Trainer(model, T.SparseOptimizer("adam", 0.01), DM.StreamingMetrics())
    assert len(trainer.variables) == len(model.dense_variables) + 3  # first_order + two shards
    features, labels = random_batch(hp, id_range=300)  # rows of the first shard only
    with tf.GradientTape() as tape:
        logits, _ = model(features["ids"], features["values"], training=True)
    grads = tape.gradient(logits, V.flat_variables([model.embeddings]))
    assert all(isinstance(g, tf.IndexedSlices) for g in grads)
    second_before = model.embeddings.variables[1].numpy().copy()
    tf.function(trainer.train_step)((features, labels))
    np.testing.assert_array_equal(model.embeddings.variables[1].numpy(), second_before)
    path = C.export_saved_model(model, hp, str(tmp_path), version=1)
    loaded = tf.saved_model.load(path)
    # written as the parts' slices of one table (each by the device that holds it), loaded whole for serving
    reader = tf.train.load_checkpoint(f"{path}/variables/variables")
    (key,) = [k for k in reader.get_variable_to_shape_map() if k.startswith("deepfm/embeddings/")]
    np.testing.assert_array_equal(reader.get_tensor(key), V.full_value(model.embeddings).numpy())
    np.testing.assert_array_equal(loaded.deepfm.embeddings.numpy(), V.full_value(model.embeddings).numpy())
    ids = np.array([[0, 499, 500, 999] * 10][0][: hp.field_size] * 3).reshape(3, hp.field_size)
    values = np.random.default_rng(1).random((3, hp.field_size)).astype(np.float32)
    served = loaded.signatures["serving_default"](feat_ids=tf.constant(ids, tf.int64), feat_vals=tf.constant(values))
    np.testing.assert_allclose(served["probabilities"].numpy(), model.predict(ids, values).numpy(), rtol=1e-6)


def test_model_selection_keeps_the_best_evaluations_copy_and_counts_patience(capsys):
    import deepfm_selection as S

    hp = small_hp(best_of="eval:loss", early_stopping_patience=2, feature_size=50)
    model = M.build_model(hp)
    selection = S.ModelSelection(hp)
    assert not selection.observe(model, 10, loss=0.50, auc=0.70)  # the best so far: copied
    model.bias.assign(1.0)
    assert not selection.observe(model, 20, loss=0.60, auc=0.80)  # worse loss (the AUC is not followed)
    assert selection.observe(model, 30, loss=0.55, auc=0.90)  # 2 evaluations without a lower loss: stop
    chosen = selection.model_to_export(model, 30)
    assert chosen is not model and float(chosen.bias.numpy()) == 0.0  # the values of step 10
    out = capsys.readouterr().out
    assert "early stopping at step 30: 2 evaluation(s) without a better eval:loss than 0.500000 (step 10)" in out
    assert out.strip().splitlines()[-1] == "[dfm] eval step=10 loss=0.500000 auc=0.700000"
    last = S.ModelSelection(small_hp(best_of="last"))
    assert not last.observe(model, 10, 0.5, 0.7) and last.model_to_export(model, 10) is model


# ---- compute precision (deepfm_precision, the MLP's dtype) ----


@pytest.mark.parametrize(
    "word, on_gpus, cpu_flag, expected",
    [
        ("auto", True, "avx512_bf16", "float16"),
        ("auto", False, "amx_bf16", "bfloat16"),
        ("auto", False, None, "float32"),
        ("true", False, None, "float16"),
        ("1", True, None, "float16"),
        ("bfloat16", False, None, "bfloat16"),
        ("float16", False, "avx512_bf16", "float16"),
        ("false", True, "avx512_bf16", "float32"),
        ("no", False, None, "float32"),
    ],
)
def test_mixed_precision_chooses_the_dtype_and_says_why(word, on_gpus, cpu_flag, expected):
    import deepfm_precision as P

    dtype, why = P.choose(H.convert("mixed_precision", word), on_gpus, cpu_flag)
    assert dtype == expected and "mixed_precision=" in why
    if word == "auto" and cpu_flag and not on_gpus:
        assert cpu_flag in why


def test_bfloat16_instructions_are_read_from_the_cpu_flags(tmp_path):
    import deepfm_precision as P

    cpuinfo = tmp_path / "cpuinfo"
    for flags, expected in [
        ("fpu avx512f avx512_vnni", None),
        ("fpu avx512f avx512_bf16 avx512_vnni", "avx512_bf16"),
        ("fpu amx_tile amx_bf16 amx_int8", "amx_bf16"),
    ]:
        cpuinfo.write_text(
            f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"
        )
        assert P.cpu_bfloat16_flag({P.CPUINFO_ENV: str(cpuinfo)}) == expected
    assert P.cpu_bfloat16_flag({P.CPUINFO_ENV: str(tmp_path / "missing")}) is None


@pytest.mark.parametrize("flags, expected", [("avx512f", "float32"), ("avx512f avx512_bf16", "bfloat16")])
def test_auto_follows_the_cpu_and_logs_the_choice(tmp_path, monkeypatch, capsys, flags, expected):
    import deepfm_container
    import deepfm_tuning

    (tmp_path / "cpuinfo").write_text(f"flags\t: {flags}\n")
    monkeypatch.setenv("DFM_CPUINFO", str(tmp_path / "cpuinfo"))
    monkeypatch.delenv("SM_NUM_GPUS", raising=False)
    compute = deepfm_tuning.configure_tensorflow(H.parse_hyperparameters([]), deepfm_container.load_env({}))
    assert compute.name == expected
    out = capsys.readouterr().out
    assert f"the MLP computes in {expected} (mixed_precision=auto" in out
    assert f"mixed_precision={'off' if expected == 'float32' else expected} " in out


def test_bfloat16_computes_the_mlp_in_bfloat16_and_keeps_every_variable_and_slot_float32():
    hp = small_hp(optimizer="adam", dropout=0.2)
    trainer = T.build_trainer(hp, compute_dtype=tf.bfloat16)
    assert trainer.loss_scale is None  # bfloat16 has float32's exponent range
    features, labels = random_batch(hp, rows=256, seed=4)
    graph = tf.function(trainer.train_step).get_concrete_function((features, labels)).graph
    matmuls = [op for op in graph.get_operations() if op.type in ("MatMul", "_MklMatMul", "BatchMatMulV2")]
    gathers = [op for op in graph.get_operations() if op.type in ("ResourceGather", "GatherV2")]
    assert matmuls and all(op.outputs[0].dtype == tf.bfloat16 for op in matmuls)
    assert gathers and all(op.outputs[0].dtype == tf.float32 for op in gathers)  # the lookups stay float32
    step = tf.function(trainer.train_step)
    losses = [float(step((features, labels)).numpy()) for _ in range(30)]
    assert losses[-1] < 0.9 * losses[0]  # it learns the batch
    slots = [v for per_variable in trainer.optimizer.slots for v in per_variable.values()]
    assert all(v.dtype == tf.float32 for v in trainer.model.all_variables)
    assert len(slots) == 2 * len(trainer.variables) and all(v.dtype == tf.float32 for v in slots)  # adam: m, v


def test_a_bfloat16_model_evaluates_in_float32_exactly_as_its_export_serves():
    """Evaluation picks the model to export (best_of): it must measure what the float32 export serves."""
    import deepfm_selection

    hp = small_hp(dropout=0.0)  # training and evaluation then differ only by the dtype
    trainer = T.build_trainer(hp, compute_dtype=tf.bfloat16)
    features, labels = random_batch(hp, seed=6)
    tf.function(trainer.train_step)((features, labels))
    copy = deepfm_selection.copy_model(trainer.model, hp)
    assert copy.compute_dtype == tf.float32
    served = copy.predict(features["ids"], features["values"]).numpy()
    np.testing.assert_array_equal(trainer.model.predict(features["ids"], features["values"]).numpy(), served)
    trained, _ = trainer.model(features["ids"], features["values"], training=True)
    assert not np.array_equal(tf.sigmoid(trained).numpy(), served)  # training steps really are bfloat16


def test_a_step_s_metric_counts_added_later_match_the_metrics_it_would_have_updated():
    """A parameter-server closure sums its steps' counts and adds them once: the train metrics must end where
    updating them at every step would have left them."""
    hp = small_hp(dropout=0.0)
    batches = [random_batch(hp, seed=s) for s in (1, 2)]
    each, once = T.build_trainer(hp), T.build_trainer(hp)
    for a, b in zip(each.variables, once.variables):
        b.assign(a)
    for batch in batches:
        tf.function(each.train_step)(batch)
    counted = tf.function(once.train_step_counts)
    totals = [counted(batch) for batch in batches]
    assert not once.train_metrics.totals.numpy().any()  # a counted step leaves the metrics alone
    once.train_metrics.add(tuple(x + y for x, y in zip(*totals)))
    np.testing.assert_allclose(once.train_metrics.totals.numpy(), each.train_metrics.totals.numpy(), rtol=1e-6)
