"""Synthetic Criteo-like click data with labels from a planted teacher, so the achievable AUC is known.

Rows (`synth_rows`): each field owns a range of the global ids; numeric fields are heavy-tailed counts bucketized
on a log2 scale, categorical fields Zipf-distributed ids.

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

from launcher.data.synth_rows import (
    STREAM_BAG_TEACHER,
    STREAM_CALIBRATION,
    STREAM_DEEP_TEACHER,
    STREAM_DRIFT,
    STREAM_EXTRAS,
    STREAM_SAMPLE,
    STREAM_TEACHER,
    Draw,
    MultiHot,
    Sampler,
    field_layout,
    stream_rng,
)
from launcher.facts.contract import bundled_hparams

_SCRIPT_DEFAULTS = bundled_hparams().DEFAULTS  # the samples fit the bundled scripts' default model
DEFAULT_FIELD_SIZE = _SCRIPT_DEFAULTS["field_size"]
DEFAULT_FEATURE_SIZE = _SCRIPT_DEFAULTS["feature_size"]
LATENT_DIM = 4
INTERACTION_SHARE = 0.3  # share of the teacher logit's variance from pairwise terms
CALIBRATION_ROWS = 20000
_CHUNK = 65536
CHUNK_ROWS = 65536  # rows per random stream: part of what a seed means, keep it fixed

DEEP_UNITS = 32  # hidden units of the deep teacher (deep_share > 0)


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


class _Teacher:
    """A factorization machine with its logit standardized, scaled to `signal` and biased to a rate."""

    def __init__(
        self,
        feature_size: int,
        seed: int,
        sampler: Sampler,
        signal: float,
        positive_rate: float,
        deep_share: float = 0.0,
        day: int | None = None,
        drift: float = 0.0,
    ):
        rng = stream_rng(seed, STREAM_TEACHER)
        linear = rng.normal(0.0, 1.0, feature_size)
        latent = rng.normal(0.0, 1.0, (feature_size, LATENT_DIM))
        for later in range(2, (day or 1) + 1):  # each day renews the share `drift` of the weights' variance
            step = stream_rng(seed, STREAM_DRIFT, later)
            linear = np.sqrt(1.0 - drift) * linear + np.sqrt(drift) * step.normal(0.0, 1.0, feature_size)
            latent = np.sqrt(1.0 - drift) * latent + np.sqrt(drift) * step.normal(0.0, 1.0, latent.shape)
        self.linear, self.latent = linear.astype(np.float32), latent.astype(np.float32)
        if sampler.multi_hot is not None:
            bag_rng = stream_rng(seed, STREAM_BAG_TEACHER)
            self.bag_linear = bag_rng.normal(0.0, 1.0, sampler.multi_hot.vocabulary).astype(np.float32)
            self.bag_latent = bag_rng.normal(0.0, 1.0, (sampler.multi_hot.vocabulary, LATENT_DIM)).astype(np.float32)
        self.deep_share, self.deep = deep_share, None
        if deep_share > 0:  # weights of a ReLU network over the concatenated latent vectors
            width = (len(sampler.layout.sizes) + (sampler.multi_hot is not None)) * LATENT_DIM
            deep_rng = stream_rng(seed, STREAM_DEEP_TEACHER)
            self.deep = (
                deep_rng.normal(0.0, 1.0 / np.sqrt(width), (width, DEEP_UNITS)),
                deep_rng.normal(0.0, 0.5, DEEP_UNITS),
                deep_rng.normal(0.0, 1.0, DEEP_UNITS),
            )
        draw = sampler.draw(
            CALIBRATION_ROWS, stream_rng(seed, STREAM_CALIBRATION), stream_rng(seed, STREAM_CALIBRATION, 1)
        )
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
        self.layout = field_layout(
            field_size, feature_size, field_size // 3 if numeric_fields is None else numeric_fields, category_sizes
        )
        self.sampler = Sampler(self.layout, seed, missing_rate, multi_hot, day, new_ids)
        self.teacher = _Teacher(feature_size, seed, self.sampler, signal, positive_rate, deep_share, day, drift)

    def draws(self, rows: int) -> Iterator[tuple[Draw, np.ndarray, np.ndarray]]:
        """Yield (draw, labels, probs) for rows 0..rows-1, in order."""
        for k, start in enumerate(range(0, rows, CHUNK_ROWS)):
            count = min(CHUNK_ROWS, rows - start)
            days = () if self.day is None else (self.day,)  # each day its own rows
            rng = stream_rng(self.seed, STREAM_SAMPLE, k, *days)
            draw = self.sampler.draw(count, rng, stream_rng(self.seed, STREAM_EXTRAS, k, *days))
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
