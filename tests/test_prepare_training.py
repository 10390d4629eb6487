"""Prepared data trains: `dfm data prepare --local` then `dfm launch --local`, on synthetic click logs with a known
teacher: the same examples as `dfm data convert` writes, and calibrated probabilities after negative
downsampling."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
import spec_helpers
import yaml
from spec_helpers import LOCAL_BASE, write_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
dfm = functools.partial(spec_helpers.dfm, check=True, timeout=400)  # every step here must succeed

FIELDS, FEATURES = 10, 1000
# l2_dense 0.03: with Adam and no MLP regularization this small model overfits its
# 32k rows in 2 epochs, and an overfit model's mean prediction drifts from the rate whatever the export's
# correction does (measured: 0.228 against 0.255); the calibration test is about the correction.
MODEL = {
    "field_size": FIELDS,
    "feature_size": FEATURES,
    "batch_size": 256,
    "deep_layers": [32, 32],
    "embedding_size": 4,
    "log_steps": 50,
    "optimizer": "adam",
    "learning_rate": 0.003,
    "epochs": 2,
    "l2_dense": 0.03,
}


@pytest.fixture(scope="module")
def clicks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clicks")
    dfm(
        "data",
        "synth",
        "--format",
        "libsvm",
        "--out",
        str(out),
        "--rows",
        "40000",
        "--files",
        "4",
        "--eval-rows",
        "10000",
        "--eval-files",
        "2",
        "--seed",
        "11",
        "--field-size",
        str(FIELDS),
        "--feature-size",
        str(FEATURES),
    )
    return out


def prepared_spec(folder: Path, clicks: Path, channels: dict[str, Path], prepare: dict | None) -> Path:
    changes = {
        "name": folder.name,
        "output": "s3://dfm-test-bucket/out/",
        "distribution": "none",
        "data": {"mode": "File", "train": "s3://dfm-test-bucket/train/", "eval": "s3://dfm-test-bucket/eval/"},
        "hyperparameters": MODEL,
        "local": {
            "channels": {k: str(v) for k, v in channels.items()},
            "run_dir": str(folder / "runs"),
            "timeout_s": 600,
        },
    }
    if prepare is not None:
        changes["prepare"] = {
            "input": {"uri": "s3://dfm-test-bucket/clicks/", "format": "libsvm", "local": str(clicks / "train")},
            "eval": {"uri": "s3://dfm-test-bucket/clicks-eval/", "local": str(clicks / "eval")},
            "stats": False,
            "seed": 3,
            **prepare,
        }
    folder.mkdir(parents=True, exist_ok=True)
    return write_spec(folder, changes, base=LOCAL_BASE)


def final_auc(output: str) -> float:
    found = re.findall(r"final eval: .*?auc=([0-9.]+)", output)
    assert found, output[-2000:]
    return float(found[-1])


def prepared(tmp_path: Path, clicks: Path, name: str, prepare: dict) -> tuple[Path, float]:
    folder = tmp_path / name
    spec = prepared_spec(folder, clicks, {"train": folder / "data/train", "eval": folder / "data/eval"}, prepare)
    dfm("data", "prepare", str(spec), "--local")
    return folder, final_auc(dfm("launch", str(spec), "--local").stdout)


def records(folder: Path) -> np.ndarray:
    """A folder's examples as sorted rows of (label, ids, values): the same data whatever the order and files."""
    from launcher.data.tfrecord import read_examples

    labels, ids, values = read_examples(sorted(p for p in folder.iterdir() if p.is_file()), FIELDS)
    rows = np.concatenate([labels[:, None], ids.astype(np.float64), values], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def test_prepared_examples_are_the_converted_examples(tmp_path, clicks):
    folder = tmp_path / "prepared"
    spec = prepared_spec(folder, clicks, {"train": folder / "data/train", "eval": folder / "data/eval"}, {})
    dfm("data", "prepare", str(spec), "--local")
    for part in ("train", "eval"):
        converted = tmp_path / "converted" / part
        dfm("data", "convert", str(clicks / part), "--out", str(converted), "--field-size", str(FIELDS))
        mine, theirs = records(folder / "data" / part), records(converted)
        assert mine.shape == theirs.shape and mine.shape[0] > 0, (part, mine.shape, theirs.shape)
        assert np.array_equal(mine, theirs), part


def test_data_prepared_with_negative_downsampling_trains_to_a_calibrated_export(tmp_path, clicks):
    import tensorflow as tf

    from launcher.data.tfrecord import read_examples

    rate = 0.25
    folder, auc = prepared(tmp_path, clicks, "balanced", {"balance": {"negative_rate": rate}})
    assert auc > 0.7  # it learned something (the teacher's AUC is about 0.8)
    (model_dir,) = [p.parent for p in (folder / "runs").glob("*/hosts/algo-1/model/*/saved_model.pb")]
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    labels, ids, values = read_examples(sorted((folder / "data/eval").iterdir()), FIELDS)
    probabilities = serve(feat_ids=tf.constant(ids), feat_vals=tf.constant(values))["probabilities"].numpy()
    positive_rate = float(labels.mean())
    print(f"mean predicted CTR {probabilities.mean():.4f}, eval positive rate {positive_rate:.4f}, AUC {auc:.4f}")
    assert abs(probabilities.mean() - positive_rate) / positive_rate < 0.10, (probabilities.mean(), positive_rate)
    odds = probabilities / (1 - probabilities) / rate  # what the model said before the export's correction
    uncorrected = odds / (1 + odds)
    assert abs(uncorrected.mean() - positive_rate) / positive_rate > 0.3  # the correction is what made it right
    assert np.isfinite(probabilities).all()


def test_raw_tsv_prepared_as_examples_trains_with_a_tfrecord_features_section(tmp_path):
    import json

    raw = tmp_path / "raw"
    dfm(
        "data",
        "synth",
        "--format",
        "criteo-tsv",
        "--multi-hot",
        "recent_cats",
        "--rows",
        "16000",
        "--files",
        "2",
        "--out",
        str(raw),
        "--seed",
        "3",
        "--field-size",
        "10",
        "--feature-size",
        "2000",
    )
    meta = json.loads((raw / "meta.json").read_text())
    numeric = [c for c in meta["columns"] if c.startswith("i")]
    categorical = [c for c in meta["columns"] if c.startswith("c") and c != meta["label"]]
    features = {
        "format": "tfrecord",
        "label": meta["label"],
        "numeric": {name: {"transform": "log1p"} for name in numeric},
        "categorical": {name: {"hash_buckets": 1000} for name in categorical},
        "multi_hot": {"recent_cats": {"separator": "|", "hash_buckets": 1000, "max_length": 20}},
    }
    folder = tmp_path / "raw-prepared"
    spec = prepared_spec(folder, raw, {"train": folder / "data/train", "eval": folder / "data/eval"}, None)
    data = yaml.safe_load(spec.read_text())
    data["hyperparameters"] = {k: v for k, v in MODEL.items() if k not in ("field_size", "feature_size")}
    data["features"] = features
    data["prepare"] = {
        "input": {
            "uri": "s3://dfm-test-bucket/raw/",
            "format": "tsv",
            "columns": meta["columns"],
            "local": str(raw / "train"),
        },
        "eval_fraction": 0.2,
    }
    spec.write_text(yaml.safe_dump(data))
    dfm("data", "prepare", str(spec), "--local")
    proposal = yaml.safe_load((folder / "data/prepare/features.yaml").read_text())["features"]
    assert set(proposal["numeric"]) == set(numeric) and proposal["multi_hot"]["recent_cats"]["max_length"] <= 20
    auc = final_auc(dfm("launch", str(spec), "--local").stdout)
    print(f"raw prepared eval AUC {auc:.4f} (teacher {meta['teacher_auc']:.4f})")
    assert auc > 0.7
