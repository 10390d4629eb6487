"""`dfm data synth --format criteo-tsv`: raw Criteo-layout text whose labels are the planted teacher's."""

import json
import re

import numpy as np
import pytest

from launcher.cli import main
from launcher.data import raw, synth, synth_rows

HEX8 = re.compile(r"[0-9a-f]{8}")


def _synth(out, *extra, rows=2400, eval_rows=600, seed=5, files=3):
    argv = [
        "data",
        "synth",
        "--format",
        "criteo-tsv",
        "--out",
        str(out),
        "--rows",
        str(rows),
        "--eval-rows",
        str(eval_rows),
        "--files",
        str(files),
        "--seed",
        str(seed),
        *extra,
    ]
    assert main(argv) == 0
    return json.loads((out / "meta.json").read_text())


def _cells(folder):
    paths = sorted(folder.iterdir())
    assert all(p.suffix == ".tsv" for p in paths)
    return [line.split("\t") for p in paths for line in p.read_text().split("\n")[:-1]]


def _decode(cells, generator):
    """Raw cells -> the teacher's inputs, through the same mappings the writer uses (count -> bucket and
    value, categorical id -> keyed hash) inverted over each field's whole vocabulary."""
    layout, renderer = generator.layout, raw.Renderer(generator)
    rows, numeric, fields = len(cells), layout.numeric_fields, len(layout.sizes)
    ids = np.empty((rows, fields), dtype=np.int64)
    values = np.zeros((rows, fields), dtype=np.float32)
    for f in range(fields):
        column = [row[1 + f] for row in cells]
        present = np.array([v != "" for v in column])
        if f < numeric:
            field_ids, field_values = synth_rows.numeric_features(
                np.array([int(v or 0) for v in column]), layout.offsets[f]
            )
        else:
            vocabulary = layout.offsets[f] + np.arange(layout.sizes[f])
            lookup = {f"{code:08x}": i for code, i in zip(renderer.codes(f, vocabulary).tolist(), vocabulary.tolist())}
            field_ids, field_values = np.array([lookup.get(v, layout.offsets[f]) for v in column]), np.ones(rows)
        ids[:, f] = np.where(present, field_ids, layout.offsets[f])
        values[:, f] = np.where(present, field_values, 0.0)
    bag = generator.sampler.multi_hot
    if bag is None:
        return synth_rows.Draw(ids, values, np.zeros((rows, numeric), dtype=np.int64))
    tokens = {f"{code:08x}": i for i, code in enumerate(renderer.bag_codes(np.arange(bag.vocabulary)).tolist())}
    bags = [[tokens[t] for t in row[1 + fields].split("|")] if row[1 + fields] else [] for row in cells]
    bag_ids = np.zeros((rows, bag.max_length), dtype=np.int64)
    for r, row_ids in enumerate(bags):
        bag_ids[r, : len(row_ids)] = row_ids
    lengths = np.array([len(b) for b in bags], dtype=np.int64)
    return synth_rows.Draw(ids, values, np.zeros((rows, numeric), dtype=np.int64), None, bag_ids, lengths)


def test_columns_parse_as_label_counts_hex_and_bags(tmp_path):
    meta = _synth(tmp_path / "s", "--multi-hot", "recent_cats")
    cells = _cells(tmp_path / "s" / "train")
    assert len(cells) == 2400 and {len(row) for row in cells} == {41}
    assert meta["columns"] == [
        "clicked",
        *[f"i{k}" for k in range(1, 14)],
        *[f"c{k}" for k in range(1, 27)],
        "recent_cats",
    ]
    assert {row[0] for row in cells} == {"0", "1"}
    counts = [int(v) for row in cells for v in row[1:14] if v]
    assert min(counts) >= 0 and max(counts) > 1000, "non-negative, heavy-tailed counts"
    assert all(HEX8.fullmatch(v) for row in cells for v in row[14:40] if v)
    lengths = [len(row[40].split("|")) for row in cells if row[40]]
    assert all(HEX8.fullmatch(t) for row in cells if row[40] for t in row[40].split("|"))
    assert 1 == min(lengths) and max(lengths) <= synth_rows.MultiHot().max_length == meta["multi_hot"]["max_length"]
    assert len(set(lengths)) > 5, "variable length"


@pytest.mark.parametrize("rate", [0.0, 0.05, 0.2])
def test_missing_cells_appear_at_the_requested_rate(tmp_path, rate):
    _synth(tmp_path / "s", "--missing-rate", str(rate), "--multi-hot", "tags", rows=3000, eval_rows=0)
    cells = np.array(_cells(tmp_path / "s" / "train"))
    blank = cells[:, 1:] == ""
    # 3000 x 39 cells: the share is within a few standard errors (0.004 at 20%) of the rate.
    assert blank[:, :39].mean() == pytest.approx(rate, abs=0.015)
    assert blank[:, 39].mean() == pytest.approx(rate, abs=0.03)
    assert (cells[:, 0] != "").all(), "labels are never missing"


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        _synth(tmp_path / name, "--multi-hot", "tags", seed=seed)

    def read(name):
        return [p.read_bytes() for folder in ("train", "eval") for p in sorted((tmp_path / name / folder).iterdir())]

    assert read("a") == read("b")
    assert read("a") != read("c")


@pytest.mark.parametrize("multi_hot", [False, True])
def test_reported_teacher_auc_is_the_teachers_auc_on_the_written_rows(tmp_path, monkeypatch, multi_hot):
    monkeypatch.setattr(synth, "CHUNK_ROWS", 1000)  # files straddle chunks
    meta = _synth(tmp_path / "s", *(["--multi-hot", "tags"] if multi_hot else []), "--missing-rate", "0.1")
    generator = synth.Generator(5, missing_rate=0.1, multi_hot=synth_rows.MultiHot() if multi_hot else None)
    for folder, key in (("train", "teacher_auc"), ("eval", "eval_teacher_auc")):
        cells = _cells(tmp_path / "s" / folder)
        labels = np.array([float(row[0]) for row in cells])
        draw = _decode(cells, generator)
        probs = (1 / (1 + np.exp(-generator.teacher.logits(draw)))).astype(np.float32)
        assert synth.roc_auc(labels, probs) == pytest.approx(meta[key], abs=1e-9)
        assert 0.7 < meta[key] < 0.95
    if multi_hot:  # the bag is part of the teacher: without it the scores change
        empty = synth_rows.Draw(
            draw.ids, draw.values, draw.counts, None, draw.bag_ids, np.zeros(len(draw), dtype=np.int64)
        )
        assert not np.allclose(generator.teacher.logits(empty), generator.teacher.logits(draw))


def test_libsvm_with_the_same_flags_is_the_pre_indexed_view_of_the_same_rows(tmp_path):
    """A missing cell is the field's first id with value 0; a count is its bucket id and log1p value."""
    assert (
        main(
            [
                "data",
                "synth",
                "--format",
                "libsvm",
                "--out",
                str(tmp_path / "l"),
                "--rows",
                "1000",
                "--seed",
                "5",
                "--missing-rate",
                "0.1",
            ]
        )
        == 0
    )
    _synth(tmp_path / "t", "--missing-rate", "0.1", rows=1000, eval_rows=0, files=1)
    rows = [line.split() for line in (tmp_path / "l" / "train" / "part-00000.libsvm").read_text().splitlines()]
    cells = _cells(tmp_path / "t" / "train")
    layout = synth.Generator(5).layout
    blanks = 0
    for row, row_cells in zip(rows, cells):
        assert row[0] == row_cells[0]
        for f, (pair, cell) in enumerate(zip(row[1:], row_cells[1:])):
            feature_id, value = int(pair.split(":")[0]), np.float32(pair.split(":")[1])
            if cell == "":
                blanks += 1
                assert (feature_id, value) == (layout.offsets[f], 0.0)
            elif f < layout.numeric_fields:
                expected_id, expected_value = synth_rows.numeric_features(np.array([int(cell)]), layout.offsets[f])
                assert (feature_id, value) == (expected_id[0], expected_value[0])
            else:
                assert value == 1.0
    assert len(rows) == len(cells) == 1000 and blanks > 0.05 * 1000 * 39


def test_bad_flags_exit_2(tmp_path, capsys):
    base = ["data", "synth", "--out", str(tmp_path / "x"), "--rows", "10"]
    assert main(base + ["--multi-hot", "tags"]) == 2
    assert "--format criteo-tsv" in capsys.readouterr().err
    assert main(base + ["--format", "criteo-tsv", "--missing-rate", "1.5"]) == 2
    assert "missing_rate" in capsys.readouterr().err
    assert main(base + ["--format", "criteo-tsv", "--multi-hot", "c3"]) == 2
    assert "already a column name" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
