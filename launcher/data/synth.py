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

`deep_share` (0 by default, leaving the teacher a pure FM) moves that share of the logit's variance to a
random ReLU network over the rows' concatenated latent vectors: a function no FM holds, that only a model's
MLP can learn, as real click data has (a recipe that silences the MLP loses there and not on a pure FM).

Optional extras for raw renderings (`launcher.data.raw`), both off by default so the pre-indexed
output is unchanged: `missing_rate` blanks cells (a missing field has value 0, so it adds nothing to
the teacher's logit, and its id is the field's first), and `multi_hot` adds a variable-length bag of ids
from its own vocabulary whose mean-pooled weights and latent vector enter the teacher as one more field.

Days (`day`, off by default): data of day N of a stream of daily click logs from one seed, for incremental
training. The teacher drifts: each day renews the share `drift` of its FM weights' variance (a random walk that
keeps them standard normal; day 1's are the seed's); and ids come into use: each categorical id is first drawn on
day 1 with probability 1 - `new_ids`, else on a later day (geometric: a share `new_ids`**N of a field's ids is not in
use yet on day N); a field's Zipf ranks go to its ids in use, in the seed's order, so a new id may be a common one.
Each day's rows come from their own random streams. The layout and the deep teacher are the seed's every day.

Everything is numpy and deterministic by `seed`; the teacher depends on the seed and the layout only,
not on the number of rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from launcher.facts.contract import bundled_hparams

_SCRIPT_DEFAULTS = bundled_hparams().DEFAULTS  # the samples fit the bundled scripts' default model
DEFAULT_FIELD_SIZE = _SCRIPT_DEFAULTS["field_size"]
DEFAULT_FEATURE_SIZE = _SCRIPT_DEFAULTS["feature_size"]
NUMERIC_BUCKETS = 16
LATENT_DIM = 4
INTERACTION_SHARE = 0.3  # share of the teacher logit's variance from pairwise terms
CALIBRATION_ROWS = 20000
_CHUNK = 65536
CHUNK_ROWS = 65536  # rows per random stream: part of what a seed means, keep it fixed

_STREAM_LAYOUT, _STREAM_TEACHER, _STREAM_CALIBRATION, _STREAM_SAMPLE = range(4)
_STREAM_BAG_LAYOUT, _STREAM_BAG_TEACHER, _STREAM_EXTRAS, _STREAM_DEEP_TEACHER = range(4, 8)
_STREAM_DRIFT, _STREAM_BIRTH = range(8, 10)
DEEP_UNITS = 32  # hidden units of the deep teacher (deep_share > 0)


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
        return SynthData(
            self.ids[part],
            self.values[part],
            labels,
            probs,
            roc_auc(labels, probs),
            self.field_size,
            self.feature_size,
            self.seed,
        )


@dataclass(frozen=True)
class MultiHot:
    """A bag of ids per row from its own Zipf vocabulary: 1..max_length ids (geometric lengths around
    `mean_length`), or none when missing."""

    vocabulary: int = 1000
    max_length: int = 20
    mean_length: float = 5.0


@dataclass(frozen=True)
class Draw:
    """Feature rows as the teacher sees them, plus the raw counts and blanks behind them."""

    ids: np.ndarray  # int64[rows, field_size]; a missing field holds its first id
    values: np.ndarray  # float32[rows, field_size]; 0 where missing
    counts: np.ndarray  # int64[rows, numeric_fields], the counts the numeric fields encode
    missing: np.ndarray | None = None  # bool[rows, field_size]
    bag_ids: np.ndarray | None = None  # int64[rows, max_length], bag vocabulary ids, 0 past the length
    bag_lengths: np.ndarray | None = None  # int64[rows]; 0 = missing

    def __len__(self) -> int:
        return len(self.ids)

    def slice(self, part: slice) -> "Draw":
        pick = lambda a: None if a is None else a[part]  # noqa: E731
        return Draw(
            self.ids[part],
            self.values[part],
            self.counts[part],
            pick(self.missing),
            pick(self.bag_ids),
            pick(self.bag_lengths),
        )

    def bag_weights(self) -> np.ndarray:
        """float32[rows, max_length]: 1/length on a row's ids (mean pooling), 0 on padding."""
        present = np.arange(self.bag_ids.shape[1]) < self.bag_lengths[:, None]
        return (present / np.maximum(self.bag_lengths, 1)[:, None]).astype(np.float32)


def numeric_features(counts: np.ndarray, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts -> (global id of their log2 bucket, value min(log1p(count), 10) / 10) for one numeric field."""
    counts = np.asarray(counts, dtype=np.float64)
    bucket = np.minimum(np.floor(np.log2(1.0 + counts)), NUMERIC_BUCKETS - 1).astype(np.int64)
    return offset + bucket, (np.minimum(np.log1p(counts), 10.0) / 10.0).astype(np.float32)


def _zipf_cdf(size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    exponent = rng.uniform(1.05, 1.4)
    cdf = np.cumsum(np.arange(1, size + 1, dtype=np.float64) ** -exponent)
    return cdf / cdf[-1], rng.permutation(size)


def _in_use(
    cdf: np.ndarray, perm: np.ndarray, seed: int, field: int, day: int, new_ids: float
) -> tuple[np.ndarray, np.ndarray]:
    """A categorical field's Zipf on `day`: its ranks, in the seed's order, over the ids in use by then."""
    size = len(perm)
    birth = _rng(seed, _STREAM_BIRTH, field).geometric(1.0 - new_ids, size)  # the day each id is first drawn
    used = perm[birth[perm] <= day]
    if len(used) == 0:  # a field keeps at least its most common id
        used = perm[:1]
    top = cdf[len(used) - 1]
    return cdf[: len(used)] / top, used


def _zipf_draw(cdf: np.ndarray, perm: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    return perm[np.minimum(np.searchsorted(cdf, uniform, side="right"), len(cdf) - 1)]


@dataclass(frozen=True)
class _Layout:
    offsets: np.ndarray  # int64[field_size]
    sizes: np.ndarray  # int64[field_size]
    numeric_fields: int


# Data shaped like a public CTR data set (`dfm data synth --like NAME`): its numeric fields and the vocabulary size
# of each categorical field. Criteo Kaggle (Display Advertising Challenge): 13 counts and 26 categoricals, the
# widely copied per-field cardinalities, 33,762,577 ids in all.
LIKE = {
    "criteo-kaggle": (
        13,
        (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10,
         5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572),
    ),
}  # fmt: skip


def like_sizes(name: str) -> tuple[int, int, int, tuple[int, ...]]:
    """-> (field_size, feature_size, numeric_fields, category_sizes) of data shaped like `name` (LIKE)."""
    numeric, categories = LIKE[name]
    return numeric + len(categories), numeric * NUMERIC_BUCKETS + sum(categories), numeric, categories


def _layout(
    field_size: int, feature_size: int, numeric_fields: int, category_sizes: tuple[int, ...] | None = None
) -> _Layout:
    if category_sizes is not None:  # each categorical field's vocabulary as given, in order
        sizes_arr = np.asarray([NUMERIC_BUCKETS] * numeric_fields + list(category_sizes), dtype=np.int64)
        if len(sizes_arr) != field_size or int(sizes_arr.sum()) != feature_size or sizes_arr.min(initial=2) < 1:
            raise ValueError(
                f"{len(category_sizes)} category sizes and {numeric_fields} numeric fields do not make "
                f"field_size {field_size} and feature_size {feature_size}"
            )
        offsets = np.concatenate([[0], np.cumsum(sizes_arr)[:-1]]).astype(np.int64)
        return _Layout(offsets, sizes_arr, numeric_fields)
    categorical = field_size - numeric_fields
    numeric_ids = numeric_fields * NUMERIC_BUCKETS
    room = feature_size - numeric_ids
    if field_size < 1 or not 0 <= numeric_fields <= field_size:
        raise ValueError(
            f"need field_size >= 1 and 0 <= numeric_fields <= field_size, got {field_size}, {numeric_fields}"
        )
    if room < 2 * categorical or (categorical == 0 and room < 0):
        raise ValueError(
            f"feature_size {feature_size} is too small for {numeric_fields} numeric fields x "
            f"{NUMERIC_BUCKETS} buckets and {categorical} categorical fields of at least 2 ids "
            f"(need at least {numeric_ids + 2 * categorical})"
        )
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

    def __init__(
        self,
        layout: _Layout,
        seed: int,
        missing_rate: float = 0.0,
        multi_hot: MultiHot | None = None,
        day: int | None = None,
        new_ids: float = 0.0,
    ):
        rng = _rng(seed, _STREAM_LAYOUT)
        self.layout, self.missing_rate, self.multi_hot = layout, missing_rate, multi_hot
        n_num = layout.numeric_fields
        self.lognormal = rng.random(n_num) < 0.5
        self.mu = rng.uniform(0.0, 3.0, n_num)
        self.sigma = rng.uniform(1.0, 2.0, n_num)
        self.pareto_shape = rng.uniform(1.1, 2.5, n_num)
        self.pareto_scale = rng.uniform(1.0, 20.0, n_num)
        self.zipfs = [_zipf_cdf(size, rng) for size in layout.sizes[n_num:]]
        if day is not None:
            self.zipfs = [_in_use(cdf, perm, seed, k, day, new_ids) for k, (cdf, perm) in enumerate(self.zipfs)]
        if multi_hot is not None:
            self.bag_zipf = _zipf_cdf(multi_hot.vocabulary, _rng(seed, _STREAM_BAG_LAYOUT))

    def draw(self, rows: int, rng: np.random.Generator, extras_rng: np.random.Generator | None = None) -> Draw:
        """Rows from `rng`; blanks and bags (when configured) from `extras_rng`, so turning them on
        leaves the ids, counts and labels drawn from `rng` as they were."""
        layout = self.layout
        field_size = len(layout.sizes)
        ids = np.empty((rows, field_size), dtype=np.int64)
        values = np.ones((rows, field_size), dtype=np.float32)
        counts = np.empty((rows, layout.numeric_fields), dtype=np.int64)
        for f in range(layout.numeric_fields):
            if self.lognormal[f]:
                raw = rng.lognormal(self.mu[f], self.sigma[f], rows)
            else:
                raw = self.pareto_scale[f] * rng.pareto(self.pareto_shape[f], rows)
            counts[:, f] = np.floor(raw)
            ids[:, f], values[:, f] = numeric_features(np.floor(raw), layout.offsets[f])
        for k, (cdf, perm) in enumerate(self.zipfs):
            f = layout.numeric_fields + k
            ids[:, f] = layout.offsets[f] + _zipf_draw(cdf, perm, rng.random(rows))
        missing = bag_ids = bag_lengths = None
        if self.missing_rate > 0:
            missing = extras_rng.random((rows, field_size)) < self.missing_rate
            values[missing] = 0.0
            ids[missing] = np.broadcast_to(layout.offsets, ids.shape)[missing]
        if self.multi_hot is not None:
            bag = self.multi_hot
            bag_lengths = np.minimum(extras_rng.geometric(1.0 / bag.mean_length, rows), bag.max_length)
            bag_lengths[extras_rng.random(rows) < self.missing_rate] = 0
            bag_ids = _zipf_draw(*self.bag_zipf, extras_rng.random((rows, bag.max_length)))
            bag_ids[np.arange(bag.max_length) >= bag_lengths[:, None]] = 0
        return Draw(ids, values, counts, missing, bag_ids, bag_lengths)


class _Teacher:
    """A factorization machine with its logit standardized, scaled to `signal` and biased to a rate."""

    def __init__(
        self,
        feature_size: int,
        seed: int,
        sampler: _Sampler,
        signal: float,
        positive_rate: float,
        deep_share: float = 0.0,
        day: int | None = None,
        drift: float = 0.0,
    ):
        rng = _rng(seed, _STREAM_TEACHER)
        linear = rng.normal(0.0, 1.0, feature_size)
        latent = rng.normal(0.0, 1.0, (feature_size, LATENT_DIM))
        for later in range(2, (day or 1) + 1):  # each day renews the share `drift` of the weights' variance
            step = _rng(seed, _STREAM_DRIFT, later)
            linear = np.sqrt(1.0 - drift) * linear + np.sqrt(drift) * step.normal(0.0, 1.0, feature_size)
            latent = np.sqrt(1.0 - drift) * latent + np.sqrt(drift) * step.normal(0.0, 1.0, latent.shape)
        self.linear, self.latent = linear.astype(np.float32), latent.astype(np.float32)
        if sampler.multi_hot is not None:
            bag_rng = _rng(seed, _STREAM_BAG_TEACHER)
            self.bag_linear = bag_rng.normal(0.0, 1.0, sampler.multi_hot.vocabulary).astype(np.float32)
            self.bag_latent = bag_rng.normal(0.0, 1.0, (sampler.multi_hot.vocabulary, LATENT_DIM)).astype(np.float32)
        self.deep_share, self.deep = deep_share, None
        if deep_share > 0:  # weights of a ReLU network over the concatenated latent vectors
            width = (len(sampler.layout.sizes) + (sampler.multi_hot is not None)) * LATENT_DIM
            deep_rng = _rng(seed, _STREAM_DEEP_TEACHER)
            self.deep = (
                deep_rng.normal(0.0, 1.0 / np.sqrt(width), (width, DEEP_UNITS)),
                deep_rng.normal(0.0, 0.5, DEEP_UNITS),
                deep_rng.normal(0.0, 1.0, DEEP_UNITS),
            )
        draw = sampler.draw(CALIBRATION_ROWS, _rng(seed, _STREAM_CALIBRATION), _rng(seed, _STREAM_CALIBRATION, 1))
        first, pair, deep = self._terms(draw)
        self.first_stats = (first.mean(), first.std() or 1.0)
        self.pair_stats = (pair.mean(), pair.std() or 1.0)
        self.deep_stats = (deep.mean(), deep.std() or 1.0) if deep is not None else None
        self.scale = signal
        self.bias = 0.0
        self.bias = _bias_for_rate(self.logits(draw), positive_rate)

    def _terms(self, draw: Draw) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        first = (self.linear[draw.ids] * draw.values).sum(axis=1, dtype=np.float64)
        embedded = self.latent[draw.ids] * draw.values[:, :, None]
        if draw.bag_ids is not None:  # one more field: the mean of its ids' weights and latent vectors
            weights = draw.bag_weights()
            first = first + (self.bag_linear[draw.bag_ids] * weights).sum(axis=1, dtype=np.float64)
            pooled = (self.bag_latent[draw.bag_ids] * weights[:, :, None]).sum(axis=1)
            embedded = np.concatenate([embedded, pooled[:, None, :]], axis=1)
        pair = 0.5 * (embedded.sum(axis=1) ** 2 - (embedded**2).sum(axis=1)).sum(axis=1, dtype=np.float64)
        deep = None
        if self.deep is not None:
            kernel, bias, out = self.deep
            deep = np.maximum(embedded.reshape(len(embedded), -1) @ kernel + bias, 0.0) @ out
        return first, pair, deep

    def logits(self, draw: Draw) -> np.ndarray:
        out = np.empty(len(draw), dtype=np.float64)
        for start in range(0, len(draw), _CHUNK):
            part = slice(start, start + _CHUNK)
            first, pair, deep = self._terms(draw.slice(part))
            first = (first - self.first_stats[0]) / self.first_stats[1]
            pair = (pair - self.pair_stats[0]) / self.pair_stats[1]
            mixed = np.sqrt(1.0 - INTERACTION_SHARE) * first + np.sqrt(INTERACTION_SHARE) * pair
            if deep is not None:
                deep = (deep - self.deep_stats[0]) / self.deep_stats[1]
                mixed = np.sqrt(1.0 - self.deep_share) * mixed + np.sqrt(self.deep_share) * deep
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

    def __init__(
        self,
        seed: int,
        field_size: int = DEFAULT_FIELD_SIZE,
        feature_size: int = DEFAULT_FEATURE_SIZE,
        numeric_fields: int | None = None,
        signal: float = 1.5,
        positive_rate: float = 0.25,
        missing_rate: float = 0.0,
        multi_hot: MultiHot | None = None,
        deep_share: float = 0.0,
        category_sizes: tuple[int, ...] | None = None,
        day: int | None = None,
        drift: float = 0.1,
        new_ids: float = 0.1,
    ):
        """category_sizes: each categorical field's vocabulary (like_sizes), instead of geometric shares of the
        room feature_size leaves. day: day N's data (its drifted teacher, its ids in use, its own rows; see the
        module's docstring); drift and new_ids apply only with a day."""
        if day is not None and day < 1:
            raise ValueError(f"day must be 1 or more, got {day}")
        if not 0.0 <= drift <= 1.0:
            raise ValueError(f"drift must be in [0, 1], got {drift}")
        if not 0.0 <= new_ids < 1.0:
            raise ValueError(f"new_ids must be in [0, 1), got {new_ids}")
        if not 0.0 <= deep_share <= 1.0:
            raise ValueError(f"deep_share must be in [0, 1], got {deep_share}")
        if not 0.0 < positive_rate < 1.0:
            raise ValueError(f"positive_rate must be in (0, 1), got {positive_rate}")
        if not 0.0 <= missing_rate < 1.0:
            raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate}")
        if multi_hot is not None and (
            multi_hot.vocabulary < 1 or multi_hot.max_length < 1 or multi_hot.mean_length < 1
        ):
            raise ValueError(
                f"a multi-hot bag needs a vocabulary, max_length and mean_length of at least 1, got {multi_hot}"
            )
        self.seed, self.field_size, self.feature_size, self.day = seed, field_size, feature_size, day
        self.layout = _layout(
            field_size, feature_size, field_size // 3 if numeric_fields is None else numeric_fields, category_sizes
        )
        self.sampler = _Sampler(self.layout, seed, missing_rate, multi_hot, day, new_ids)
        self.teacher = _Teacher(feature_size, seed, self.sampler, signal, positive_rate, deep_share, day, drift)

    def draws(self, rows: int) -> Iterator[tuple[Draw, np.ndarray, np.ndarray]]:
        """Yield (draw, labels, probs) for rows 0..rows-1, in order."""
        for k, start in enumerate(range(0, rows, CHUNK_ROWS)):
            count = min(CHUNK_ROWS, rows - start)
            days = () if self.day is None else (self.day,)  # each day its own rows
            rng = _rng(self.seed, _STREAM_SAMPLE, k, *days)
            draw = self.sampler.draw(count, rng, _rng(self.seed, _STREAM_EXTRAS, k, *days))
            probs = _sigmoid(self.teacher.logits(draw))
            labels = (rng.random(count) < probs).astype(np.float32)
            yield draw, labels, probs.astype(np.float32)

    def chunks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Yield (ids, values, labels, probs) for rows 0..rows-1, in order."""
        for draw, labels, probs in self.draws(rows):
            yield draw.ids, draw.values, labels, probs


def generate(
    rows: int,
    seed: int,
    field_size: int = DEFAULT_FIELD_SIZE,
    feature_size: int = DEFAULT_FEATURE_SIZE,
    numeric_fields: int | None = None,
    signal: float = 1.5,
    positive_rate: float = 0.25,
) -> SynthData:
    """Draw `rows` examples in memory. `numeric_fields` defaults to a third of the fields (13 of
    Criteo's 39); `signal` is the spread (std) of the teacher's logit: larger is an easier task."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    generator = Generator(seed, field_size, feature_size, numeric_fields, signal, positive_rate)
    ids, values, labels, probs = (np.concatenate(part) for part in zip(*generator.chunks(rows)))
    return SynthData(ids, values, labels, probs, roc_auc(labels, probs), field_size, feature_size, seed)
