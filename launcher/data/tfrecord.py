"""TFRecord reading and writing for the DeepFM schema: `label` float, `ids` int64[F], `values` float[F].

TensorFlow is imported inside the functions: `dfm --help` must not pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np


def quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def serialize_examples(labels: np.ndarray, ids: np.ndarray, values: np.ndarray) -> Iterator[bytes]:
    """Yield one serialized tf.train.Example per row.

    One Example message is reused and its repeated fields overwritten: about 6x faster than building
    a fresh message per row, and byte-identical.
    """
    tf = quiet_tensorflow()
    example = tf.train.Example()
    feature = example.features.feature
    label_list = feature["label"].float_list.value
    id_list = feature["ids"].int64_list.value
    value_list = feature["values"].float_list.value
    label_list.append(0.0)
    for label, row_ids, row_values in zip(labels.tolist(), ids.tolist(), values.tolist()):
        label_list[0] = label
        id_list[:] = row_ids
        value_list[:] = row_values
        yield example.SerializeToString()


def write_records(path: Path, records: Iterable[bytes]) -> int:
    """Write serialized records to one TFRecord file; return how many."""
    tf = quiet_tensorflow()
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
            count += 1
    return count


class DamagedRecords(ValueError):
    """A file TensorFlow cannot read as TFRecords (truncated, corrupted, not TFRecords); the message is one line."""


def compression(path: Path) -> str:
    """TFRecordDataset's compression_type for the file: GZIP when it starts with gzip's magic bytes."""
    from launcher.data.textfile import is_gzip

    return "GZIP" if is_gzip(path) else ""


def _damaged(path: Path, err) -> DamagedRecords:
    """TensorFlow's DataLossError ('truncated record at 1634', 'corrupted record at 12') as one line naming the file."""
    import re

    found = re.search(r"(truncated|corrupted) record at (\d+)", err.message or "")
    where = f"{found.group(1)} record at byte {found.group(2)}" if found else (err.message or "").splitlines()[0]
    return DamagedRecords(f"{path}: not a complete TFRecord file ({where}); recreate it or leave it out")


def dataset(path: Path):
    """A TFRecordDataset of one file, plain or gzip."""
    tf = quiet_tensorflow()
    return tf.data.TFRecordDataset(str(path), compression_type=compression(path))


def count_records(paths: Iterable[Path]) -> int:
    """Records in the files, every file read to its end; DamagedRecords names the first that cannot be."""
    tf = quiet_tensorflow()
    total = 0
    for path in paths:
        try:
            total += int(dataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
        except tf.errors.OpError as err:
            raise _damaged(path, err) from None
    return total


def iter_raw_records(paths: Iterable[Path], batch: int = 4096) -> Iterator[bytes]:
    """Yield the serialized records of the files (plain or gzip) in order, without parsing them."""
    tf = quiet_tensorflow()
    for path in paths:
        try:
            for chunk in dataset(path).batch(batch).as_numpy_iterator():
                yield from chunk
        except tf.errors.OpError as err:
            raise _damaged(path, err) from None


def read_examples(paths: Iterable[Path], field_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse whole files into (labels float32[n], ids int64[n, F], values float32[n, F])."""
    tf = quiet_tensorflow()
    spec = {
        "label": tf.io.FixedLenFeature([], tf.float32),
        "ids": tf.io.FixedLenFeature([field_size], tf.int64),
        "values": tf.io.FixedLenFeature([field_size], tf.float32),
    }
    labels, ids, values = [], [], []
    for path in paths:
        dataset = tf.data.TFRecordDataset(str(path)).batch(4096).map(lambda b: tf.io.parse_example(b, spec))
        for batch in dataset.as_numpy_iterator():
            labels.append(batch["label"])
            ids.append(batch["ids"])
            values.append(batch["values"])
    if not labels:
        return (np.zeros(0, np.float32), np.zeros((0, field_size), np.int64), np.zeros((0, field_size), np.float32))
    return np.concatenate(labels), np.concatenate(ids), np.concatenate(values)
