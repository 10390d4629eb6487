"""Raw features in the entry points: the spec's checks and id layout, batch-first parsing of criteo-tsv
synth output, deterministic hashing, the bad-row policy, Example parity with text, the raw serving
signature in a fresh process, and training on raw rows to the planted teacher's AUC."""

import csv
import json
import os
import subprocess
import textwrap

import numpy as np
import pytest

import entry_support as es
import deepfm_features as F

tf = pytest.importorskip("tensorflow")
import deepfm_model as M  # noqa: E402
import deepfm_raw as R  # noqa: E402
import deepfm_training as T  # noqa: E402
import deepfm_metrics as DM  # noqa: E402

BAG = "recent_cats"


def write_raw(folder, rows, eval_rows=0, seed=3, feature_size=117581, vocabulary=1000, max_length=20):
    """criteo-tsv synth output as `dfm data synth` writes it -> (columns, numeric boundaries, eval teacher AUC)."""
    from launcher.data import raw, stream, synth, synth_rows

    generator = synth.Generator(
        seed,
        feature_size=feature_size,
        missing_rate=0.05,
        multi_hot=synth_rows.MultiHot(vocabulary=vocabulary, max_length=max_length),
    )
    parts = [(folder / "train", rows, 2)] + ([(folder / "eval", eval_rows, 1)] if eval_rows else [])
    results = stream.write_parts(generator, parts, fmt="criteo-tsv")
    layout = generator.layout
    columns = raw.column_names(layout.numeric_fields, len(layout.sizes) - layout.numeric_fields, BAG)
    return columns, [2**k - 1 for k in range(1, synth_rows.NUMERIC_BUCKETS)], results[-1][0]


def features_for(columns, boundaries=None, buckets=1000, bag_buckets=1000, max_length=20, **extra):
    numeric = {"transform": "bucketize", "boundaries": boundaries} if boundaries else {"transform": "log1p"}
    features = {
        "format": "tsv",
        "label": "clicked",
        "columns": columns,
        "numeric": {c: dict(numeric) for c in columns if c[0] == "i"},
        "categorical": {c: {"hash_buckets": buckets} for c in columns if c[0] == "c" and c != "clicked"},
        "multi_hot": {BAG: {"separator": "|", "hash_buckets": bag_buckets, "max_length": max_length}},
    }
    features.update(extra)
    return features


def rows_of(paths):
    return [row for path in paths for row in csv.reader(open(path, newline=""), delimiter="\t")]


def collect(dataset):
    """All batches of a dataset -> concatenated numpy arrays per key, and labels."""
    out, labels = {}, []
    for features, label in dataset:
        for key, value in features.items():
            if key != F.BAD_ROWS_KEY:
                out.setdefault(key, []).append(value.numpy())
        labels.append(label.numpy())
    return {k: np.concatenate(v) for k, v in out.items()}, np.concatenate(labels)


def PooledDeepFM(layout, embedding_size=8, deep_layers=(32, 16), **kw):
    """The bundled DeepFM as the scripts build it for raw features: S input slots pooled into F fields."""
    return M.DeepFM(
        layout.field_size,
        layout.feature_size,
        embedding_size,
        deep_layers,
        pooling=R.SlotPooling(layout, embedding_size),
        **kw,
    )


@pytest.fixture(scope="module")
def synth_tsv(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raw")
    columns, boundaries, _ = write_raw(folder, 1200)  # bags up to 20 tokens; specs here keep 6
    return sorted((folder / "train").iterdir()), columns, boundaries


# ---- the spec ----


def test_a_good_spec_has_no_problems_and_its_layout_adds_up(synth_tsv):
    _, columns, boundaries = synth_tsv
    features = features_for(columns, boundaries, buckets=100, bag_buckets=50, max_length=6)
    assert F.validate(features) == []
    layout = F.build_layout(F.spec_from_dict(features))
    assert layout.field_size == 13 + 26 + 1 and layout.slot_count == 13 + 26 + 6
    assert layout.feature_size == 13 * (2 + len(boundaries)) + 26 * 101 + 51
    ends = [f.offset + f.size for f in layout.fields]
    assert [f.offset for f in layout.fields[1:]] == ends[:-1]  # ranges tile the id space


@pytest.mark.parametrize(
    "change,where,words",
    [
        (lambda f: f.update(label="click"), ("label",), "not among the columns"),
        (lambda f: f["categorical"].update(c1={"hash_buckets": 0}), ("categorical", "c1", "hash_buckets"), "from 1"),
        (
            lambda f: f["categorical"].update(c1={"hash_buckets": 5, "vocabulary": "v.txt"}),
            ("categorical", "c1"),
            "either",
        ),
        (
            lambda f: f["numeric"].update(i1={"transform": "bucketize", "boundaries": [3, 1]}),
            ("numeric", "i1", "boundaries"),
            "increase",
        ),
        (lambda f: f["numeric"].update(i1={"transform": "log"}), ("numeric", "i1", "transform"), "log1p"),
        (lambda f: f["numeric"].update(extra={}), ("numeric", "extra"), "not among the columns"),
        (lambda f: f["numeric"].update(c1={}), ("categorical", "c1"), "already declared"),
        (lambda f: f["multi_hot"][BAG].update(separator="\t"), ("multi_hot", BAG, "separator"), "tab"),
        (lambda f: f["multi_hot"][BAG].update(max_length=0), ("multi_hot", BAG, "max_length"), "from 1"),
        (lambda f: f.update(format="tfrecord"), ("columns",), "tsv and csv only"),
        (lambda f: f.update(bad_rows="ignore"), ("bad_rows",), "skip, fail or {skip: true, max_fraction: 0.01}"),
        (lambda f: f.update(bad_rows={"skip": True, "max_fraction": 2}), ("bad_rows", "max_fraction"), "from 0 to 1"),
        (lambda f: f.update(bad_rows={"skip": "yes"}), ("bad_rows", "skip"), "true or false"),
        (lambda f: f.update(bad_rows={"skip": True, "most": 1}), ("bad_rows", "most"), "unknown key"),
        (lambda f: f.update(labels="clicked"), ("labels",), "unknown key"),
        (lambda f: f["categorical"].update(c1={"hash_buckets": 2**30}, c2={"hash_buckets": 2**30}), (), "ids"),
    ],
)
def test_each_bad_spec_names_its_key_and_the_fix(synth_tsv, change, where, words):
    features = features_for(synth_tsv[1])
    change(features)
    problems = F.validate(features)
    assert any(path == where and words in message for path, message in problems), problems
    with pytest.raises(F.SpecError, match="features"):
        F.spec_from_dict(features)


# ---- parsing and transformation ----


@pytest.mark.runtimes
def test_text_parsing_reads_every_cell_of_synth_output(synth_tsv):
    files, columns, _ = synth_tsv
    spec = F.spec_from_dict(features_for(columns, max_length=6))
    raw, labels = collect(R.raw_dataset([str(f) for f in files], spec, 256))
    rows = rows_of(files)
    assert all(len(row) == len(columns) for row in rows) and len(labels) == len(rows) == 1200
    np.testing.assert_array_equal(labels, [float(r[0]) for r in rows])
    i1 = [r[columns.index("i1")] for r in rows]
    np.testing.assert_array_equal(np.isnan(raw["i1"]), [c == "" for c in i1])
    assert 0 < sum(c == "" for c in i1) < 200  # the 5% blanks are there
    np.testing.assert_array_equal(raw["i1"][~np.isnan(raw["i1"])], [float(c) for c in i1 if c])
    assert [c.decode() for c in raw["c7"]] == [r[columns.index("c7")] for r in rows]
    assert [c.decode() for c in raw[BAG]] == [r[-1] for r in rows]


@pytest.mark.runtimes
def test_each_field_keeps_to_its_id_range_and_missing_takes_slot_zero(synth_tsv):
    files, columns, boundaries = synth_tsv
    spec = F.spec_from_dict(features_for(columns, boundaries, buckets=50, bag_buckets=30, max_length=6))
    layout = F.build_layout(spec)
    out, _ = collect(R.raw_dataset([str(f) for f in files], spec, 500, transform=R.FeatureTransform(spec, layout)))
    rows = rows_of(files)
    ids, values = out["ids"], out["values"]
    assert ids.shape == values.shape == (1200, layout.slot_count)
    for field in layout.fields:
        block = ids[:, field.first_slot : field.first_slot + field.slots]
        assert block.min() >= field.offset and block.max() < field.offset + field.size, field.spec.name
        cells = [r[columns.index(field.spec.name)] for r in rows]
        np.testing.assert_array_equal(block[:, 0] == field.offset, [c == "" for c in cells])
    bag = layout.by_name(BAG)
    weights = values[:, bag.first_slot : bag.first_slot + bag.slots]
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)  # mean pooling; an empty bag: missing id
    lengths = [min(len(r[-1].split("|")), 6) if r[-1] else 1 for r in rows]
    np.testing.assert_array_equal((weights > 0).sum(axis=1), lengths)
    assert max(len(r[-1].split("|")) for r in rows) > 6  # truncation at max_length was exercised
    i1 = layout.by_name("i1")  # bucketize at the teacher's boundaries: count c -> bucket floor(log2(1 + c))
    counts = np.array([float(r[1]) for r in rows if r[1]])
    np.testing.assert_array_equal(
        ids[:, i1.first_slot][ids[:, i1.first_slot] > i1.offset] - i1.offset - 1,
        np.minimum(np.floor(np.log2(1 + counts)), 15),
    )


def test_hashing_is_the_same_in_another_process_with_another_hash_seed(synth_tsv, tmp_path):
    files, columns, _ = synth_tsv
    features = features_for(columns, max_length=6)
    spec = F.spec_from_dict(features)
    here, _ = collect(R.raw_dataset([str(files[0])], spec, 300, transform=R.FeatureTransform(spec)))
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = {[str(es.ENTRYPOINTS)]!r}
        import numpy as np, deepfm_features as F, deepfm_raw as R
        spec = F.spec_from_dict(json.loads(sys.argv[1]))
        ids = [f["ids"].numpy() for f, _ in R.raw_dataset([{str(files[0])!r}], spec, 300,
                                                          transform=R.FeatureTransform(spec))]
        np.save({str(tmp_path / "ids.npy")!r}, np.concatenate(ids))
    """)
    env = dict(os.environ, PYTHONHASHSEED="12345", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([es.PYTHON, "-c", script, json.dumps(features)], check=True, env=env, timeout=120)
    np.testing.assert_array_equal(np.load(tmp_path / "ids.npy"), here["ids"])
    c1 = F.build_layout(spec).by_name("c1")  # and the bucket is FarmHash's Fingerprint64 mod buckets
    cells = [row[columns.index("c1")] for row in rows_of(files[:1])]
    r = next(i for i, cell in enumerate(cells) if cell)
    fingerprint = tf.fingerprint(tf.constant([cells[r]]), method="farmhash64").numpy()[0].view(np.uint64)[0]
    assert here["ids"][r, c1.first_slot] == c1.offset + 1 + int(fingerprint) % 1000


BAD_LINES = ["1\t3", "0\t" + "x\t" * 40, "yes\t" + "\t" * 40]  # short; non-numeric i1; non-numeric label


def _with_bad_rows(tmp_path, files):
    lines = open(files[0]).read().splitlines()[:100]
    mixed = lines[:10] + BAD_LINES[:1] + lines[10:50] + BAD_LINES[1:] + lines[50:]
    path = tmp_path / "mixed.tsv"
    path.write_text("\n".join(mixed) + "\n")
    return path, lines


@pytest.mark.runtimes
def test_skip_drops_bad_rows_and_counts_them(synth_tsv, tmp_path):
    files, columns, _ = synth_tsv
    path, good_lines = _with_bad_rows(tmp_path, files)
    spec = F.spec_from_dict(features_for(columns, max_length=6, bad_rows="skip"))
    batches = list(R.raw_dataset([str(path)], spec, 32))
    assert sum(int(f[F.BAD_ROWS_KEY]) for f, _ in batches) == 3
    labels = np.concatenate([label.numpy() for _, label in batches])
    np.testing.assert_array_equal(labels, [float(line.split("\t")[0]) for line in good_lines])
    c5 = np.concatenate([f["c5"].numpy() for f, _ in batches])
    assert [c.decode() for c in c5] == [line.split("\t")[columns.index("c5")] for line in good_lines]


@pytest.mark.runtimes
def test_fail_stops_naming_the_file_and_the_row(synth_tsv, tmp_path):
    files, columns, _ = synth_tsv
    path, _ = _with_bad_rows(tmp_path, files)
    spec = F.spec_from_dict(features_for(columns, max_length=6, bad_rows="fail"))
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        list(R.raw_dataset([str(path)], spec, 32))
    message = str(caught.value)
    assert "bad record: row has 2 columns" in message and str(path) in message, message
    assert "1\\t3" in message.replace("\t", "\\t"), message


def _example(row, columns, spec):
    feature = {"clicked": tf.train.Feature(float_list=tf.train.FloatList(value=[float(row[0])]))}
    for field in spec.numeric:
        cell = row[columns.index(field.name)]
        if cell:
            feature[field.name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(cell)]))
    for field in spec.categorical:
        cell = row[columns.index(field.name)]
        if cell:
            feature[field.name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[cell.encode()]))
    tokens = [t.encode() for t in row[-1].split("|") if t]
    feature[BAG] = tf.train.Feature(bytes_list=tf.train.BytesList(value=tokens))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.mark.runtimes
def test_examples_with_raw_features_by_name_give_the_same_inputs_as_text(synth_tsv, tmp_path):
    files, columns, boundaries = synth_tsv
    text = features_for(columns, boundaries, max_length=6)
    spec = F.spec_from_dict(text)
    path = tmp_path / "raw.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row in rows_of(files):
            writer.write(_example(row, columns, spec))
    as_examples = dict(text, format="tfrecord")
    del as_examples["columns"]
    example_spec = F.spec_from_dict(as_examples)
    from_text, text_labels = collect(
        R.raw_dataset([str(f) for f in files], spec, 256, transform=R.FeatureTransform(spec))
    )
    from_examples, labels = collect(
        R.raw_dataset([str(path)], example_spec, 256, transform=R.FeatureTransform(example_spec))
    )
    np.testing.assert_array_equal(labels, text_labels)
    np.testing.assert_array_equal(from_examples["ids"], from_text["ids"])
    np.testing.assert_allclose(from_examples["values"], from_text["values"], rtol=1e-6)


@pytest.mark.runtimes
def test_slot_pooling_sums_a_fields_slots_and_masks_narrower_fields():
    spec = F.spec_from_dict(
        {
            "format": "tfrecord",
            "label": "y",
            "numeric": {"n": {"embedding_size": 2}},
            "categorical": {"c": {"hash_buckets": 4}},
            "multi_hot": {"m": {"separator": "|", "hash_buckets": 4, "max_length": 3}},
        }
    )
    layout = F.build_layout(spec)
    scaled = tf.random.stateless_normal([5, layout.slot_count, 4], seed=[1, 2])
    pooled = R.SlotPooling(layout, 4)(scaled).numpy()
    assert pooled.shape == (5, 3, 4)
    np.testing.assert_allclose(pooled[:, 0, :2], scaled[:, 0, :2])
    np.testing.assert_array_equal(pooled[:, 0, 2:], 0.0)
    np.testing.assert_allclose(pooled[:, 1], scaled[:, 1])
    np.testing.assert_allclose(pooled[:, 2], scaled[:, 2:].numpy().sum(axis=1), rtol=1e-5)
    with pytest.raises(ValueError, match="embedding_size"):
        R.SlotPooling(layout, 1)


# ---- serving and training ----


def _scramble(model, seed=5):
    """Weights big enough that a wrong id or weight shows in the probabilities."""
    for i, var in enumerate(model.all_variables):
        var.assign(tf.random.stateless_normal(var.shape, seed=[seed, i], stddev=0.3))


@pytest.mark.runtimes
def test_raw_serving_in_a_fresh_process_equals_the_training_path(synth_tsv, tmp_path):
    files, columns, boundaries = synth_tsv
    rows = rows_of(files)[:300]
    c1_cells = sorted({row[columns.index("c1")] for row in rows if row[columns.index("c1")]})
    vocabulary = tmp_path / "c1.txt"
    vocabulary.write_text("\n".join(c1_cells[::2]) + "\n")  # half the tokens: the rest are out of vocabulary
    features = features_for(columns, boundaries, buckets=200, bag_buckets=100, max_length=6)
    features["categorical"]["c1"] = {"vocabulary": str(vocabulary)}
    features["numeric"]["i2"] = {"transform": "log1p", "embedding_size": 4}
    spec = F.spec_from_dict(features)
    layout = F.build_layout(spec)
    assert layout.by_name("c1").size == 2 + len(c1_cells[::2])
    model = PooledDeepFM(layout)
    _scramble(model)
    transform = R.FeatureTransform(spec, layout)
    batches = R.raw_dataset([str(files[0])], spec, 300, transform=transform).take(1)
    expected = np.concatenate([model.predict(f["ids"], f["values"]).numpy() for f, _ in batches])
    export = R.RawServing(model, spec, layout).save(str(tmp_path / "model" / "1"))
    vocabulary.unlink()  # serving needs no vocabulary file: the SavedModel carries it
    request = {
        field.name: [
            float(r[columns.index(field.name)]) if r[columns.index(field.name)] else float("nan") for r in rows
        ]
        for field in spec.numeric
    }
    request.update(
        {field.name: [r[columns.index(field.name)] for r in rows] for field in spec.categorical + spec.multi_hot}
    )
    (tmp_path / "request.json").write_text(json.dumps(request))
    script = textwrap.dedent(f"""
        import json
        import numpy as np, tensorflow as tf
        request = json.load(open({str(tmp_path / "request.json")!r}))
        serve = tf.saved_model.load({export!r}).signatures["serving_default"]
        inputs = {{k: tf.constant(v, tf.string if isinstance(v[0], str) else tf.float32) for k, v in request.items()}}
        np.save({str(tmp_path / "served.npy")!r}, serve(**inputs)["probabilities"].numpy())
    """)
    subprocess.run(
        [es.PYTHON, "-c", script], check=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=tmp_path
    )
    served = np.load(tmp_path / "served.npy")
    assert served.shape == (300,) and np.std(served) > 0.01
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_training_on_raw_rows_gets_close_to_the_teachers_auc(tmp_path):
    """50k raw criteo-tsv rows (600 teacher ids, blanks, a mean-pooled bag), 3 epochs: numeric fields
    bucketized at the teacher's boundaries, categoricals and bag tokens hashed; eval AUC within 0.05 of
    the teacher's own on the same eval rows."""
    columns, boundaries, teacher_auc = write_raw(
        tmp_path, 50000, eval_rows=6000, seed=11, feature_size=600, vocabulary=200
    )
    spec = F.spec_from_dict(features_for(columns, boundaries, buckets=1000, bag_buckets=1000))
    layout = F.build_layout(spec)
    transform = R.FeatureTransform(spec, layout)
    model = PooledDeepFM(layout, deep_layers=(64, 32))
    trainer = T.Trainer(model, T.SparseOptimizer("adagrad", 0.3), DM.StreamingMetrics(), DM.StreamingMetrics())
    train = R.raw_dataset(
        [str(p) for p in sorted((tmp_path / "train").iterdir())],
        spec,
        256,
        transform=transform,
        shuffle_buffer=10000,
        seed=1,
        epochs=3,
    )
    step = tf.function(trainer.train_step)
    for batch in train:
        step(batch)
    assert int(trainer.optimizer.iterations.numpy()) == 3 * int(np.ceil(50000 / 256))
    evaluation = R.raw_dataset([str(p) for p in sorted((tmp_path / "eval").iterdir())], spec, 1024, transform=transform)
    eval_step = tf.function(trainer.eval_step)
    for batch in evaluation:
        eval_step(batch)
    loss, auc, examples = trainer.eval_metrics.result()
    assert examples == 6000
    print(f"eval AUC {auc:.4f}, teacher {teacher_auc:.4f}")
    assert auc > teacher_auc - 0.05, (auc, teacher_auc)
