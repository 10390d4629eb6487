"""Synthetic Criteo-like click data with labels from a planted teacher, so the achievable AUC is known.

Layout: field f owns the global ids `offsets[f] .. offsets[f] + sizes[f] - 1` inside `feature_size`.
The first `numeric_fields` fields are heavy-tailed counts (log-normal or Pareto), bucketized on a log2
scale into `NUMERIC_BUCKETS` ids, with value `min(log1p(x), 10) / 10`; the others are categorical with
Zipf-distributed ids (frequency rank shuffled over the field's ids) and value 1.

Teacher: a factorization machine over the same (id, value) pairs (first-order weights plus pairwise
latent-vector interactions), the same function class DeepFM contains. Its logit is scaled to a chosen
spread (`signal`) and shifted so that about `positive_rate` of the labels are 1; labels are Bernoulli
draws from its probabilities. `teacher_auc` is the teacher's AUC on the drawn sample: no model can
expect to beat it on this data.

Everything is numpy and deterministic by `seed`; the teacher depends on the seed and the layout only,
not on the number of rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_FIELD_SIZE = 39
DEFAULT_FEATURE_SIZE = 117581  # the entry points' `feature_size` default
NUMERIC_BUCKETS = 16
LATENT_DIM = 4
INTERACTION_SHARE = 0.3  # share of the teacher logit's variance from pairwise terms
CALIBRATION_ROWS = 20000
_CHUNK = 65536
CHUNK_ROWS = 65536  # rows per random stream: part of what a seed means, keep it fixed

_STREAM_LAYOUT, _STREAM_TEACHER, _STREAM_CALIBRATION, _STREAM_SAMPLE = range(4)


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *stream]))


@dataclass(frozen=True)
class SynthData:
    ids: np.ndarray  # int64[rows, field_size], global feature ids
    values: np.ndarray  # float32[rows, field_size]
    labels: np.ndarray  # float32[rows], 0 or 1
    probs: np.ndarray  # float32[rows], the teacher's click probability
    teacher_auc: float
    field_size: int
    feature_size: int
    seed: int

    @property
    def rows(self) -> int:
        return len(self.labels)

    def take(self, start: int, stop: int) -> "SynthData":
        """Rows [start, stop) with their own teacher AUC (e.g. a train / eval split of one draw)."""
        part = slice(start, stop)
        labels, probs = self.labels[part], self.probs[part]
        return SynthData(self.ids[part], self.values[part], labels, probs, roc_auc(labels, probs),
                         self.field_size, self.feature_size, self.seed)


@dataclass(frozen=True)
class _Layout:
    offsets: np.ndarray  # int64[field_size]
    sizes: np.ndarray  # int64[field_size]
    numeric_fields: int


def _layout(field_size: int, feature_size: int, numeric_fields: int) -> _Layout:
    categorical = field_size - numeric_fields
    numeric_ids = numeric_fields * NUMERIC_BUCKETS
    room = feature_size - numeric_ids
    if field_size < 1 or not 0 <= numeric_fields <= field_size:
        raise ValueError(f"need field_size >= 1 and 0 <= numeric_fields <= field_size, got {field_size}, {numeric_fields}")
    if room < 2 * categorical or (categorical == 0 and room < 0):
        raise ValueError(f"feature_size {feature_size} is too small for {numeric_fields} numeric fields x "
                         f"{NUMERIC_BUCKETS} buckets and {categorical} categorical fields of at least 2 ids "
                         f"(need at least {numeric_ids + 2 * categorical})")
    sizes = [NUMERIC_BUCKETS] * numeric_fields
    if categorical:
        # Criteo's vocabularies span orders of magnitude: give fields geometric shares of the room.
        weights = np.geomspace(1.0, 200.0, categorical)
        cat_sizes = np.maximum(2, np.floor(room * weights / weights.sum())).astype(np.int64)
        cat_sizes[-1] += room - cat_sizes.sum()
        if cat_sizes[-1] < 2:
            raise ValueError(f"feature_size {feature_size} is too small for this many fields")
        sizes += cat_sizes.tolist()
    sizes_arr = np.asarray(sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes_arr)[:-1]]).astype(np.int64)
    return _Layout(offsets, sizes_arr, numeric_fields)


class _Sampler:
    """Draws feature rows for a layout; the per-field distributions come from the layout stream."""

    def __init__(self, layout: _Layout, seed: int):
        rng = _rng(seed, _STREAM_LAYOUT)
        self.layout = layout
        n_num = layout.numeric_fields
        self.lognormal = rng.random(n_num) < 0.5
        self.mu = rng.uniform(0.0, 3.0, n_num)
        self.sigma = rng.uniform(1.0, 2.0, n_num)
        self.pareto_shape = rng.uniform(1.1, 2.5, n_num)
        self.pareto_scale = rng.uniform(1.0, 20.0, n_num)
        self.cdfs, self.perms = [], []
        for size in layout.sizes[n_num:]:
            exponent = rng.uniform(1.05, 1.4)
            weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
            cdf = np.cumsum(weights)
            self.cdfs.append(cdf / cdf[-1])
            self.perms.append(rng.permutation(size))

    def draw(self, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        layout = self.layout
        field_size = len(layout.sizes)
        ids = np.empty((rows, field_size), dtype=np.int64)
        values = np.ones((rows, field_size), dtype=np.float32)
        for f in range(layout.numeric_fields):
            if self.lognormal[f]:
                raw = rng.lognormal(self.mu[f], self.sigma[f], rows)
            else:
                raw = self.pareto_scale[f] * rng.pareto(self.pareto_shape[f], rows)
            counts = np.floor(raw)
            bucket = np.minimum(np.floor(np.log2(1.0 + counts)), NUMERIC_BUCKETS - 1).astype(np.int64)
            ids[:, f] = layout.offsets[f] + bucket
            values[:, f] = np.minimum(np.log1p(counts), 10.0) / 10.0
        for k, (cdf, perm) in enumerate(zip(self.cdfs, self.perms)):
            f = layout.numeric_fields + k
            rank = np.minimum(np.searchsorted(cdf, rng.random(rows), side="right"), len(cdf) - 1)
            ids[:, f] = layout.offsets[f] + perm[rank]
        return ids, values


class _Teacher:
    """A factorization machine with its logit standardized, scaled to `signal` and biased to a rate."""

    def __init__(self, feature_size: int, seed: int, sampler: _Sampler, signal: float, positive_rate: float):
        rng = _rng(seed, _STREAM_TEACHER)
        self.linear = rng.normal(0.0, 1.0, feature_size).astype(np.float32)
        self.latent = rng.normal(0.0, 1.0, (feature_size, LATENT_DIM)).astype(np.float32)
        ids, values = sampler.draw(CALIBRATION_ROWS, _rng(seed, _STREAM_CALIBRATION))
        first, pair = self._terms(ids, values)
        self.first_stats = (first.mean(), first.std() or 1.0)
        self.pair_stats = (pair.mean(), pair.std() or 1.0)
        self.scale = signal
        self.bias = 0.0
        self.bias = _bias_for_rate(self.logits(ids, values), positive_rate)

    def _terms(self, ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first = (self.linear[ids] * values).sum(axis=1, dtype=np.float64)
        embedded = self.latent[ids] * values[:, :, None]
        pair = 0.5 * (embedded.sum(axis=1) ** 2 - (embedded ** 2).sum(axis=1)).sum(axis=1, dtype=np.float64)
        return first, pair

    def logits(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.empty(len(ids), dtype=np.float64)
        for start in range(0, len(ids), _CHUNK):
            part = slice(start, start + _CHUNK)
            first, pair = self._terms(ids[part], values[part])
            first = (first - self.first_stats[0]) / self.first_stats[1]
            pair = (pair - self.pair_stats[0]) / self.pair_stats[1]
            mixed = np.sqrt(1.0 - INTERACTION_SHARE) * first + np.sqrt(INTERACTION_SHARE) * pair
            out[part] = self.scale * mixed + self.bias
        return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _bias_for_rate(logits: np.ndarray, rate: float) -> float:
    low, high = -30.0, 30.0
    for _ in range(60):
        mid = (low + high) / 2
        if _sigmoid(logits + mid).mean() < rate:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half); nan without both classes."""
    labels = np.asarray(labels) > 0.5
    scores = np.asarray(scores, dtype=np.float64)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    _, tie_group, tie_counts = np.unique(scores[order], return_inverse=True, return_counts=True)
    ends = np.cumsum(tie_counts)
    mean_rank = (ends - tie_counts + 1 + ends) / 2.0
    ranks = np.empty(len(scores))
    ranks[order] = mean_rank[tie_group]
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


class Generator:
    """One seed's layout, feature distributions and teacher; draws rows in chunks of `CHUNK_ROWS`,
    chunk k from its own random stream, so a long draw can be written without holding it in memory."""

    def __init__(self, seed: int, field_size: int = DEFAULT_FIELD_SIZE, feature_size: int = DEFAULT_FEATURE_SIZE,
                 numeric_fields: int | None = None, signal: float = 1.5, positive_rate: float = 0.25):
        if not 0.0 < positive_rate < 1.0:
            raise ValueError(f"positive_rate must be in (0, 1), got {positive_rate}")
        self.seed, self.field_size, self.feature_size = seed, field_size, feature_size
        layout = _layout(field_size, feature_size, field_size // 3 if numeric_fields is None else numeric_fields)
        self.sampler = _Sampler(layout, seed)
        self.teacher = _Teacher(feature_size, seed, self.sampler, signal, positive_rate)

    def chunks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Yield (ids, values, labels, probs) for rows 0..rows-1, in order."""
        for k, start in enumerate(range(0, rows, CHUNK_ROWS)):
            count = min(CHUNK_ROWS, rows - start)
            rng = _rng(self.seed, _STREAM_SAMPLE, k)
            ids, values = self.sampler.draw(count, rng)
            probs = _sigmoid(self.teacher.logits(ids, values))
            labels = (rng.random(count) < probs).astype(np.float32)
            yield ids, values, labels, probs.astype(np.float32)


def generate(rows: int, seed: int, field_size: int = DEFAULT_FIELD_SIZE,
             feature_size: int = DEFAULT_FEATURE_SIZE, numeric_fields: int | None = None,
             signal: float = 1.5, positive_rate: float = 0.25) -> SynthData:
    """Draw `rows` examples in memory. `numeric_fields` defaults to a third of the fields (13 of
    Criteo's 39); `signal` is the spread (std) of the teacher's logit: larger is an easier task."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    generator = Generator(seed, field_size, feature_size, numeric_fields, signal, positive_rate)
    ids, values, labels, probs = (np.concatenate(part) for part in zip(*generator.chunks(rows)))
    return SynthData(ids, values, labels, probs, roc_auc(labels, probs), field_size, feature_size, seed)


def _check_files(rows: int, files: int) -> int:
    if files < 1:
        raise ValueError(f"files must be at least 1, got {files}")
    if rows % files:
        raise ValueError(f"{rows} rows do not split into {files} files of equal size "
                         f"(use a row count divisible by {files}, e.g. {rows - rows % files})")
    return rows // files


def _file_names(out_dir: Path, files: int, prefix: str, suffix: str) -> list[Path]:
    return [Path(out_dir) / f"{prefix}-{i:05d}{suffix}" for i in range(files)]


def write_tfrecords(out_dir: str | Path, data: SynthData, files: int, prefix: str = "part") -> list[Path]:
    """Write `data` as `files` TFRecord files of equal record counts; rows must divide evenly."""
    from launcher.data.tfrecord import serialize_examples, write_records

    per_file = _check_files(data.rows, files)
    paths = _file_names(Path(out_dir), files, prefix, ".tfrecord")
    for i, path in enumerate(paths):
        part = slice(i * per_file, (i + 1) * per_file)
        write_records(path, serialize_examples(data.labels[part], data.ids[part], data.values[part]))
    return paths


def _libsvm_lines(labels: np.ndarray, ids: np.ndarray, values: np.ndarray) -> Iterator[str]:
    for label, row_ids, row_values in zip(labels.tolist(), ids.tolist(), values.tolist()):
        pairs = " ".join(f"{i}:{v:.9g}" for i, v in zip(row_ids, row_values))
        yield f"{label:g} {pairs}\n"


def write_libsvm(out_dir: str | Path, data: SynthData, files: int, prefix: str = "part") -> list[Path]:
    """Write `data` as libsvm text (`label id:value ...`, field order), `files` files of equal rows."""
    per_file = _check_files(data.rows, files)
    paths = _file_names(Path(out_dir), files, prefix, ".libsvm")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(paths):
        part = slice(i * per_file, (i + 1) * per_file)
        with open(path, "w") as out:
            out.writelines(_libsvm_lines(data.labels[part], data.ids[part], data.values[part]))
    return paths


def write_parts(generator: Generator, parts: list[tuple[Path, int, int]], fmt: str = "tfrecord",
                prefix: str = "part", on_rows: Callable[[int], None] = lambda n: None) -> list[tuple[float, float]]:
    """Draw the rows of all `parts` [(out_dir, rows, files)] as one sequence, chunk by chunk, and write
    each part's rows in order into its equal-size files. -> (teacher AUC, positive rate) per part.

    Memory stays at one chunk plus a label and a probability per row (for the AUC)."""
    from launcher.data.tfrecord import quiet_tensorflow, serialize_examples

    suffix = ".tfrecord" if fmt == "tfrecord" else ".libsvm"
    targets = []  # (part index, path, rows) in writing order
    for index, (out_dir, rows, files) in enumerate(parts):
        per_file = _check_files(rows, files)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        targets += [(index, path, per_file) for path in _file_names(Path(out_dir), files, prefix, suffix)]
    if fmt == "tfrecord":
        tf = quiet_tensorflow()
        opener = lambda path: tf.io.TFRecordWriter(str(path))  # noqa: E731
        encode = serialize_examples
    else:
        opener = lambda path: open(path, "w")  # noqa: E731
        encode = _libsvm_lines
    seen = [([], []) for _ in parts]
    pending = iter(targets)
    current, left, writer = None, 0, None
    for ids, values, labels, probs in generator.chunks(sum(rows for _, rows, _ in parts)):
        offset = 0
        while offset < len(labels):
            if left == 0:
                if writer is not None:
                    writer.close()
                current, path, left = next(pending)
                writer = opener(path)
            take = slice(offset, offset + min(left, len(labels) - offset))
            for item in encode(labels[take], ids[take], values[take]):
                writer.write(item)
            seen[current][0].append(labels[take])
            seen[current][1].append(probs[take])
            left -= take.stop - take.start
            offset = take.stop
        on_rows(len(labels))
    if writer is not None:
        writer.close()
    results = []
    for labels, probs in seen:
        labels, probs = np.concatenate(labels), np.concatenate(probs)
        results.append((roc_auc(labels, probs), float(labels.mean())))
    return results
