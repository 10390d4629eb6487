"""The feature side of the synthetic click data (`synth`): which ids each field owns and how rows are drawn.

Layout: field f owns the global ids `offsets[f] .. offsets[f] + sizes[f] - 1` inside `feature_size`.
The first `numeric_fields` fields are heavy-tailed counts (log-normal or Pareto), bucketized on a log2
scale into `NUMERIC_BUCKETS` ids, with value `min(log1p(x), 10) / 10`; the others are categorical with
Zipf-distributed ids (frequency rank shuffled over the field's ids) and value 1. On day N of a stream
(`synth`'s docstring) a categorical field draws only from the ids in use by then.

Each random stream is a fixed number beside the seed: part of what a seed means, keep them fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NUMERIC_BUCKETS = 16
STREAM_LAYOUT, STREAM_TEACHER, STREAM_CALIBRATION, STREAM_SAMPLE = range(4)
STREAM_BAG_LAYOUT, STREAM_BAG_TEACHER, STREAM_EXTRAS, STREAM_DEEP_TEACHER = range(4, 8)
STREAM_DRIFT, STREAM_BIRTH = range(8, 10)


def stream_rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *stream]))


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
    birth = stream_rng(seed, STREAM_BIRTH, field).geometric(1.0 - new_ids, size)  # the day each id is first drawn
    used = perm[birth[perm] <= day]
    if len(used) == 0:  # a field keeps at least its most common id
        used = perm[:1]
    top = cdf[len(used) - 1]
    return cdf[: len(used)] / top, used


def _zipf_draw(cdf: np.ndarray, perm: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    return perm[np.minimum(np.searchsorted(cdf, uniform, side="right"), len(cdf) - 1)]


@dataclass(frozen=True)
class Layout:
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


def field_layout(
    field_size: int, feature_size: int, numeric_fields: int, category_sizes: tuple[int, ...] | None = None
) -> Layout:
    if category_sizes is not None:  # each categorical field's vocabulary as given, in order
        sizes_arr = np.asarray([NUMERIC_BUCKETS] * numeric_fields + list(category_sizes), dtype=np.int64)
        if len(sizes_arr) != field_size or int(sizes_arr.sum()) != feature_size or sizes_arr.min(initial=2) < 1:
            raise ValueError(
                f"{len(category_sizes)} category sizes and {numeric_fields} numeric fields do not make "
                f"field_size {field_size} and feature_size {feature_size}"
            )
        offsets = np.concatenate([[0], np.cumsum(sizes_arr)[:-1]]).astype(np.int64)
        return Layout(offsets, sizes_arr, numeric_fields)
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
    return Layout(offsets, sizes_arr, numeric_fields)


class Sampler:
    """Draws feature rows for a layout; the per-field distributions come from the layout stream."""

    def __init__(
        self,
        layout: Layout,
        seed: int,
        missing_rate: float = 0.0,
        multi_hot: MultiHot | None = None,
        day: int | None = None,
        new_ids: float = 0.0,
    ):
        rng = stream_rng(seed, STREAM_LAYOUT)
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
            self.bag_zipf = _zipf_cdf(multi_hot.vocabulary, stream_rng(seed, STREAM_BAG_LAYOUT))

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
