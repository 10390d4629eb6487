"""The baselines the quality item sets dfm's recipe beside, on the same split: logistic regression (scikit-learn,
one-hot tokens) and DeepCTR's DeepFM (per-field indices); and how each reads the samples.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

LR_C = 0.1  # logistic regression's inverse L2 strength (the best of 0.03 / 0.1 / 0.3 on the demo sample)


def indexed(folder: Path, fields: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids [rows, fields], values, labels) of a pre-indexed TFRecord folder."""
    import tensorflow as tf

    files = sorted(str(p) for p in folder.iterdir() if not p.name.startswith((".", "_")))
    spec = {
        "label": tf.io.FixedLenFeature([], tf.float32),
        "ids": tf.io.FixedLenFeature([fields], tf.int64),
        "values": tf.io.FixedLenFeature([fields], tf.float32),
    }
    parts = [tf.io.parse_example(batch, spec) for batch in tf.data.TFRecordDataset(files).batch(65536)]
    return tuple(np.concatenate([p[k].numpy() for p in parts]) for k in ("ids", "values", "label"))


def tokens(folder: Path) -> tuple[list[list[str]], list[list[str]], np.ndarray]:
    """Raw TSV rows -> (one token per single-valued column, the multi-hot column's tokens, labels)."""
    singles, bags, labels = [], [], []
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "_")):
            continue
        with open(path, newline="") as handle:
            for row in csv.reader(handle, delimiter="\t"):
                labels.append(float(row[0]))
                singles.append([f"{i}={value}" for i, value in enumerate(row[1:40])])
                bags.append([f"bag={v}" for v in row[40].split("|") if v] if len(row) > 40 else [])
    return singles, bags, np.asarray(labels, np.float32)


def one_hot(rows: list[list[tuple[str, float]]], vocabulary: dict | None = None):
    """Rows of (token, weight) -> CSR matrix (tokens unknown to a given vocabulary dropped) and the
    vocabulary (built from these rows when none is given)."""
    from scipy.sparse import csr_matrix

    grow = vocabulary is None
    vocabulary = {} if grow else vocabulary
    indptr, indices, data = [0], [], []
    for tokens in rows:
        for token, weight in tokens:
            index = vocabulary.setdefault(token, len(vocabulary)) if grow else vocabulary.get(token)
            if index is not None:
                indices.append(index)
                data.append(weight)
        indptr.append(len(indices))
    return csr_matrix((data, indices, indptr), shape=(len(rows), max(len(vocabulary), 1))), vocabulary


def one_hot_ids(train_ids, eval_ids):
    """-> (train, eval) one-hot matrices of id rows, eval's columns those of train's vocabulary."""
    train_x, vocabulary = one_hot([[(str(i), 1.0) for i in row] for row in train_ids])
    eval_x, _ = one_hot([[(str(i), 1.0) for i in row] for row in eval_ids], vocabulary)
    return train_x, eval_x


def weighted(singles: list[list[str]], bags: list[list[str]]) -> list[list[tuple[str, float]]]:
    """Single-valued tokens weigh 1; a multi-hot bag's tokens 1/length (its mean, as the recipe pools it)."""
    return [[(t, 1.0) for t in one] + [(t, 1.0 / len(bag)) for t in bag] for one, bag in zip(singles, bags)]


def logistic_regression(train_x, train_y, eval_x, eval_y) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    model = LogisticRegression(C=LR_C, max_iter=300, solver="lbfgs").fit(train_x, train_y)
    return float(roc_auc_score(eval_y, model.predict_proba(eval_x)[:, 1]))


def deepctr_per_epoch(train_ids, train_y, eval_ids, eval_y, settings: dict, epochs: int = 3) -> list[float]:
    """DeepCTR's DeepFM on per-field indices (vocabulary = the field's id range); eval AUC after each epoch.
    Stepped through `make_train_function` as `fit` steps it (DeepCTR 0.9.3's `fit` fails on TF 2.14)."""
    import tensorflow as tf
    from sklearn.metrics import roc_auc_score
    from tensorflow.python.keras.optimizer_v2.adam import Adam

    from bench.contenders import import_deepctr

    DeepFM, SparseFeat = import_deepctr()
    tf.random.set_seed(0)
    low = np.minimum(train_ids.min(axis=0), eval_ids.min(axis=0))
    vocab = np.maximum(train_ids.max(axis=0), eval_ids.max(axis=0)) - low + 1
    columns = [SparseFeat(f"f{i}", vocabulary_size=int(vocab[i]), embedding_dim=8) for i in range(len(vocab))]
    model = DeepFM(
        columns,
        columns,
        dnn_hidden_units=settings["layers"],
        l2_reg_embedding=1e-5,
        l2_reg_dnn=settings["l2_dnn"],
        dnn_dropout=settings["dropout"],
        task="binary",
        seed=0,
    )
    model.compile(optimizer=Adam(settings["lr"]), loss="binary_crossentropy")

    def inputs(ids):
        return {f"f{i}": (ids[:, i : i + 1] - low[i]).astype(np.int32) for i in range(len(vocab))}

    batch, steps = settings["batch"], len(train_y) // settings["batch"]
    dataset = tf.data.Dataset.from_tensor_slices((inputs(train_ids), train_y[:, None]))
    iterator = iter(dataset.shuffle(len(train_y), seed=0).batch(batch, drop_remainder=True).repeat())
    train_function = model.make_train_function()
    eval_in, aucs = inputs(eval_ids), []
    for _ in range(epochs):
        for _ in range(steps):
            train_function(iterator)
        probs = np.concatenate(
            [
                model({k: v[i : i + 8192] for k, v in eval_in.items()}, training=False).numpy()[:, 0]
                for i in range(0, len(eval_y), 8192)
            ]
        )
        aucs.append(float(roc_auc_score(eval_y, probs)))
    return aucs
