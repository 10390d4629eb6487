"""The DeepFM implementations under test, each as a `run_window()` returning examples/s.

Both read the same synthetic examples from an in-memory tf.data iterator inside their compiled step,
so what is timed is the model's training step, not the input pipeline (item 3 measures that).
"""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np

from bench.common import seconds, use_entrypoints

FIELDS = 39
# Both steps regularized alike: L2 on the embedding rows looked up, dropout after each hidden layer, L2 on
# the MLP kernels (the bundled scripts' defaults; DeepCTR's l2_reg_embedding, dnn_dropout, l2_reg_dnn).
L2_EMBEDDING, DROPOUT, L2_DENSE = 1e-5, 0.2, 0.03


def synthetic(rows: int, feature_size: int, seed: int = 5):
    from launcher.data.synth import generate

    return generate(rows, seed=seed, field_size=FIELDS, feature_size=feature_size)


def _window(step, iterator, steps: int, batch: int):
    def run() -> float:
        def go():
            for _ in range(steps):
                loss = step(iterator)
            return loss.numpy() if hasattr(loss, "numpy") else loss

        return steps * batch / seconds(go)

    return run


def bundled(
    data,
    batch: int,
    embedding_size: int,
    steps: int,
    optimizer: str = "adagrad",
    dense_updates: bool = False,
    deep_layers=(400, 400, 400),
    compute_dtype: str = "float32",
    regularized: bool = True,
):
    """The entry points' DeepFM and Trainer.train_step (with its streaming metrics), regularized (L2_EMBEDDING,
    DROPOUT, L2_DENSE; regularized=False: none of them, to show what the regularization costs), stepped as a one-host
    run steps it: windows of `sync_check_steps` steps, each window
    one compiled loop with the in-step end-of-data check (deepfm_sync_steps.window_runner).

    dense_updates=True turns each embedding gradient into a dense tensor first, so the optimizer takes
    its dense path over the whole table (what Keras' stock Adam does to its moments).
    compute_dtype: the MLP's (mixed_precision float16/bfloat16); variables stay float32."""
    import tensorflow as tf

    use_entrypoints()
    from deepfm_collectives import SingleProcess
    from deepfm_hparams import parse_hyperparameters
    from deepfm_sync_steps import window_runner
    from deepfm_training import build_trainer

    hp = parse_hyperparameters(
        [
            "--feature_size",
            str(data.feature_size),
            "--embedding_size",
            str(embedding_size),
            "--deep_layers",
            ",".join(map(str, deep_layers)),
            "--batch_size",
            str(batch),
            "--optimizer",
            optimizer,
            "--l2_reg",
            str(L2_EMBEDDING if regularized else 0),
            "--dropout",
            str(DROPOUT if regularized else 0),
            "--l2_dense",
            str(L2_DENSE if regularized else 0),
        ]
    )
    densify = (
        (lambda grads: [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads])
        if dense_updates
        else None
    )
    trainer = build_trainer(hp, grad_transform=densify, compute_dtype=tf.as_dtype(compute_dtype))
    dataset = tf.data.Dataset.from_tensor_slices(({"ids": data.ids, "values": data.values}, data.labels)).batch(
        batch, drop_remainder=True
    )
    iterator = iter(dataset.cache().repeat())
    run_window = window_runner(tf.function(trainer.train_step), SingleProcess())
    run_window(iterator, hp.sync_check_steps)  # trace

    def run() -> float:
        def go():
            done = 0
            while done < steps:
                done += run_window(iterator, min(hp.sync_check_steps, steps - done))[0]

        return steps * batch / seconds(go)

    return run


def import_deepctr():
    """DeepCTR's package __init__ starts a thread that asks PyPI for a newer version (no network here,
    and it must not print or hang): load its modules without running that __init__."""
    if "deepctr" not in sys.modules:
        spec = importlib.util.find_spec("deepctr")
        if spec is None:
            raise ImportError("deepctr is not installed (make bench installs it)")
        package = types.ModuleType("deepctr")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["deepctr"] = package
    from deepctr.feature_column import SparseFeat
    from deepctr.models import DeepFM

    return DeepFM, SparseFeat


def deepctr(data, batch: int, embedding_size: int, steps: int, deep_layers=(400, 400, 400)):
    """DeepCTR's DeepFM, one SparseFeat per field (vocabulary = the field's id range, so the tables
    add up to the same rows), regularized as the bundled step, Adagrad(0.01), run through Keras' own
    compiled train function as fit does."""
    import tensorflow as tf

    DeepFM, SparseFeat = import_deepctr()
    local = data.ids - data.ids.min(axis=0)
    vocab = local.max(axis=0) + 1
    columns = [SparseFeat(f"f{i}", vocabulary_size=int(vocab[i]), embedding_dim=embedding_size) for i in range(FIELDS)]
    model = DeepFM(
        columns,
        columns,
        dnn_hidden_units=tuple(deep_layers),
        l2_reg_embedding=L2_EMBEDDING,
        l2_reg_dnn=L2_DENSE,
        dnn_dropout=DROPOUT,
        task="binary",
    )
    # DeepCTR 0.9.3 builds on tensorflow.python.keras (TF's legacy copy), so its optimizers come from there.
    from tensorflow.python.keras.optimizer_v2.adagrad import Adagrad

    model.compile(optimizer=Adagrad(0.01), loss="binary_crossentropy")
    features = {f"f{i}": local[:, i : i + 1].astype(np.int32) for i in range(FIELDS)}
    dataset = tf.data.Dataset.from_tensor_slices((features, data.labels[:, None])).batch(batch, drop_remainder=True)
    iterator = iter(dataset.cache().repeat())
    train_function = model.make_train_function()

    def step(it):
        return train_function(it)["loss"]

    step(iterator)
    return _window(step, iterator, steps, batch)
