"""A parameter-server worker's local steps (deepfm_local_steps): with one worker, a group of steps on the worker's
copy, added back once, leaves the weights, accumulators and metrics of as many ordinary steps."""

import numpy as np
import pytest

import entry_support  # noqa: F401  (entrypoints/ on the path)
import deepfm_hparams as H

tf = pytest.importorskip("tensorflow")
import deepfm_local_steps as L  # noqa: E402
import deepfm_training as T  # noqa: E402

pytestmark = pytest.mark.runtimes


def hp_with(**overrides):
    argv = [
        "--feature_size",
        "500",
        "--deep_layers",
        "[16, 8]",
        "--l2_reg",
        "0.01",
        "--l2_dense",
        "0.001",
        "--dropout",
        "0",
    ]
    for key, value in overrides.items():
        argv += [f"--{key}", str(value)]
    return H.parse_hyperparameters(argv)


def batches(hp, sizes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for rows in sizes:
        ids = rng.integers(0, 60, size=(rows, hp.field_size))  # ids repeat within and across batches
        out.append((ids, rng.random((rows, hp.field_size), np.float32), rng.integers(0, 2, rows).astype(np.float32)))
    return out


def state(trainer):
    slots = [value.numpy() for slots in trainer.optimizer.slots for value in slots.values()]
    return [var.numpy() for var in trainer.variables] + slots + [trainer.optimizer.iterations.numpy()]


@pytest.mark.parametrize("optimizer, dtype", [("adagrad", "float32"), ("sgd", "float32"), ("adagrad", "float16")])
def test_local_steps_of_one_worker_train_as_the_ordinary_steps(optimizer, dtype):
    hp = hp_with(optimizer=optimizer, learning_rate=0.2)
    data = batches(hp, [32, 32, 32, 17])  # a short last batch, as at the end of the data
    ordinary, local = (T.build_trainer(hp, compute_dtype=tf.as_dtype(dtype)) for _ in range(2))  # float16: loss scale
    step = tf.function(ordinary.train_step)
    for ids, values, labels in data:
        step(({"ids": tf.constant(ids), "values": tf.constant(values)}, tf.constant(labels)))
    group = tf.function(L.LocalSteps(local).run)
    counts = group(
        tf.constant(np.concatenate([b[0] for b in data])),
        tf.constant(np.concatenate([b[1] for b in data])),
        tf.constant(np.concatenate([b[2] for b in data])),
        tf.constant([len(b[2]) for b in data], tf.int32),
    )
    local.train_metrics.add(counts)
    tolerance = {"rtol": 2e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-3, "atol": 1e-4}
    for got, want in zip(state(local), state(ordinary)):
        np.testing.assert_allclose(got, want, **tolerance)
    assert not np.allclose(state(local)[0], T.build_trainer(hp).variables[0].numpy())  # the steps did train
    for got, want in zip(local.train_metrics.result(), ordinary.train_metrics.result()):
        assert got == pytest.approx(want, rel=1e-5)


def test_a_tables_rows_are_read_and_added_to_in_the_shard_that_holds_each():
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    shards = [tf.Variable(table[:4]), tf.Variable(table[4:])]
    dense = tf.Variable([1.0, 2.0])
    unique = tf.constant([7, 0, 3, 4, 9], tf.int64)
    by_shard = L._by_shard(shards, unique)
    pieces = [(shard, ids) for shard, (ids, _) in zip(shards, by_shard)] + [(dense, None)]
    *rows, value = L._fetch(pieces)
    np.testing.assert_array_equal(tf.dynamic_stitch([at for _, at in by_shard], rows).numpy(), table[unique.numpy()])
    np.testing.assert_array_equal(value.numpy(), [1.0, 2.0])
    L._send(pieces, [tf.ones_like(part) for part in rows] + [tf.constant([0.5, 0.5])])
    grown = table.copy()
    grown[unique.numpy()] += 1
    np.testing.assert_array_equal(np.concatenate([shard.numpy() for shard in shards]), grown)
    np.testing.assert_array_equal(dense.numpy(), [1.5, 2.5])


def test_local_steps_refuse_optimizers_that_change_rows_without_gradient():
    with pytest.raises(H.HyperparameterError, match="local_steps: .* set optimizer to adagrad or sgd"):
        hp_with(optimizer="adam", local_steps=4)
    assert "local_steps" not in dict(H.value_problems(hp_with(optimizer="adagrad", local_steps=4)))
