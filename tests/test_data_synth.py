"""The synthetic generator: deterministic, Criteo-like, and its teacher AUC is a real ceiling."""

import json
import os

import numpy as np
import pytest

from launcher.cli import main
from launcher.data import stream, synth, synth_files, synth_rows


def test_same_seed_same_data_other_seed_other_data():
    a, b, c = synth.generate(2000, 3), synth.generate(2000, 3), synth.generate(2000, 4)
    for name in ("ids", "values", "labels", "probs"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.teacher_auc == b.teacher_auc
    assert not np.array_equal(a.ids, c.ids)


def test_shapes_dtypes_and_field_ranges():
    data = synth.generate(5000, 1)
    assert data.ids.shape == data.values.shape == (5000, 39)
    assert (data.ids.dtype, data.values.dtype, data.labels.dtype) == (np.int64, np.float32, np.float32)
    low, high = data.ids.min(axis=0), data.ids.max(axis=0)
    assert low.min() >= 0 and high.max() < synth.DEFAULT_FEATURE_SIZE
    assert np.all(high[:-1] < low[1:]), "each field owns its own id range, in field order"
    assert set(np.unique(data.labels)) == {0.0, 1.0}
    numeric, categorical = data.values[:, :13], data.values[:, 13:]
    assert np.all(categorical == 1.0) and numeric.min() >= 0.0 and numeric.max() <= 1.0


def test_heavy_tails_and_zipf_skew():
    data = synth.generate(20000, 2)
    # Categorical: the most frequent id of a big field is far above its uniform share.
    big = data.ids[:, -1]
    top_share = np.unique(big, return_counts=True)[1].max() / len(big)
    assert top_share > 50 / (big.max() - big.min() + 1)
    # Numeric: the largest counts sit far out compared with the median (log1p scale, capped).
    counts = np.expm1(data.values[:, :13] * 10.0)
    assert np.median(counts.max(axis=0) / np.maximum(np.median(counts, axis=0), 1.0)) > 20


@pytest.mark.parametrize("rate", [0.25, 0.1])
def test_positive_rate_is_planted(rate):
    assert synth.generate(20000, 5, positive_rate=rate).labels.mean() == pytest.approx(rate, abs=0.02)


def test_teacher_auc_well_above_chance_and_grows_with_signal():
    weak, default, strong = (synth.generate(20000, 6, signal=s).teacher_auc for s in (0.7, 1.5, 3.0))
    assert 0.75 < default < 0.9
    assert 0.5 < weak < default < strong


def test_small_layouts_and_a_too_small_feature_size():
    data = synth.generate(100, 0, field_size=5, feature_size=60)
    assert data.ids.shape == (100, 5) and data.ids.max() < 60
    with pytest.raises(ValueError, match="too small"):
        synth.generate(100, 0, field_size=39, feature_size=100)


def test_roc_auc_matches_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    labels = rng.random(300) < 0.3
    scores = np.round(rng.random(300), 1)  # many ties
    pos, neg = scores[labels], scores[~labels]
    pairwise = ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean()
    assert synth.roc_auc(labels, scores) == pytest.approx(pairwise)


def _fit_logistic(ids, values, labels, feature_size, steps=300, lr=0.5):
    """Full-batch Adagrad logistic regression on the (id, value) pairs."""
    weights, bias = np.zeros(feature_size), 0.0
    accum, bias_accum = np.full(feature_size, 1e-8), 1e-8
    for _ in range(steps):
        probs = 1 / (1 + np.exp(-((weights[ids] * values).sum(axis=1) + bias)))
        error = (probs - labels) / len(labels)
        grad = np.bincount(ids.ravel(), weights=(error[:, None] * values).ravel(), minlength=feature_size)
        grad += 1e-4 * weights
        accum += grad**2
        weights -= lr * grad / np.sqrt(accum)
        bias_accum += error.sum() ** 2
        bias -= lr * error.sum() / np.sqrt(bias_accum)
    return lambda i, v: (weights[i] * v).sum(axis=1) + bias


def test_a_fitted_model_learns_but_does_not_beat_the_teacher():
    data = synth.generate(40000, 8, field_size=20, feature_size=2000)
    train, held_out = data.take(0, 30000), data.take(30000, 40000)
    predict = _fit_logistic(train.ids, train.values, train.labels, 2000)
    student = synth.roc_auc(held_out.labels, predict(held_out.ids, held_out.values))
    assert 0.6 < student < held_out.teacher_auc + 0.01


def test_write_tfrecords_round_trip_with_equal_counts(tmp_path):
    from launcher.data.tfrecord import read_examples

    data = synth.generate(600, 9, field_size=7, feature_size=500)
    paths = synth_files.write_tfrecords(tmp_path, data, files=3)
    assert [p.name for p in paths] == ["part-00000.tfrecord", "part-00001.tfrecord", "part-00002.tfrecord"]
    assert [len(read_examples([p], 7)[0]) for p in paths] == [200, 200, 200]
    labels, ids, values = read_examples(paths, 7)
    np.testing.assert_array_equal(labels, data.labels)
    np.testing.assert_array_equal(ids, data.ids)
    np.testing.assert_array_equal(values, data.values)
    with pytest.raises(ValueError, match="divisible"):
        synth_files.write_tfrecords(tmp_path / "x", data, files=7)


@pytest.mark.parametrize("fmt", ["tfrecord", "libsvm"])
def test_streamed_parts_equal_the_in_memory_draw_across_chunk_boundaries(tmp_path, monkeypatch, fmt):
    from launcher.data import libsvm
    from launcher.data.tfrecord import read_examples

    monkeypatch.setattr(synth, "CHUNK_ROWS", 64)  # files and parts straddle chunks
    expected = synth.generate(300, 11, field_size=5, feature_size=200)
    generator = synth.Generator(11, field_size=5, feature_size=200)
    results = stream.write_parts(generator, [(tmp_path / "a", 200, 4), (tmp_path / "b", 100, 2)], fmt=fmt)
    assert results[0] == (pytest.approx(expected.take(0, 200).teacher_auc), pytest.approx(expected.labels[:200].mean()))
    assert results[1][0] == pytest.approx(expected.take(200, 300).teacher_auc)
    for folder, rows in (("a", slice(0, 200)), ("b", slice(200, 300))):
        paths = sorted((tmp_path / folder).iterdir())
        if fmt == "tfrecord":
            labels, ids, values = read_examples(paths, 5)
        else:
            parsed = [libsvm.parse_row(line, 5, 200) for p in paths for line in p.read_text().splitlines()]
            labels, ids, values = (np.array([row[k] for row in parsed]) for k in range(3))
        np.testing.assert_array_equal(ids, expected.ids[rows])
        np.testing.assert_array_equal(labels, expected.labels[rows])
        np.testing.assert_allclose(values, expected.values[rows], rtol=1e-7)


def test_cli_synth_writes_train_eval_and_meta(tmp_path, capsys):
    from launcher.data.tfrecord import read_examples

    out = tmp_path / "sample"
    argv = [
        "data",
        "synth",
        "--out",
        str(out),
        "--rows",
        "400",
        "--eval-rows",
        "100",
        "--files",
        "4",
        "--seed",
        "7",
        "--field-size",
        "9",
        "--feature-size",
        "300",
    ]
    assert main(argv) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["rows"], meta["eval_rows"], meta["seed"], meta["field_size"], meta["feature_size"]) == (
        400,
        100,
        7,
        9,
        300,
    )
    expected = synth.generate(500, 7, field_size=9, feature_size=300)
    assert meta["teacher_auc"] == pytest.approx(expected.take(0, 400).teacher_auc)
    train = sorted((out / "train").iterdir())
    assert len(train) == 4 and len(sorted((out / "eval").iterdir())) == 4
    np.testing.assert_array_equal(read_examples(train, 9)[1], expected.ids[:400])
    assert main(argv) == 2 and "--force" in capsys.readouterr().err
    assert main(argv + ["--force"]) == 0
    assert main(["data", "synth", "--out", str(tmp_path / "b"), "--rows", "10", "--files", "3"]) == 2


@pytest.mark.parametrize("share", [0.5, 0.8])
def test_deep_share_moves_that_share_of_the_teacher_to_a_network_no_fm_holds(share):
    """Same rows and positive rate; the teacher's logit keeps about sqrt(1 - share) correlation with the pure
    FM's (the rest is the ReLU network's), and deep_share 0 draws exactly the FM teacher's labels."""
    layout = dict(field_size=8, feature_size=3000, numeric_fields=0)
    fm, deep = synth.Generator(3, **layout), synth.Generator(3, **layout, deep_share=share)
    ((rows, fm_labels, _),) = fm.draws(20000)
    ((deep_rows, deep_labels, _),) = deep.draws(20000)
    np.testing.assert_array_equal(rows.ids, deep_rows.ids)
    assert abs(deep_labels.mean() - 0.25) < 0.02
    correlation = np.corrcoef(fm.teacher.logits(rows), deep.teacher.logits(rows))[0, 1]
    assert abs(correlation - np.sqrt(1 - share)) < 0.1, correlation
    assert not np.array_equal(fm_labels, deep_labels)
    ((_, zero_labels, _),) = synth.Generator(3, **layout, deep_share=0.0).draws(20000)
    np.testing.assert_array_equal(zero_labels, fm_labels)
    with pytest.raises(ValueError, match="deep_share"):
        synth.Generator(3, **layout, deep_share=1.5)


def test_force_keeps_the_old_data_until_the_new_is_complete(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sample"
    argv = [
        "data",
        "synth",
        "--out",
        str(out),
        "--rows",
        "40",
        "--format",
        "libsvm",
        "--field-size",
        "4",
        "--feature-size",
        "100",
    ]
    assert main(argv) == 0
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stream, "write_parts", interrupted)
    assert main([*argv, "--seed", "1", "--force"]) == 130  # click's Abort: "dfm: aborted"
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    monkeypatch.undo()
    assert main([*argv, "--seed", "1", "--force"]) == 0
    assert json.loads((out / "meta.json").read_text())["seed"] == 1 and sorted(os.listdir(out)) == [
        "meta.json",
        "train",
    ]


def test_cli_synth_like_criteo_kaggle_has_its_fields_vocabularies_and_zipf_ids(tmp_path, capsys):
    from launcher.data.tfrecord import read_examples

    out = tmp_path / "kaggle"
    argv = ["data", "synth", "--like", "criteo-kaggle", "--out", str(out), "--rows", "20000", "--files", "1"]
    assert main(argv) == 0
    meta = json.loads((out / "meta.json").read_text())
    sizes = meta["category_sizes"]
    assert (meta["like"], meta["field_size"], meta["numeric_fields"], len(sizes)) == ("criteo-kaggle", 39, 13, 26)
    assert sum(sizes) == 33_762_577 and meta["feature_size"] == 13 * synth_rows.NUMERIC_BUCKETS + 33_762_577
    assert 0.7 < meta["teacher_auc"] < 1.0  # the planted teacher's AUC on these rows: the best a model can expect
    ids = read_examples(sorted((out / "train").iterdir()), 39)[1]
    widths = [synth_rows.NUMERIC_BUCKETS] * 13 + sizes
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
    assert np.all(ids >= starts) and np.all(ids < starts + widths)  # each field in its own vocabulary
    # Zipf-like: in the 10.1M-id field a few ids are common and most of the ids seen are seen once
    counts = np.unique(ids[:, 13 + sizes.index(max(sizes))], return_counts=True)[1]
    assert counts.max() > 100 and np.mean(counts == 1) > 0.5
    raw = tmp_path / "kaggle-tsv"
    assert main(["data", "synth", "--like", "criteo-kaggle", "--out", str(raw), "--rows", "300", "--files", "1",
                 "--format", "criteo-tsv"]) == 0  # fmt: skip
    (part,) = sorted((raw / "train").iterdir())
    assert {len(line.split("\t")) for line in part.read_text().splitlines()} == {1 + 13 + 26}
    capsys.readouterr()
    assert main(argv[:4] + ["--feature-size", "1000", "--out", str(tmp_path / "c"), "--rows", "10"]) == 2
    assert "--like criteo-kaggle sets the fields and their sizes: drop --feature-size" in capsys.readouterr().err


def test_days_keep_the_layout_drift_the_teacher_and_bring_new_ids():
    """Day 1's teacher is the seed's; each later day keeps sqrt(1 - drift) correlation with the day before; a day
    draws only the ids in use by then, day 3 draws ids days 1 and 2 never did, and each day has its own rows."""
    layout = dict(field_size=10, feature_size=5000)
    plain = synth.Generator(3, **layout)
    days = [synth.Generator(3, **layout, day=d, drift=0.1, new_ids=0.3) for d in (1, 2, 3)]
    np.testing.assert_array_equal(days[0].teacher.linear, plain.teacher.linear)
    for before, after in zip(days, days[1:]):
        correlation = np.corrcoef(before.teacher.linear, after.teacher.linear)[0, 1]
        assert abs(correlation - np.sqrt(0.9)) < 0.02, correlation
    drawn = [next(g.draws(30000))[0].ids for g in days]
    for g, ids in zip(days, drawn):
        numeric = g.layout.numeric_fields
        in_use = {int(g.layout.offsets[numeric + k] + i) for k, (_, used) in enumerate(g.sampler.zipfs) for i in used}
        assert set(np.unique(ids[:, numeric:]).tolist()) <= in_use
    seen_before = set(drawn[0].ravel().tolist()) | set(drawn[1].ravel().tolist())
    assert len(set(drawn[2].ravel().tolist()) - seen_before) > 100
    assert len(days[0].sampler.zipfs[-1][1]) < len(days[2].sampler.zipfs[-1][1]) < len(plain.sampler.zipfs[-1][1])
    assert not np.array_equal(drawn[0], drawn[1])
    same_day = next(synth.Generator(3, **layout, day=3, drift=0.1, new_ids=0.3).draws(30000))[0].ids
    np.testing.assert_array_equal(same_day, drawn[2])
    for bad in (dict(day=0), dict(day=2, drift=1.5), dict(day=2, new_ids=1.0)):
        with pytest.raises(ValueError):
            synth.Generator(3, **layout, **bad)


def test_cli_synth_day_writes_its_settings_and_drift_needs_a_day(tmp_path, capsys):
    out = tmp_path / "day-2"
    argv = ["data", "synth", "--out", str(out), "--rows", "300", "--seed", "4", "--field-size", "9"]
    assert main(argv + ["--feature-size", "300", "--day", "2", "--new-ids", "0.2"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["day"], meta["drift"], meta["new_ids"]) == (2, 0.1, 0.2)
    capsys.readouterr()
    assert main(argv + ["--out", str(tmp_path / "x"), "--drift", "0.2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "dfm: --drift and --new-ids describe the days: add --day N"
    )
