"""The training step on raw features against the pre-indexed one, and raw text to trained steps end to end.

Three contenders, the bundled Trainer.train_step with the same MLP, embedding size, optimizer and batch:
- pre-indexed: the seed's layout (39 (id, value) fields), batches from memory;
- raw, step only: the criteo-tsv rows parsed and transformed once, cached in memory (13 numeric + 26
  categorical slots and a 20-slot multi-hot bag pooled into one field embedding: 59 slots, 40 fields);
- raw, end to end: text lines -> parse -> hash -> step, nothing cached (the pipeline and the step share
  the 2 cores, as on a worker).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from bench.common import add_table, alternate, fmt, median, seconds, section, use_entrypoints, verdict
from bench.contenders import FIELDS, synthetic
from bench.raw_pipeline import write_data

BATCH = 1024
EMBEDDING = 8
LAYERS = "400,400,400"


def _trainer(extra: list[str]):
    from deepfm_hparams import parse_hyperparameters
    from deepfm_training import build_trainer

    hp = parse_hyperparameters(
        [
            "--embedding_size",
            str(EMBEDDING),
            "--deep_layers",
            LAYERS,
            "--batch_size",
            str(BATCH),
            "--optimizer",
            "adagrad",
            *extra,
        ]
    )
    return hp, build_trainer(hp)


def _stepper(trainer, dataset, steps: int):
    import tensorflow as tf

    iterator = iter(dataset)

    @tf.function
    def step(it):
        return trainer.train_step(next(it))

    step(iterator)  # trace

    def window() -> float:
        def go():
            for _ in range(steps):
                loss = step(iterator)
            return loss.numpy()

        return steps * BATCH / seconds(go)

    return window


def contenders(files: list[str], features: dict, steps: int) -> dict:
    import tensorflow as tf

    use_entrypoints()
    import deepfm_raw as R

    raw_hp, raw_trainer = _trainer(["--features", json.dumps(features)])
    spec = raw_hp.feature_spec
    transformed = R.raw_dataset(files, spec, BATCH, transform=R.FeatureTransform(spec), drop_remainder=True)
    # the step sees only ids and values (the bad-row count stays with the input pipeline)
    cached = transformed.map(lambda f, y: ({"ids": f["ids"], "values": f["values"]}, y)).cache()
    for _ in cached:  # one full pass fills the cache, so the timed windows read memory only
        pass
    in_memory = cached.repeat()
    end_to_end = R.raw_dataset(files, spec, BATCH, transform=R.FeatureTransform(spec), drop_remainder=True, epochs=0)

    data = synthetic(BATCH * 32, raw_hp.feature_size)
    _, indexed_trainer = _trainer(["--feature_size", str(data.feature_size), "--field_size", str(FIELDS)])
    indexed = tf.data.Dataset.from_tensor_slices(({"ids": data.ids, "values": data.values}, data.labels))
    indexed = indexed.batch(BATCH, drop_remainder=True).cache().repeat()
    return {
        "pre-indexed (39 fields)": _stepper(indexed_trainer, indexed, steps),
        "raw features, step only (59 slots -> 40 fields)": _stepper(raw_trainer, in_memory, steps),
        "raw text end to end (parse + hash + step)": _stepper(raw_trainer, end_to_end, steps),
    }


def measure(quick: bool, context: dict) -> dict:
    rows = 65_536 if quick else 262_144
    steps = 16 if quick else 48
    repetitions = context.get("repetitions") or (3 if quick else 5)
    result = section(
        "Training on raw features",
        "recorded: the raw-feature step against the pre-indexed one",
        f"bundled Trainer.train_step, batch {BATCH}, embedding {EMBEDDING}, MLP {LAYERS}, Adagrad; "
        f"criteo-tsv synth ({rows:,} rows, 8 files); {steps} steps per timed window; "
        "`bench/raw_training.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-raw-training-"))
    try:
        files, features = write_data(work / "train", rows)
        rates = {
            name: median(values) for name, values in alternate(contenders(files, features, steps), repetitions).items()
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rates["pre-indexed (39 fields)"]
    add_table(
        result,
        ["input", "examples/s (median)", "vs pre-indexed"],
        [[name, fmt(rate), fmt(rate / base, 2) + "x"] for name, rate in rates.items()],
    )
    step_only, whole = (rates[k] for k in list(rates)[1:])
    verdict(
        result,
        "raw-feature step vs pre-indexed",
        None,
        f"step only {fmt(step_only / base, 2)}x, end to end {fmt(whole / base, 2)}x the pre-indexed step",
    )
    result["notes"].append(
        "The raw step is wider (59 slots, a segment sum pooling the bag's 20 slots); end to "
        "end adds parsing and hashing on the same 2 cores."
    )
    result["data"] = {"examples_per_s": rates}
    return result


if __name__ == "__main__":  # python -m bench.raw_training [--quick]
    import sys

    from bench.common import quiet_tensorflow

    quiet_tensorflow()
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
