"""Bad data never trains silently: labels outside {0, 1}, values that are not finite, records of another
field count or damaged bytes, an empty eval channel, and raw rows skipped past their bound each end the run
with exit 1 and one line naming the file, the record (line) and what is wrong."""

import json
import random

import pytest

import entry_support as es
from tf_records import script_lines
from test_entry_faults import HP, bad_data_host, exported

RAW_COLUMNS = ["clicked", "i1", "c1"]


def raw_features(bad_rows="skip"):
    return {
        "format": "tsv",
        "label": "clicked",
        "columns": RAW_COLUMNS,
        "numeric": {"i1": {"transform": "log1p"}},
        "categorical": {"c1": {"hash_buckets": 64}},
        "bad_rows": bad_rows,
    }


def raw_tfrecord_features(bad_rows):
    features = {**raw_features(bad_rows), "format": "tfrecord"}
    del features["columns"]
    return features


def raw_lines(rows, seed):
    rng = random.Random(seed)
    return [f"{rng.randint(0, 1)}\t{rng.randint(0, 50)}\tc{rng.randint(0, 20)}" for _ in range(rows)]


def run(tmp_path, hp, env):
    proc = es.start_script(tmp_path, "train_ps.py", hp, env, tmp_path / "run.log")
    proc.wait(timeout=240)
    return proc.returncode, (tmp_path / "run.log").read_text()


def shown(row):
    """A text row as the one-line error shows it: tabs escaped."""
    return row.replace("\t", "\\t")


def errors(log):
    return [line for line in script_lines(log.splitlines()) if "error" in line.lower()]


# ---- reasons, in process ----


@pytest.mark.runtimes
@pytest.mark.parametrize(
    "damage, reason",
    [
        ("field_size", r"row has 10 (ids|values), the spec's field_size is 39$"),
        ("random", r"corrupted record at byte 0: not a TFRecord file, or a damaged one"),
        ("flipped", r"corrupted record at byte \d+: not a TFRecord file, or a damaged one"),
        ("label", r"label 2 is not 0 or 1$"),
    ],
)
def test_a_bad_record_is_located_with_its_reason(tmp_path, damage, reason):
    import re

    import deepfm_data_errors as de
    import deepfm_hparams as H

    _, env, (good, other) = bad_data_host(tmp_path, field_size=10 if damage == "field_size" else 39)
    data = good.read_bytes()
    if damage == "random":
        other.write_bytes(random.Random(1).randbytes(len(data)))
    elif damage == "flipped":
        other.write_bytes(data[:300] + bytes([data[300] ^ 0x04]) + data[301:])
    elif damage == "label":
        import tensorflow as tf

        records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset([str(good)])]
        records[6].features.feature["label"].float_list.value[0] = 2.0
        with tf.io.TFRecordWriter(str(other)) as writer:
            for record in records:
                writer.write(record.SerializeToString())
    path, number, why = de.locate_bad_record(env, ["train"], de.record_reader(H.parse_hyperparameters([]), env))
    assert path == str(other) and number == (7 if damage == "label" else 1 if damage != "flipped" else number)
    assert re.search(reason, why), why
    assert "root error" not in why


# ---- the scripts ----


def labelled_host(tmp_path, labels_of, channel="train", values_of=None):
    """One host: good train (and eval) records, then the channel's file with some labels (values) replaced."""
    env = es.make_container(tmp_path, ["train", "eval"])
    train, evaluation = es.synth_split(600, 200, seed=3, feature_size=20000)
    es.write_tfrecords(tmp_path / "input/data/train", train, 1)
    es.write_tfrecords(tmp_path / "input/data/eval", evaluation, 1)
    target = evaluation if channel == "eval" else train
    for index, label in labels_of.items():
        target.labels[index] = label
    for index, value in (values_of or {}).items():
        target.values[index, 2] = value
    (bad,) = es.write_tfrecords(tmp_path / f"input/data/{channel}/b", target, 1)
    moved = tmp_path / f"input/data/{channel}" / f"b-{bad.name}"
    bad.rename(moved)
    (tmp_path / f"input/data/{channel}/b").rmdir()
    return env, moved


@pytest.mark.slow
@pytest.mark.parametrize("channel, label", [("train", 2.0), ("eval", -1.0)])
def test_a_label_outside_0_and_1_stops_the_run_naming_file_and_record(tmp_path, channel, label):
    env, bad = labelled_host(tmp_path, {41: label}, channel)
    code, log = run(tmp_path, HP, env)
    assert code == 1, log[-3000:]
    assert errors(log) == [f"[dfm] error: bad input data in {bad}: record 42: label {label:g} is not 0 or 1"], log[
        -3000:
    ]
    assert exported(tmp_path / "model") == []


@pytest.mark.slow
def test_a_value_that_is_not_finite_in_eval_stops_the_run(tmp_path):
    env, bad = labelled_host(tmp_path, {}, "eval", values_of={9: float("nan")})
    code, log = run(tmp_path, HP, env)
    assert code == 1, log[-3000:]
    assert errors(log) == [
        f"[dfm] error: bad input data in {bad}: record 10: value nan in field slot 2 is not a finite number"
    ], log[-3000:]
    assert "eval step=" not in log and exported(tmp_path / "model") == []


@pytest.mark.slow
def test_an_eval_channel_of_empty_files_fails_the_run(tmp_path):
    env = es.make_container(tmp_path, ["train", "eval"])
    train, _ = es.synth_split(600, 0, seed=3, feature_size=20000)
    es.write_tfrecords(tmp_path / "input/data/train", train, 1)
    (tmp_path / "input/data/eval/part-00000.tfrecord").write_bytes(b"")
    code, log = run(tmp_path, HP, env)
    assert code == 1, log[-3000:]
    (error,) = errors(log)
    assert (
        error.startswith("[dfm] error: the evaluation at step ")
        and "had 0 rows and loss nan: the eval channel" in error
    )
    assert exported(tmp_path / "model") == []


def raw_host(tmp_path, lines_of):
    env = es.make_container(tmp_path, ["train"])
    paths = []
    for name, lines in lines_of.items():
        path = tmp_path / "input/data/train" / name
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return env, paths


RAW_HP = {**HP, "batch_size": 32, "log_steps": 50}


@pytest.mark.slow
def test_raw_rows_skipped_past_the_bound_fail_the_run_naming_the_first(tmp_path):
    good = raw_lines(400, seed=1)
    bad = [line + "\textra" for line in raw_lines(50, seed=2)] + ["2\t3\tc1", "-1\t3\tc1"]  # 52 bad rows
    env, (_, second) = raw_host(tmp_path, {"a.tsv": good, "b.tsv": good[:100] + bad})
    code, log = run(tmp_path, {**RAW_HP, "features": json.dumps(raw_features())}, env)
    assert code == 1, log[-3000:]
    assert "[dfm] bad rows skipped: 52" in log
    assert errors(log) == [
        "[dfm] error: too many bad rows in channel train: 52 of 552 rows read (9.4%) were bad, more than "
        f"features.bad_rows.max_fraction 0.01; the first: {second}: line 101: row has 4 columns, not the 3 of "
        f"features.columns: {shown(bad[0])}"
    ], log[-3000:]
    assert exported(tmp_path / "model") == []
    bounded = raw_features({"skip": True, "max_fraction": 0.1})
    code, log = run(tmp_path, {**RAW_HP, "features": json.dumps(bounded)}, env)
    assert code == 0, log[-3000:]
    assert "[dfm] bad rows skipped: 52" in log and not errors(log)


@pytest.mark.slow
def test_raw_rows_all_bad_fail_the_run(tmp_path):
    rows = [line + "\textra" for line in raw_lines(300, seed=3)]
    env, (path,) = raw_host(tmp_path, {"a.tsv": rows})
    code, log = run(tmp_path, {**RAW_HP, "features": json.dumps(raw_features())}, env)
    assert code == 1, log[-3000:]
    (error,) = errors(log)
    assert error.startswith("[dfm] error: ") and f"{path}: line 1: row has 4 columns" in error, log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad, why",
    [
        ("1\t3\tc1\textra", "row has 4 columns, not the 3 of features.columns"),
        ("7.5\t3\tc1", "label 7.5 is not 0 or 1"),
        ("1\tabc\tc1", "column i1 value abc is not a number"),
        ("x\t3\tc1", "label x is not a number"),
    ],
)
def test_raw_bad_rows_fail_names_file_line_and_reason(tmp_path, bad, why):
    good = raw_lines(200, seed=4)
    env, (_, second) = raw_host(tmp_path, {"a.tsv": good, "b.tsv": good[:57] + [bad] + good})
    code, log = run(tmp_path, {**RAW_HP, "features": json.dumps(raw_features({"skip": False}))}, env)
    assert code == 1, log[-3000:]
    assert errors(log) == [f"[dfm] error: bad input data in {second}: line 58: {why}: {shown(bad)}"], log[-3000:]


def test_bad_rows_takes_a_bound_and_keeps_its_string_forms():
    import deepfm_features as F

    def policy(value):
        spec = F.spec_from_dict(raw_features(value))
        return spec.bad_rows, spec.max_bad_fraction

    assert policy("skip") == ("skip", F.DEFAULT_MAX_BAD_FRACTION) == ("skip", 0.01)
    assert policy("fail")[0] == "fail" and policy({"skip": False})[0] == "fail"
    assert policy({"skip": True, "max_fraction": 0.2}) == ("skip", 0.2) == policy({"max_fraction": 0.2})


@pytest.mark.runtimes
def test_raw_labels_outside_0_and_1_are_bad_rows_in_text_and_examples():
    import tensorflow as tf

    import deepfm_features as F
    import deepfm_raw as R

    spec = F.spec_from_dict(raw_features())
    lines = tf.constant(["1\t3\tc1", "2\t3\tc1", "0\t\tc2", "-1\t1\tc1", "0.5\t1\tc1", "1\t2\tc3\tx"])
    raw, labels, bad = R.parse_text_batch(lines, spec)
    assert labels.numpy().tolist() == [1.0, 0.0] and int(bad) == 4 and raw["c1"].numpy().tolist() == [b"c1", b"c2"]
    examples = tf.constant(
        [
            tf.train.Example(
                features=tf.train.Features(
                    feature={"clicked": tf.train.Feature(float_list=tf.train.FloatList(value=[label]))}
                )
            ).SerializeToString()
            for label in (1.0, 7.5, 0.0)
        ]
    )
    tfrecord = F.spec_from_dict(raw_tfrecord_features("skip"))
    raw, labels, bad = R.parse_example_batch(examples, tfrecord)
    assert labels.numpy().tolist() == [1.0, 0.0] and int(bad) == 1 and raw["c1"].shape[0] == 2
    failing = F.spec_from_dict(raw_tfrecord_features("fail"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad record: label 7.5 is not 0 or 1"):
        R.parse_example_batch(examples, failing)


@pytest.mark.slow
def test_raw_eval_rows_skipped_are_counted_and_bounded(tmp_path):
    env = es.make_container(tmp_path, ["train", "eval"])
    (tmp_path / "input/data/train/a.tsv").write_text("\n".join(raw_lines(300, seed=5)) + "\n")
    bad = ["7.5\t1\tc1", "2\t1\tc2", "-1\t4\tc3"]
    evaluation = tmp_path / "input/data/eval/e.tsv"
    evaluation.write_text("\n".join(raw_lines(40, seed=6) + bad) + "\n")
    code, log = run(tmp_path, {**RAW_HP, "features": json.dumps(raw_features())}, env)
    assert code == 1, log[-3000:]
    assert "[dfm] eval bad rows skipped: 3" in log
    assert errors(log) == [
        "[dfm] error: too many bad rows in channel eval: 3 of 43 rows read (7.0%) were bad, more than "
        f"features.bad_rows.max_fraction 0.01; the first: {evaluation}: line 41: label 7.5 is not 0 or 1: "
        f"{shown(bad[0])}"
    ], log[-3000:]
    assert exported(tmp_path / "model") == []
    code, log = run(tmp_path, {**RAW_HP, "features": json.dumps(raw_features({"max_fraction": 0.1}))}, env)
    assert code == 0 and "[dfm] eval bad rows skipped: 3" in log and not errors(log), log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, why",
    [
        ("field_size", r"row has 10 (ids|values), the spec's field_size is 39"),
        ("random", r"corrupted record at byte 0: not a TFRecord file, or a damaged one"),
    ],
)
def test_the_parameter_server_chief_names_a_bad_record_and_its_reason(tmp_path, damage, why):
    import re

    from test_entry_ps import run_cluster, two_hosts_s3_sharded

    bases, envs, parts, _ = two_hosts_s3_sharded(tmp_path, 2000, 0)
    for base, part in zip(bases, parts):
        es.write_tfrecords(base / "input/data/train", part, 1)
    other, _ = es.synth_split(40, 0, seed=3, feature_size=20000, field_size=10)
    (written,) = es.write_tfrecords(bases[0] / "input/data/train/z", other, 1)
    bad = bases[0] / "input/data/train" / "z-part.tfrecord"
    if damage == "random":
        bad.write_bytes(random.Random(2).randbytes(written.stat().st_size))
    else:
        written.rename(bad)
    written.unlink(missing_ok=True)
    (bases[0] / "input/data/train/z").rmdir()
    codes, chief, worker, _ = run_cluster(tmp_path, bases, envs, {**HP, "eval_steps": 0})
    assert codes[0] == 1, chief[-3000:]
    first = errors(chief)[0]
    assert re.fullmatch(rf"\[dfm\] error: bad input data in {re.escape(str(bad))}: record 1: {why}.*", first), chief
    assert "root error" not in first
