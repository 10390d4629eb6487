"""`dfm data prepare --local`: the Spark application on real local Spark (one session for the module: the JVM
takes ~10 s to start), its files read back with TensorFlow's own reader and parser."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from launcher.data import prepare_encode as encode
from prepare_support import FIELDS, write_clicks, write_spec

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def spark():
    from launcher.data import prepare_local

    session = prepare_local.spark_session(cores="2")
    yield session
    session.stop()


def prepare(tmp_path: Path, spark, prepare_section: dict, **spec_changes) -> tuple[dict, object]:
    from launcher.data import prepare_local
    from launcher.spec import load_spec

    spec_changes.setdefault("local", {"train": str(tmp_path / "out/train"), "eval": str(tmp_path / "out/eval")})
    prepare_section = {"files_per_worker": 1, **prepare_section}  # small files for small tests, unless asked
    spec = load_spec(write_spec(tmp_path, prepare_section, **spec_changes))
    return prepare_local.run(prepare_local.local_job(spec), spec, spark=spark), spec


def read(paths, field_size=FIELDS):
    from launcher.data.tfrecord import read_examples

    return read_examples([Path(p) for p in paths], field_size)


def test_the_app_is_standalone():
    """It runs in the Spark image as submit_app (its module beside it): nothing from launcher, no TensorFlow, no
    protobuf; numpy is in the image."""
    from launcher.data import prepare_job

    for path in (prepare_job.APP, *prepare_job.APP_MODULES):
        tree = ast.parse(path.read_text())
        imported = {
            alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & {"launcher", "tensorflow", "google"}, imported
        assert imported <= {
            "argparse",
            "gc",
            "itertools",
            "json",
            "math",
            "re",
            "os",
            "struct",
            "sys",
            "tempfile",
            "time",
            "zipfile",
            "numpy",
            "pyspark",
            "google_crc32c",
            "crc32c",
            *(p.stem for p in prepare_job.APP_MODULES),
        }, imported


def test_a_raw_number_beyond_float32_is_a_bad_row():
    from launcher.data import prepare_codec as app

    job = {"features": {"label": "y", "numeric": ["n"], "categorical": [], "multi_hot": {}}}
    assert app.raw_row({"y": "1", "n": "3.4e38"}, job)[1] == [3.4e38]
    with pytest.raises(app.BadRow, match="n: '1e39' is beyond float32"):
        app.raw_row({"y": "1", "n": "1e39"}, job)


def test_hand_encoded_examples_parse_with_tensorflow(tmp_path):
    import tensorflow as tf

    features = {"label": "y", "numeric": ["n"], "categorical": ["c"], "multi_hot": {"m": "|"}}
    rows = [(1.0, [2.5], ["abc"], [["x", "y"]]), (0.0, [None], [None], [[]]), (1.0, [-3.0], ["é"], [["z"]])]
    crc = encode.crc32c_function()
    path = tmp_path / "raw.tfrecord"
    path.write_bytes(
        encode.frame(*encode.encode_records([encode.encode_raw(r, features) for r in rows]), crc)[0].tobytes()
    )
    spec = {
        "y": tf.io.FixedLenFeature([], tf.float32),
        "n": tf.io.FixedLenFeature([], tf.float32, float("nan")),
        "c": tf.io.FixedLenFeature([], tf.string, b""),
        "m": tf.io.RaggedFeature(tf.string),
    }
    (batch,) = list(tf.data.TFRecordDataset(str(path)).batch(8).map(lambda s: tf.io.parse_example(s, spec)))
    assert batch["y"].numpy().tolist() == [1.0, 0.0, 1.0]
    numbers = batch["n"].numpy()
    assert numbers[0] == 2.5 and np.isnan(numbers[1]) and numbers[2] == -3.0
    assert batch["c"].numpy().tolist() == [b"abc", b"", "é".encode()]
    assert batch["m"].to_list() == [[b"x", b"y"], [], [b"z"]]
    # a block of libsvm rows, encoded as arrays: ids of 1 to 7 varint bytes, so the rows' lengths differ
    ids = np.array([[0, 2**40, 7], [2**20, 1, 127], [128, 300, 2**48]])
    data, lengths = encode.encode_libsvm(np.float32([0, 1, 1]), ids, np.float32([[0.5, -1, 3], [1, 2, 3], [4, 5, 6]]))
    first = data[: lengths[0]].tobytes()
    reference = tf.train.Example()
    reference.ParseFromString(first)  # protobuf's own parser agrees with the hand encoding
    assert list(reference.features.feature["ids"].int64_list.value) == [0, 2**40, 7]
    assert list(reference.features.feature["values"].float_list.value) == [0.5, -1.0, 3.0]
    assert reference.SerializeToString(deterministic=True) == first  # byte for byte, as protobuf writes it
    (tmp_path / "indexed.tfrecord").write_bytes(encode.frame(data, lengths, crc)[0].tobytes())
    labels, read_ids, values = read([tmp_path / "indexed.tfrecord"], 3)
    assert labels.tolist() == [0, 1, 1] and (read_ids == ids).all() and values[2].tolist() == [4, 5, 6]


def test_files_fit_hosts_times_workers_and_every_row_lands_once(tmp_path, spark):
    labels = write_clicks(tmp_path / "clicks", 3000, files=3)
    held = spark.sparkContext._jsc.getPersistentRDDs().size()
    report, spec = prepare(
        tmp_path,
        spark,
        {
            "input": {"uri": "s3://dfm-test-bucket/clicks/", "format": "libsvm", "local": str(tmp_path / "clicks")},
            "eval_fraction": 0.1,
            "files_per_worker": "auto",
        },
    )
    train = sorted((tmp_path / "out/train").iterdir())
    evaluation = sorted((tmp_path / "out/eval").iterdir())
    # 2 hosts x 2 ranks x 4 files each: a write task per vCPU of the default ml.m5.4xlarge (16)
    assert [p.name for p in train] == [f"part-{k:05d}.tfrecord" for k in range(16)]
    assert len(evaluation) == 16
    train_labels, _, train_values = read(train)
    eval_labels, _, eval_values = read(evaluation)
    positions = np.concatenate([train_values[:, 0], eval_values[:, 0]]).astype(int)
    assert sorted(positions.tolist()) == list(range(3000))  # nothing lost, nothing twice
    assert np.array_equal(np.concatenate([train_labels, eval_labels]), labels[positions])
    assert 200 < len(eval_labels) < 400
    assert report["train"]["per_file"] == [len(read([p])[0]) for p in train]
    rows, files = report["train"]["rows"], len(train)  # each file's count is binomial(rows, 1/files)
    spread = (rows / files * (1 - 1 / files)) ** 0.5
    assert all(abs(count - rows / files) < 4 * spread for count in report["train"]["per_file"])
    meta = json.loads((tmp_path / "out/prepare/prepare.json").read_text())
    assert meta["rows"] == 3000 and meta["bad_rows"] == 0
    stats = json.loads((tmp_path / "out/prepare/stats.json").read_text())  # gathered by the read pass
    assert stats["rows"] == 3000 and stats["positive_rate"] == pytest.approx(labels.mean())
    assert stats["columns"]["field1"] == {"kind": "indexed", "distinct": 7, "max_id": 7}
    assert stats["columns"]["field2"] == {"kind": "indexed", "distinct": 11, "max_id": 20}
    assert stats["columns"]["field0"] == {"kind": "indexed", "distinct": 1, "max_id": 0}
    assert stats["feature_size"] == 21
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == held  # one pass to the shuffle: nothing cached


def test_shuffle_mixes_the_input_order(tmp_path, spark):
    write_clicks(tmp_path / "clicks", 2000, files=4)
    section = {
        "input": {"uri": "s3://dfm-test-bucket/clicks/", "format": "libsvm", "local": str(tmp_path / "clicks")},
        "stats": False,
    }
    prepare(tmp_path / "a", spark, section, count=1, processes=1)
    (order,) = [read([p])[2][:, 0] for p in sorted((tmp_path / "a/out/train").iterdir())]
    assert sorted(order.tolist()) == list(range(2000))
    correlation = np.corrcoef(order, np.arange(len(order)))[0, 1]
    assert abs(correlation) < 0.1, correlation  # no trace of the input order (it would be 1.0)
    first_hundred = order[:100].astype(int) // 500  # rows of all four input files, mixed, from the start
    assert set(first_hundred.tolist()) == {0, 1, 2, 3}
    prepare(tmp_path / "b", spark, {**section, "shuffle": False}, count=1, processes=1)
    (kept,) = [read([p])[2][:, 0] for p in sorted((tmp_path / "b/out/train").iterdir())]
    for k in range(4):  # without shuffle each input file's rows keep their order
        mine = [int(v) for v in kept if int(v) // 500 == k]
        assert mine == list(range(500 * k, 500 * (k + 1)))
    prepare(tmp_path / "c", spark, section, count=1, processes=1)
    (again,) = [read([p])[2][:, 0] for p in sorted((tmp_path / "c/out/train").iterdir())]
    assert np.array_equal(order, again)  # seeded: the same order every run


def test_balance_keeps_the_target_share_of_negatives_and_eval_untouched(tmp_path, spark):
    labels = write_clicks(tmp_path / "clicks", 20000, files=2, seed=5)
    report, _ = prepare(
        tmp_path,
        spark,
        {
            "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(tmp_path / "clicks")},
            "eval_fraction": 0.1,
            "balance": {"negative_rate": 0.25},
            "stats": False,
        },
    )
    train_labels = read(sorted((tmp_path / "out/train").iterdir()))[0]
    eval_labels = read(sorted((tmp_path / "out/eval").iterdir()))[0]
    positives, negatives = int(train_labels.sum()), int((train_labels == 0).sum())
    held = len(eval_labels)
    all_negatives_in_train = int((labels == 0).sum()) - int((eval_labels == 0).sum())
    assert abs(negatives / all_negatives_in_train - 0.25) < 0.01  # the share of negatives kept
    rate = labels.mean()
    target = 0.25 * (1 - rate) / (0.25 * (1 - rate) + rate)
    assert abs(negatives / (positives + negatives) - target) < 0.01  # the negative share of the train files
    assert positives + int(eval_labels.sum()) == int(labels.sum())  # every positive kept
    assert abs(eval_labels.mean() - rate) < 0.02 and 1800 < held < 2200  # eval keeps the natural rate
    assert report["negative_rate"] == 0.25


def test_bad_rows_are_skipped_and_counted_or_fail_with_nothing_written(tmp_path, spark):
    from launcher.errors import DfmError

    write_clicks(tmp_path / "clicks", 400, files=2)
    with open(tmp_path / "clicks/part-000.libsvm", "a") as out:
        out.write("1 0:1 1:1\n")  # two pairs, not three
        out.write("x 0:1 1:1 2:1\n")  # no label
        out.write("0 0:1 1:1 2:inf\n")
        out.write("0 0:1 1:1 150:1\n")  # past the model's feature_size (100): the job could not embed it
        out.write("0 0:1 1:1e39 2:1\n")  # a finite double, inf as a float32
    section = {
        "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(tmp_path / "clicks")},
        "stats": False,
    }
    report, _ = prepare(tmp_path / "skip", spark, section, count=1, processes=1)
    assert report["bad_rows"] == 5 and report["rows"] == 400 and report["train"]["rows"] == 400
    assert any("2 id:value pairs, expected 3" in line for line in report["bad_examples"])
    assert any("id 150 is outside [0, 100)" in line for line in report["bad_examples"])
    assert any("value 1e39 is beyond float32" in line for line in report["bad_examples"])
    with pytest.raises(DfmError, match="5 bad rows"):
        prepare(tmp_path / "fail", spark, {**section, "bad_rows": "fail"}, count=1, processes=1)
    assert not (tmp_path / "fail/out/train").exists()


def test_raw_tsv_becomes_examples_the_bundled_parser_reads_with_statistics(tmp_path, spark):
    import tensorflow as tf

    from launcher.facts.contract import bundled_features

    folder = tmp_path / "raw"
    folder.mkdir()
    rng = np.random.default_rng(1)
    lines = []
    for i in range(1000):
        count = "" if i % 10 == 0 else str(int(rng.integers(0, 50)))
        bag = "|".join(f"t{int(t)}" for t in rng.integers(0, 30, size=int(rng.integers(0, 4))))
        lines.append(f"{int(rng.random() < 0.3)}\t{count}\tcat{int(rng.integers(0, 40))}\t{bag}\n")
    (folder / "part-0.tsv").write_text("".join(lines))
    features = {
        "format": "tfrecord",
        "label": "clicked",
        "numeric": {"n1": {"transform": "log1p"}},
        "categorical": {"c1": {"hash_buckets": 64}},
        "multi_hot": {"tags": {"separator": "|", "hash_buckets": 64, "max_length": 5}},
    }
    section = {
        "input": {
            "uri": "s3://dfm-test-bucket/raw/",
            "format": "tsv",
            "columns": ["clicked", "n1", "c1", "tags"],
            "local": str(folder),
        }
    }
    report, spec = prepare(tmp_path, spark, section, count=1, processes=1, features=features, hyperparameters={})
    F = bundled_features()
    import entry_support  # noqa: F401  (puts entrypoints/ on sys.path, as the container has it)
    import deepfm_raw

    feature_spec = F.spec_from_dict(features)
    (path,) = sorted((tmp_path / "out/train").iterdir())
    batches = (
        tf.data.TFRecordDataset(str(path)).batch(2000).map(lambda s: deepfm_raw.parse_example_batch(s, feature_spec))
    )
    ((raw, labels, _bad),) = list(batches)
    assert len(labels) == 1000
    assert int(np.isnan(raw["n1"].numpy()).sum()) == 100  # missing counts stay missing
    stats = report["stats"]["columns"]
    assert stats["n1"]["missing"] == pytest.approx(0.1) and 35 <= stats["c1"]["distinct"] <= 45
    assert 1 <= stats["tags"]["max_length"] <= 3 and stats["tags"]["longest"] == 3
    proposal = (tmp_path / "out/prepare/features.yaml").read_text()
    assert "transform: bucketize" in proposal and "format: tfrecord" in proposal
    import yaml

    proposed = yaml.safe_load(proposal)["features"]
    assert not F.validate(proposed)  # what it proposes is a section the bundled scripts accept


def test_parquet_columns_by_name_lists_as_multi_hot_and_bad_labels_counted(tmp_path, spark):
    from launcher.data.tfrecord import quiet_tensorflow

    tf = quiet_tensorflow()
    rows = [
        (i % 3 == 0, float(i) if i % 5 else None, f"c{i % 7}", [f"t{i % 4}", "u"] if i % 2 else []) for i in range(200)
    ] + [(None, 1.0, "c1", [])]  # no label: a bad row
    spark.createDataFrame(rows, "clicked boolean, n1 double, c1 string, tags array<string>").selectExpr(
        "cast(clicked as int) as clicked", "n1", "c1", "tags"
    ).write.parquet(str(tmp_path / "pq"))
    features = {
        "format": "tfrecord",
        "label": "clicked",
        "numeric": {"n1": {}},
        "categorical": {"c1": {"hash_buckets": 16}},
        "multi_hot": {"tags": {"separator": "|", "hash_buckets": 16, "max_length": 4}},
    }
    report, _ = prepare(
        tmp_path,
        spark,
        {"input": {"uri": "s3://dfm-test-bucket/pq/", "format": "parquet", "local": str(tmp_path / "pq")}},
        count=1,
        processes=1,
        features=features,
        hyperparameters={},
    )
    assert report["bad_rows"] == 1 and report["train"]["rows"] == 200
    spec = {
        "clicked": tf.io.FixedLenFeature([], tf.float32),
        "n1": tf.io.FixedLenFeature([], tf.float32, float("nan")),
        "c1": tf.io.FixedLenFeature([], tf.string, b""),
        "tags": tf.io.RaggedFeature(tf.string),
    }
    (path,) = sorted((tmp_path / "out/train").iterdir())
    (batch,) = list(tf.data.TFRecordDataset(str(path)).batch(500).map(lambda s: tf.io.parse_example(s, spec)))
    assert int(batch["clicked"].numpy().sum()) == 67
    assert int(np.isnan(batch["n1"].numpy()).sum()) == 40
    lengths = sorted(set(len(t) for t in batch["tags"].to_list()))
    assert lengths == [0, 2] and report["stats"]["columns"]["tags"]["longest"] == 2


def test_a_separate_eval_input_is_spread_over_the_eval_files(tmp_path, spark):
    write_clicks(tmp_path / "clicks", 800, files=2)
    write_clicks(tmp_path / "held", 800, files=1, seed=9)
    report, _ = prepare(
        tmp_path,
        spark,
        {
            "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(tmp_path / "clicks")},
            "eval": {"uri": "s3://dfm-test-bucket/h/", "local": str(tmp_path / "held")},
            "stats": False,
            "files_per_worker": 1,
        },
    )
    assert report["train"]["rows"] == 800 and report["eval"]["rows"] == 800 and report["eval_bad_rows"] == 0
    per_file = report["eval"]["per_file"]
    assert len(per_file) == 4 and min(per_file) > 0.6 * max(per_file), per_file


def test_a_file_appears_only_when_complete(tmp_path, spark):
    """A task that fails while writing (or is retried) leaves no partial file in a channel folder, where a
    ProcessingOutput would upload it and the training job read it."""
    from launcher.data import prepare_local

    app = prepare_local.load_app(spark)
    data, lengths = encode.frame(*encode.encode_records([b"one", b"two"]), encode.crc32c_function())
    chunk = (0, (np.array([2, 1]), lengths, data.tobytes(), 1))

    def failing():
        yield chunk
        raise OSError("No space left on device")

    path = tmp_path / "out/train/part-00000.tfrecord"
    with pytest.raises(OSError):
        list(app.write.write_partition(0, failing(), [str(path)]))
    assert not path.exists() and not any((tmp_path / "out").rglob("*.tfrecord*"))
    assert list(app.write.write_partition(0, iter([chunk]), [str(path)])) == [(0, 2, 1)]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()) == [
        "out/train/part-00000.tfrecord"
    ]
    assert path.read_bytes() == encode.gather(data, lengths, np.array([1, 0]))[0].tobytes()  # sorted by key


def test_a_task_finishing_does_not_pull_the_scratch_folder_from_under_another(tmp_path, spark, monkeypatch):
    """Two write tasks share `.partial`: one finishing between the other's makedirs and open must not remove it
    (it did: FileNotFoundError on local Spark under load); the folder goes once every file is written."""
    from launcher.data import prepare_local

    app = prepare_local.load_app(spark)
    data, lengths = encode.frame(*encode.encode_records([b"one"]), encode.crc32c_function())
    chunk = (0, (np.array([1]), lengths, data.tobytes(), 0))
    paths = [str(tmp_path / "out/train/part-00000.tfrecord"), str(tmp_path / "out/train/part-00001.tfrecord")]
    makedirs, other = app.write.os.makedirs, []

    def makedirs_then_the_other_task_runs(name, exist_ok=False):
        makedirs(name, exist_ok=exist_ok)
        if name.endswith(".partial") and not other:
            other.append(None)
            other[0] = list(app.write.write_partition(1, iter([chunk]), paths))

    monkeypatch.setattr(app.write.os, "makedirs", makedirs_then_the_other_task_runs)
    assert list(app.write.write_partition(0, iter([chunk]), paths)) == [(0, 1, 0)] and other == [[(1, 1, 0)]]
    assert all(Path(p).exists() for p in paths)


def test_many_small_files_are_read_a_task_per_core_each_row_named_by_its_file(tmp_path, spark):
    """A split per file would make 12 read tasks of a few KB each (a task's fixed cost, many times over, on an input
    of many small files); they are packed into a task per core at most (whole files of under 4 MB together), and a
    bad row still names its own file."""
    from launcher.data import prepare_local

    write_clicks(tmp_path / "clicks", 600, files=12)
    with open(tmp_path / "clicks/part-007.libsvm", "a") as out:
        out.write("1 0:1 1:1\n")
    app = prepare_local.load_app(spark)
    job = {"input": {"format": "libsvm"}, "field_size": FIELDS, "feature_size": None}
    parsed = app.read_parsed(spark, str(tmp_path / "clicks"), job)
    assert 1 <= parsed.getNumPartitions() <= spark.sparkContext.defaultParallelism == 2
    items = parsed.collect()
    assert [item[1] for item in items if item[0] == "bad"] == [
        "part-007.libsvm: 2 id:value pairs, expected 3: '1 0:1 1:1'"
    ]
    assert sum(len(item[1][0]) for item in items if item[0] == "ok") == 600


def test_gzip_input_is_read_and_a_forced_rerun_replaces_the_set(tmp_path, spark):
    """Criteo's own .gz files, decompressed by Spark; a second run with force swaps its files in whole."""
    import gzip

    from launcher.data import prepare_local
    from launcher.spec import load_spec

    labels = write_clicks(tmp_path / "clicks", 300, files=1)
    source = tmp_path / "clicks/part-000.libsvm"
    source.with_name("day_0.gz").write_bytes(gzip.compress(source.read_bytes()))
    source.unlink()
    section = {
        "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(tmp_path / "clicks")},
        "stats": False,
        "files_per_worker": 1,
    }
    report, _ = prepare(tmp_path, spark, section, count=1, processes=1)
    assert (report["rows"], report["bad_rows"]) == (300, 0)
    stale = tmp_path / "out/train/part-00009.tfrecord"
    stale.write_bytes(b"old")
    spec = load_spec(
        write_spec(
            tmp_path,
            {**section, "shuffle": False},
            count=1,
            processes=1,
            local={"train": str(tmp_path / "out/train"), "eval": str(tmp_path / "out/eval")},
        )
    )
    report = prepare_local.run(prepare_local.local_job(spec), spec, force=True, spark=spark)
    assert not stale.exists() and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["prepare", "train"]
    assert sorted(read(sorted((tmp_path / "out/train").iterdir()))[0].tolist()) == sorted(labels.tolist())


def test_stats_only_writes_the_statistics_and_no_channel(tmp_path, spark):
    from launcher.data import prepare_local
    from launcher.spec import load_spec

    labels = write_clicks(tmp_path / "clicks", 500, files=2)
    section = {"input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(tmp_path / "clicks")}}
    spec = load_spec(write_spec(tmp_path, section, local={"train": str(tmp_path / "out/train")}))
    report = prepare_local.run(prepare_local.local_job(spec, stats_only=True), spec, spark=spark)
    assert (report["rows"], "train" in report) == (500, False)
    assert not (tmp_path / "out/train").exists()
    stats = json.loads((tmp_path / "out/prepare/stats.json").read_text())
    assert stats["rows"] == 500 and stats["positive_rate"] == pytest.approx(labels.mean())
