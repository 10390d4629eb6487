"""`dfm data inspect FILE`: a proposed `features:` section from a sample of TSV or CSV text."""

import csv
import gzip
import json

import numpy as np
import pytest
import yaml

from launcher.cli import main
from launcher.data import inspect


def _inspect(capsys, *argv):
    assert main(["data", "inspect", *map(str, argv)]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    out = tmp_path_factory.mktemp("criteo")
    assert (
        main(
            [
                "data",
                "synth",
                "--format",
                "criteo-tsv",
                "--out",
                str(out),
                "--rows",
                "3000",
                "--seed",
                "2",
                "--multi-hot",
                "recent_cats",
            ]
        )
        == 0
    )
    return out / "train" / "part-00000.tsv", json.loads((out / "meta.json").read_text())


def assert_powers_of_two_to(entry: dict, largest: float) -> None:
    """bucketize at 1, 3, 7, ... (2^k - 1), the last boundary the first at or above the sample's largest count."""
    boundaries = entry["boundaries"]
    assert entry["transform"] == "bucketize" and boundaries == [2**k - 1 for k in range(1, len(boundaries) + 1)]
    assert boundaries[-1] >= largest and (len(boundaries) == 1 or boundaries[-2] < largest), (boundaries, largest)


def test_synth_output_gets_13_bucketized_counts_26_categoricals_and_the_bag(criteo, capsys):
    path, meta = criteo
    text = _inspect(capsys, path)
    features = yaml.safe_load(text)["features"]
    assert features["format"] == "tsv" and features["label"] == "col0"
    assert features["columns"] == [f"col{k}" for k in range(41)]
    assert list(features["numeric"]) == [f"col{k}" for k in range(1, 14)]
    stats = json.loads(_inspect(capsys, path, "--output", "json"))["stats"]
    for name, entry in features["numeric"].items():
        assert_powers_of_two_to(entry, stats[name]["max"])
    assert list(features["categorical"]) == [f"col{k}" for k in range(14, 40)]
    assert all(entry["hash_buckets"] in {2**k for k in range(4, 21)} for entry in features["categorical"].values())
    bag = features["multi_hot"]["col40"]
    assert (bag["separator"], bag["pooling"]) == ("|", "mean")
    assert 5 <= bag["max_length"] <= meta["multi_hot"]["max_length"]
    assert bag["hash_buckets"] >= meta["multi_hot"]["vocabulary"]
    assert "% missing" in text and "(tab-separated, no header)" in text

    named = _inspect(capsys, path, "--columns", ",".join(meta["columns"]), "--output", "json")
    proposal = json.loads(named)
    assert proposal["features"]["label"] == "clicked" and "recent_cats" in proposal["features"]["multi_hot"]
    assert proposal["stats"]["i1"]["kind"] == "integer" and proposal["stats"]["i1"]["min"] >= 0
    assert 0.0 < proposal["stats"]["c1"]["missing"] < 0.2 and proposal["sample"]["rows"] == 3000


def test_a_header_line_names_the_columns(criteo, tmp_path, capsys):
    path, meta = criteo
    with_header = tmp_path / "with-header.tsv"
    with_header.write_text("\t".join(meta["columns"]) + "\n" + path.read_text())
    features = yaml.safe_load(_inspect(capsys, with_header, "--rows", "500"))["features"]
    assert features["columns"] == meta["columns"] and features["label"] == "clicked"
    assert set(features["numeric"]) == set(meta["columns"][1:14])
    # Forced off, the names are a data row: every column holds text now, so no label is found.
    assert main(["data", "inspect", str(with_header), "--no-header"]) == 2
    assert "--label" in capsys.readouterr().err


def _write_csv(path, rows=400, seed=0):
    rng = np.random.default_rng(seed)
    tags = [f"t{k}" for k in range(30)]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["user", "clicked", "price", "clicks", "is_mobile", "tags"])
        for r in range(rows):
            chosen = rng.choice(tags, size=rng.integers(1, 6))
            writer.writerow(
                [
                    f"u{rng.integers(50)}",
                    int(rng.random() < 0.3),
                    f"{rng.normal(0, 5):.3f}",
                    "" if r % 10 == 0 else int(rng.pareto(1.5) * 3),
                    int(rng.random() < 0.5),
                    ",".join(chosen),
                ]
            )


def test_csv_with_quoted_lists_and_a_label_that_is_not_first(tmp_path, capsys):
    path = tmp_path / "log.csv"
    _write_csv(path)
    out = json.loads(_inspect(capsys, path, "--output", "json"))
    features, stats = out["features"], out["stats"]
    assert (features["format"], features["label"]) == ("csv", "clicked")  # the first 0/1 column
    assert features["numeric"]["price"] == features["numeric"]["is_mobile"] == {"transform": "none"}
    assert_powers_of_two_to(features["numeric"]["clicks"], stats["clicks"]["max"])  # a count
    assert features["categorical"] == {"user": {"hash_buckets": 512}}  # 50 users x 10 -> 512
    assert features["multi_hot"]["tags"]["separator"] == ","
    assert features["multi_hot"]["tags"]["max_length"] == 5 and stats["tags"]["distinct"] == 30
    assert stats["clicks"]["missing"] == pytest.approx(0.1)
    assert stats["price"]["kind"] == "float" and stats["price"]["min"] < 0


def test_bucket_suggestions_are_powers_of_two_with_room_and_a_cap():
    assert [inspect.buckets(n) for n in (0, 1, 100, 103, 2_000_000)] == [16, 16, 1024, 2048, 1 << 20]


def test_a_few_ragged_rows_are_skipped_and_reported(tmp_path, capsys):
    path = tmp_path / "log.csv"
    _write_csv(path, rows=400)
    path.write_text(path.read_text() + "u1,1,2.0\n")
    text = _inspect(capsys, path)
    assert "skipped 1 rows with another field count" in text
    assert yaml.safe_load(text)["features"]["label"] == "clicked"


def _bad_inputs(tmp_path):
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("".join("1\t2\t3\n" if k % 10 else "1\t2\n" for k in range(1, 101)))
    binary = tmp_path / "data.tfrecord"
    binary.write_bytes(bytes(range(256)) * 4)
    packed = tmp_path / "data.tsv.gz"
    packed.write_bytes(gzip.compress(b"1\ta\n0\tb\n" * 50)[:-30])
    text = tmp_path / "notes.txt"
    text.write_text("just one column\nof prose\n")
    no_label = tmp_path / "no-label.tsv"
    no_label.write_text("3\ta\n4\tb\n")
    return [
        ([tmp_path / "absent.tsv"], "no such file"),
        ([tmp_path], "data.tfrecord: not a TFRecord file dfm can read"),  # a folder: its files as TFRecords
        ([binary], "not a TFRecord file dfm can read"),
        ([packed], "damaged gzip data"),
        ([ragged], "ragged.tsv:10: 2 fields, expected 3"),
        ([text], "no tab or comma"),
        ([no_label], "--label"),
        ([no_label, "--label", "c9"], "is not a column"),
        ([no_label, "--columns", "a,b,c"], "--columns names 3 columns"),
    ]


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    for argv, message in _bad_inputs(tmp_path):
        assert main(["data", "inspect", *map(str, argv)]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_skewed_fractions_get_log1p_and_counts_get_buckets(tmp_path, capsys):
    rng = np.random.default_rng(4)
    path = tmp_path / "spend.tsv"
    path.write_text(
        "".join(
            f"{int(rng.random() < 0.3)}\t{rng.pareto(1.5) * 3:.3f}\t{int(rng.pareto(1.5) * 3)}\n" for _ in range(500)
        )
    )
    out = json.loads(_inspect(capsys, path, "--columns", "clicked,spend,visits", "--output", "json"))
    assert out["features"]["numeric"]["spend"] == {"transform": "log1p"}  # skewed, but not whole numbers
    assert_powers_of_two_to(out["features"]["numeric"]["visits"], out["stats"]["visits"]["max"])


def test_gzip_text_is_read_as_its_content(criteo, tmp_path, capsys):
    path, _ = criteo
    packed = tmp_path / "day_0.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    plain, compressed = yaml.safe_load(_inspect(capsys, path)), yaml.safe_load(_inspect(capsys, packed))
    assert compressed == plain and len(plain["features"]["categorical"]) == 26


def test_a_column_of_numbers_with_an_inf_is_categorical_with_a_note(tmp_path, capsys):
    path = tmp_path / "spend.tsv"
    path.write_text("".join(f"{k % 2}\t{'inf' if k == 7 else k * 1.5}\t{k}\n" for k in range(200)))
    assert main(["data", "inspect", str(path), "--columns", "clicked,spend,visits"]) == 0
    captured = capsys.readouterr()
    assert "spend" in yaml.safe_load(captured.out)["features"]["categorical"]
    assert "note: spend: categorical, not numeric: 1 sampled values are not finite (e.g. 'inf')" in captured.err
    assert "not finite" in [line for line in captured.out.splitlines() if line.strip().startswith("spend")][0]
    assert "note:" not in _inspect(capsys, path, "--columns", "clicked,spend,visits", "--output", "json")


@pytest.fixture(scope="module")
def synth_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    assert (
        main(
            [
                "data",
                "synth",
                "--out",
                str(out),
                "--rows",
                "300",
                "--files",
                "3",
                "--seed",
                "4",
                "--feature-size",
                "5000",
            ]
        )
        == 0
    )
    return out, json.loads((out / "meta.json").read_text())


def test_a_tfrecord_folder_is_summarized(synth_folder, capsys):
    out, meta = synth_folder
    assert main(["data", "inspect", str(out / "train"), "-o", "json", "--feature-size", "5000"]) == 0
    summary = json.loads(capsys.readouterr().out)
    files = sorted((out / "train").glob("*.tfrecord"))
    assert summary["files"] == 3 == len(files) and summary["bytes"] == sum(f.stat().st_size for f in files)
    assert summary["rows"] == 300 and summary["fields"] == ["ids", "label", "values"]
    assert summary["ids_per_row"] == [meta["field_size"]]
    assert 0 <= summary["ids"]["min"] <= summary["ids"]["max"] < 5000 and summary["ids"]["out_of_range"] == 0
    assert summary["label_rate"] == pytest.approx(meta["positive_rate"]) and summary["labels_not_0_or_1"] == 0


def test_ids_past_feature_size_are_counted_and_the_text_says_the_fix(synth_folder, capsys):
    out, _ = synth_folder
    assert main(["data", "inspect", str(out / "train" / "part-00000.tfrecord"), "--feature-size", "10"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{out / 'train' / 'part-00000.tfrecord'}: 100 rows in 1 files")
    assert "ids outside 0..9: raise feature_size" in text and "positive" in text


def test_the_readmes_raw_path_inspect_appended_to_an_init_spec_validates(criteo, capsys, tmp_path, monkeypatch):
    """README "Your data": `dfm init`, then `dfm data inspect FILE --columns ... >> spec`, then `dfm validate`."""
    path, meta = criteo
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(tmp_path / "no-sagemaker-config.yaml"))
    spec = tmp_path / "my-job.yaml"
    assert main(["init", "ps", "-o", str(spec), "--role", "arn:aws:iam::111122223333:role/r", "--bucket", "b-1"]) == 0
    capsys.readouterr()
    with spec.open("a") as handle:
        handle.write(_inspect(capsys, path, "--columns", ",".join(meta["columns"])))
    assert main(["validate", str(spec)]) == 0
    err = capsys.readouterr().err
    assert "hyperparameters.feature_size: not used with features:" in err and "error" not in err
    spec.write_text("\n".join(line for line in spec.read_text().splitlines() if "feature_size:" not in line))
    assert main(["validate", str(spec)]) == 0
    assert "feature_size" not in capsys.readouterr().err


def _write_records(path, labels, field_size=3):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for label in labels:
            feature = {
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label])),
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(field_size)))),
                "values": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * field_size)),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def test_a_zero_byte_file_is_said_to_be_empty(tmp_path, capsys):
    empty = tmp_path / "part-0.tfrecord"
    empty.write_bytes(b"")
    text = _inspect(capsys, empty)
    assert text.strip() == f"{empty}: 0 rows in 1 files: the file is empty (0 bytes)"
    assert "None" not in text
    (tmp_path / "part-1.tfrecord").write_bytes(b"")
    assert "every file is empty (2 of 0 bytes)" in _inspect(capsys, tmp_path)


def test_labels_outside_0_and_1_are_counted_apart_from_the_positive_rate(tmp_path, capsys):
    _write_records(tmp_path / "part-0.tfrecord", [0, 1, 2, -1, 7.5, 1, 0, 0])
    (tmp_path / "part-1.tfrecord").write_bytes(b"")
    text = _inspect(capsys, tmp_path)
    assert "labels   40.0% positive; 3 not 0 or 1" in text  # 2 of the 5 rows labelled 0 or 1
    assert f"empty    1 files of 0 bytes, e.g. {tmp_path / 'part-1.tfrecord'}" in text
    summary = json.loads(_inspect(capsys, tmp_path, "-o", "json"))
    assert summary["label_rate"] == pytest.approx(0.4) and summary["labels_not_0_or_1"] == 3
