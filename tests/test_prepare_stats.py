"""`dfm data prepare`'s libsvm statistics, gathered in the read pass from the parsed blocks: the distinct-count
sketch against exact counts, and one partition's tally merged with another's (numpy only, no Spark)."""

from __future__ import annotations

import numpy as np
import pytest

from launcher.data import prepare_app_stats


@pytest.fixture
def app():
    """The statistics module, as the Spark application imports it (numpy only, so it loads as it is)."""
    return prepare_app_stats


def sketched(app, ids: np.ndarray) -> np.ndarray:
    registers = np.zeros((ids.shape[1], 1 << app.SKETCH_BITS), np.uint8)
    for start in range(0, len(ids), 4096):
        app.sketch_add(registers, ids[start : start + 4096])
    return registers


@pytest.mark.parametrize("distinct", [0, 1, 7, 300, 5000, 60000, 400000])
def test_distinct_ids_are_counted_within_a_few_percent_and_small_counts_exactly(app, distinct):
    rng = np.random.default_rng(distinct)
    ids = rng.choice(1 << 40, distinct, replace=False)
    repeated = np.concatenate([ids, rng.choice(ids, distinct // 2) if distinct else ids])  # repeats count once
    (count,) = app.sketch_count(sketched(app, rng.permutation(repeated).reshape(-1, 1)))
    if distinct <= 300:
        assert abs(count - distinct) <= distinct // 100, count
    else:
        assert abs(count - distinct) <= 0.05 * distinct, count  # ~1.6% standard error: 3 sigma


def test_sketches_merge_by_maximum_as_the_union_of_their_ids(app):
    ids = np.arange(30000, dtype=np.int64).reshape(-1, 3)
    merged = np.maximum(sketched(app, ids[:6000]), sketched(app, ids[4000:]))
    assert np.array_equal(merged, sketched(app, ids))


def tally(app, partition, items, job):
    counted = app.Tally(job, partition)
    for kind, value in items:
        counted.bad(value) if kind == "bad" else counted.good(value)
    return counted.value()


def test_the_read_pass_tallies_rows_bad_rows_labels_largest_ids_and_distinct_ids(app):
    """Two partitions' tallies, merged, give the statistics stats.json holds for libsvm input."""
    job = {"input": {"format": "libsvm"}, "stats": True}
    ids = np.array([[0, 5], [3, 5], [3, 9], [1, 5]], np.int32)
    labels = np.float32([1, 0, 0, 1])
    first = [("ok", (labels[:3], (ids[:3], np.ones((3, 2), np.float32)))), ("bad", "a: no label: 'x'")]
    second = [("ok", (labels[3:], (ids[3:], np.ones((1, 2), np.float32))))]
    empty = tally(app, 2, [], job)
    tallies = [tally(app, index, items, job) for index, items in enumerate((first, second))]
    bad, rows, partial, _ = app.merge_tallies(app.merge_tallies(tallies[0], empty), tallies[1])
    assert (bad, rows) == (1, 4)
    stats = app.indexed_statistics(rows, partial, 2)
    assert stats["positive_rate"] == 0.5 and stats["feature_size"] == 10
    assert stats["columns"] == {
        "field0": {"kind": "indexed", "distinct": 3, "max_id": 3},
        "field1": {"kind": "indexed", "distinct": 2, "max_id": 9},
    }
    skipped = tally(app, 0, first, {**job, "stats": False})
    assert skipped == (1, 3, None, [((0, 0), "a: no label: 'x'")])  # statistics off: counts only


def test_merged_tallies_keep_the_first_bad_rows_of_the_input_whatever_the_merge_order(app):
    job = {"input": {"format": "libsvm"}, "stats": False}
    tallies = [tally(app, index, [("bad", f"{index}.{k}") for k in range(4)], job) for index in range(3)]
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        merged = app.merge_tallies(app.merge_tallies(tallies[order[0]], tallies[order[1]]), tallies[order[2]])
        assert merged[0] == 12
        assert [text for _, text in merged[3]] == ["0.0", "0.1", "0.2", "0.3", "1.0"]
