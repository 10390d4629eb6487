"""Item 3: input pipeline records/s: per-record vs batch-then-parse, cache, File vs Pipe (a real FIFO)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from bench.common import add_table, alternate, fmt, median, seconds, section, verdict

FIELDS = 39
BATCH = 512


def _spec(tf):
    return {
        "label": tf.io.FixedLenFeature([], tf.float32),
        "ids": tf.io.FixedLenFeature([FIELDS], tf.int64),
        "values": tf.io.FixedLenFeature([FIELDS], tf.float32),
    }


def _parsed(tf, records, per_record: bool, shuffle: int = 0):
    spec, autotune = _spec(tf), tf.data.AUTOTUNE
    if shuffle:
        records = records.shuffle(shuffle)
    if per_record:
        return (
            records.map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=autotune)
            .batch(BATCH)
            .prefetch(autotune)
        )
    return (
        records.batch(BATCH).map(lambda b: tf.io.parse_example(b, spec), num_parallel_calls=autotune).prefetch(autotune)
    )


def _drain(dataset) -> int:
    count = 0
    for batch in dataset:
        labels = batch[1] if isinstance(batch, tuple) else batch["label"]
        count += int(labels.shape[0])
    return count


class _Fifo:
    """A named pipe fed with the files' bytes by a thread, as SageMaker's Pipe mode feeds a channel."""

    def __init__(self, root: Path, channel: str, files: list[Path]):
        self.root = root
        for folder in ("pipes", "state", "config"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        (root / "config" / "inputdataconfig.json").write_text(
            json.dumps({channel: {"TrainingInputMode": "Pipe", "RecordWrapperType": "None"}})
        )
        self.path = root / "pipes" / f"{channel}_0"
        os.mkfifo(self.path)
        self.thread = threading.Thread(target=self._feed, args=(files,), daemon=True)
        self.thread.start()

    def _feed(self, files: list[Path]) -> None:
        with open(self.path, "wb") as pipe:
            for path in files:
                pipe.write(path.read_bytes())


def _pipe_reader():
    try:
        from sagemaker_tensorflow import PipeModeDataset
    except Exception:  # not installed, or its op does not load on this TensorFlow
        return None
    return PipeModeDataset


def measure(quick: bool, context: dict) -> dict:
    import tensorflow as tf

    from launcher.data.synth import generate
    from launcher.data.synth_files import write_tfrecords

    rows = 40_960 if quick else 204_800
    repetitions = context.get("repetitions") or (3 if quick else 7)
    result = section(
        "Input pipeline",
        "the pipeline never limits training: records/s above the fastest training examples/s of item 1, with margin",
        f"tf.data over {rows:,} synthetic TFRecords (39 fields, 8 files) in batches of {BATCH}, "
        "drained in Python; `bench/pipeline.py`",
    )
    PipeModeDataset = _pipe_reader()
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-pipeline-"))
    files = write_tfrecords(work / "data" / "train", generate(rows, seed=11), files=8)
    names = [str(p) for p in files]

    def file_run(per_record: bool, shuffle: int = 0):
        return lambda: rows / seconds(lambda: _drain(_parsed(tf, tf.data.TFRecordDataset(names), per_record, shuffle)))

    def cached_run(per_record: bool):
        dataset = _parsed(tf, tf.data.TFRecordDataset(names).cache(), per_record)
        _drain(dataset)  # the first epoch fills the cache; later epochs are what cache buys
        return lambda: rows / seconds(lambda: _drain(dataset))

    pipe_runs = {"n": 0}

    def pipe_run(per_record: bool):
        def run() -> float:
            pipe_runs["n"] += 1
            root = work / f"pipe-{pipe_runs['n']}"
            fifo = _Fifo(root, "train", files)
            if PipeModeDataset is not None:
                records = PipeModeDataset(
                    "train",
                    record_format="TFRecord",
                    pipe_dir=str(root / "pipes"),
                    state_dir=str(root / "state"),
                    config_dir=str(root / "config"),
                )
            else:
                records = tf.data.TFRecordDataset(str(fifo.path))
            rate = rows / seconds(lambda: _drain(_parsed(tf, records, per_record)))
            fifo.thread.join(timeout=60)
            return rate

        return run

    def bundled_run(mode: str, cache: bool):
        """The entry points' own `make_dataset` (shuffle buffer 10000, batch, parse, prefetch)."""
        from bench.common import use_entrypoints

        use_entrypoints()
        from deepfm_input import InputConfig, make_dataset

        def build(root: Path):
            return make_dataset(
                InputConfig(
                    field_size=FIELDS,
                    batch_size=BATCH,
                    cache=cache,
                    input_mode=mode,
                    data_dir=str(root / ("pipes" if mode == "Pipe" else "data")),
                    config_dir=str(root / "config"),
                    pipe_state_dir=str(root / "state"),
                ),
                ["train"],
                training=True,
                epochs=1,
            )

        if mode == "File":
            dataset = build(work)
            if cache:
                _drain(dataset)
            return lambda: rows / seconds(lambda: _drain(dataset))

        def run() -> float:
            pipe_runs["n"] += 1
            root = work / f"pipe-{pipe_runs['n']}"
            fifo = _Fifo(root, "train", files)
            rate = rows / seconds(lambda: _drain(build(root)))
            fifo.thread.join(timeout=60)
            return rate

        return run

    contenders = {
        ("File", "per record", "no"): file_run(True),
        ("File", "batch then parse", "no"): file_run(False),
        ("File", "shuffle 10000, batch then parse", "no"): file_run(False, shuffle=10_000),
        ("File", "per record", "yes (epoch 2+)"): cached_run(True),
        ("File", "batch then parse", "yes (epoch 2+)"): cached_run(False),
        ("Pipe", "per record", "no"): pipe_run(True),
        ("Pipe", "batch then parse", "no"): pipe_run(False),
    }
    try:
        contenders.update(
            {
                ("File", "bundled `make_dataset`", "no"): bundled_run("File", False),
                ("File", "bundled `make_dataset`", "yes (epoch 2+)"): bundled_run("File", True),
                ("Pipe", "bundled `make_dataset`", "no"): bundled_run("Pipe", False),
            }
        )
    except ImportError as err:
        result["notes"].append(f"bundled pipeline not measured: {err}")
    try:
        rates = {key: median(values) for key, values in alternate(contenders, repetitions).items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    training = context.get("training", {}).get("best_bundled_examples_per_s")
    need = training if training else float("nan")
    per_record = rates[("File", "per record", "no")]
    rows_out = []
    for (source, parse, cache), rate in rates.items():
        rows_out.append(
            [
                source,
                parse,
                cache,
                fmt(rate),
                fmt(rate / per_record, 1) + "x",
                fmt(rate / need, 1) + "x" if training else "n/a",
            ]
        )
    add_table(
        result,
        ["source", "parse", "cache", "records/s (median)", "vs per-record File", "margin over training"],
        rows_out,
    )

    reader = (
        "`sagemaker_tensorflow.PipeModeDataset`"
        if PipeModeDataset is not None
        else "`tf.data.TFRecordDataset` over the FIFO path (sagemaker_tensorflow not importable)"
    )
    result["notes"] += [
        f"Pipe: a real FIFO `train_0` fed by a writer thread with the 8 files' bytes back to back, read by {reader}.",
        "Cache rows: `TFRecordDataset(...).cache()` before batching; the first epoch fills it and is not timed.",
        f"{repetitions} alternating repetitions of one full pass each; margin = records/s / the fastest "
        "bundled-DeepFM examples/s of item 1" + (f" ({fmt(training)})." if training else " (item 1 gave none)."),
    ]
    bundled_file = rates.get(("File", "bundled `make_dataset`", "no"))
    same_order = rates[("File", "shuffle 10000, batch then parse", "no")]
    if bundled_file:
        result["notes"].append(
            f"The bundled File pipeline runs at {bundled_file / same_order:.2f}x of the same order without its "
            "in-graph sharding (`shuffle 10000, batch then parse` row): what falls short of 1 is the cost of its "
            "shard step (file-level, else record-level)."
        )
    judged = [key for key in rates if "bundled" in key[1] and key[2] == "no"] or [
        key for key in rates if key[1] == "batch then parse" and key[2] == "no"
    ]
    slowest_key = min(judged, key=lambda key: rates[key])
    slowest = rates[slowest_key]
    what = f"slowest of {', '.join(f'{k[0]} {k[1]}' for k in judged)} (no cache)"
    if training:
        verdict(
            result,
            "pipeline faster than training, with margin",
            slowest > training,
            f"{what}: {fmt(slowest)} records/s = {fmt(slowest / training, 1)}x the fastest training rate "
            f"({fmt(training)} examples/s)",
        )
    else:
        verdict(
            result,
            "pipeline faster than training",
            None,
            f"{what}: {fmt(slowest)} records/s; item 1 gave no training rate",
        )
    result["data"] = {
        "records_per_s": {" / ".join(key): value for key, value in rates.items()},
        "pipe_reader": "PipeModeDataset" if PipeModeDataset is not None else "TFRecordDataset",
    }
    return result
