"""The metrics of training and evaluation: streaming loss and AUC as variables (`StreamingMetrics`, which
parameter-server workers update remotely and the chief reads), the train line of a window (`TrainWindow`), the
eval line of an evaluation, and the stop on a loss or weights no longer finite, or a window's loss far worse than
knowing nothing (`Diverged`).
"""

import time

import numpy as np
import tensorflow as tf

from deepfm_collectives import SingleProcess
from deepfm_log import emit, format_metric, log
from deepfm_summaries import record


# Where each count sits in StreamingMetrics.totals: the loss sum, the examples, the rows skipped as bad, then the
# positives' and the negatives' histogram of predictions (`buckets` each).
LOSS_SUM, EXAMPLES, SKIPPED, HISTOGRAMS = 0, 1, 2, 3


class StreamingMetrics(tf.Module):
    """Loss sum, example count and a prediction histogram per label (for AUC), in one variable so that
    ParameterServerStrategy workers can update them remotely and the chief can read them. One variable: a closure's
    counts are added by one update and a read sees all of them or none (a parameter-server chief reads while
    the workers' closures add; with a variable per count, a read could take a closure's examples without their
    loss)."""

    def __init__(self, buckets=1000, name="metrics"):
        super().__init__(name=name)
        self.buckets = buckets
        self.totals = tf.Variable(tf.zeros([HISTOGRAMS + 2 * buckets], tf.float64), trainable=False, name="totals")
        # the share of the rows read past which an evaluation fails (None: not bounded); rows the batches' parser
        # dropped as bad (raw features, bad_rows: skip) are counted at SKIPPED
        self.max_skipped_fraction = None

    def update(self, labels, probs, losses):
        """losses: per-example log loss."""
        self.add(self.counts(labels, probs, losses))

    def counts(self, labels, probs, losses):
        """What `update` adds, as tensors (positives, negatives, loss sum, examples): counts of several
        batches can be summed where they are computed and added once (`add`), one update of the metrics
        instead of one per batch when they live on another task."""
        labels = tf.cast(tf.reshape(labels, [-1]), tf.float64)
        bucket = tf.clip_by_value(tf.cast(tf.reshape(probs, [-1]) * self.buckets, tf.int32), 0, self.buckets - 1)
        return (
            tf.math.unsorted_segment_sum(labels, bucket, self.buckets),
            tf.math.unsorted_segment_sum(1.0 - labels, bucket, self.buckets),
            tf.reduce_sum(tf.cast(losses, tf.float64)),
            tf.cast(tf.size(losses), tf.int64),
        )

    def zero_counts(self):
        return (
            tf.zeros([self.buckets], tf.float64),
            tf.zeros([self.buckets], tf.float64),
            tf.constant(0.0, tf.float64),
            tf.constant(0, tf.int64),
        )

    def add(self, counts):
        positives, negatives, loss_sum, examples = counts
        head = tf.stack([tf.cast(loss_sum, tf.float64), tf.cast(examples, tf.float64), tf.constant(0.0, tf.float64)])
        self.totals.assign_add(tf.concat([head, positives, negatives], 0))

    def skip(self, count):
        self.totals.assign_add(
            tf.one_hot(SKIPPED, HISTOGRAMS + 2 * self.buckets, dtype=tf.float64) * tf.cast(count, tf.float64)
        )

    def reset(self):
        self.totals.assign(tf.zeros_like(self.totals))

    @tf.function
    def take(self):
        """-> [loss sum, examples, skipped, positives..., negatives...] (float64), and take them out: one call,
        which a parameter-server chief makes once per ps holding them. What was read is subtracted, not zeroed: a
        parameter-server chief takes while the workers' closures add, and what a closure adds between the read and
        the subtraction stays for the next take."""
        value = self.totals.read_value()
        self.totals.assign_sub(value)  # after the read: a function runs a variable's operations in order
        return value

    def result(self):
        """-> (mean loss, AUC, examples) as Python numbers, read on the caller's side."""
        totals = self.totals.numpy()
        examples = int(totals[EXAMPLES])
        loss = float(totals[LOSS_SUM]) / examples if examples else float("nan")
        positives, negatives = np.split(totals[HISTOGRAMS:], 2)
        return loss, histogram_auc(positives, negatives), examples


def histogram_auc(positives, negatives):
    """ROC AUC from per-bucket label counts (ties within a bucket count half)."""
    pos, neg = np.asarray(positives, np.float64)[::-1], np.asarray(negatives, np.float64)[::-1]
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos == 0 or total_neg == 0:
        return float("nan")
    pos_above = np.cumsum(pos) - pos
    return float(np.sum(neg * (pos_above + 0.5 * pos)) / (total_pos * total_neg))


def summed_counts(metrics, collectives=None):
    """(mean loss, AUC, examples, rows skipped as bad) of a StreamingMetrics summed over the workers (one
    collective), then reset it."""
    collectives = collectives or SingleProcess()
    total = np.asarray(collectives.sum(metrics.take()))
    loss_sum, examples, skipped = total[LOSS_SUM], total[EXAMPLES], total[SKIPPED]
    positives, negatives = np.split(total[HISTOGRAMS:], 2)
    loss = loss_sum / examples if examples else float("nan")
    return loss, histogram_auc(positives, negatives), int(examples), int(skipped)


def summed_result(metrics, collectives=None):
    """(mean loss, AUC, examples) of a StreamingMetrics summed over the workers (one collective), then
    reset it."""
    return summed_counts(metrics, collectives)[:3]


class BadRowsPastBound(Exception):
    """More than the bound's share of the rows a channel gave were bad (raw features, bad_rows: skip)."""

    def __init__(self, channel, bad, read, bound):
        super().__init__(f"{bad} of {read} rows of {channel} bad")
        self.channel, self.bad, self.read, self.bound = channel, bad, read, bound


# A model that predicts every example's probability as the base rate p has a log loss of -p ln p - (1-p) ln(1-p),
# at most ln 2 (p = 0.5): the train lines' loss is that log loss alone (no regularization term). A window whose mean
# is ten times that is worse than knowing nothing, by far: the run diverged, even while its numbers stay finite.
DIVERGED_LOSS = 10 * np.log(2.0)
# An eval AUC below this is no better than chance (0.5, a model that learned nothing, plus a margin for the noise
# of a small evaluation set).
CHANCE_AUC = 0.52


def no_better_than_chance(auc):
    return bool(np.isfinite(auc) and auc < CHANCE_AUC)


class Diverged(Exception):
    """The training loss or the model's weights are no longer finite: the run must stop without saving or
    exporting them."""

    def __init__(self, step, what):
        super().__init__(f"training diverged at step {step}: {what}")
        self.step, self.what = step, what


def check_finite(variables, step):
    """Raise Diverged when any of `variables` holds a NaN or an infinity (read where each variable lives)."""
    for var in variables:
        with tf.device(var.device):  # a ps's shard is checked on its ps, not copied here
            finite = tf.reduce_all(tf.math.is_finite(var))
        if not bool(finite):
            raise Diverged(step, f"{var.name} holds NaN or infinite values")


class TrainWindow:
    """One train line per window from the trainer's train metrics summed over the workers, which are
    then taken out; examples_per_sec counts the window's examples over its wall time. Rank 0 prints.
    Every worker must call `report` at the same steps (it is a collective). A window without examples (a
    parameter-server chief's whose closures have not added theirs yet) prints nothing, and its time stays in
    the next one's."""

    def __init__(self, metrics, collectives=None):
        self.metrics, self.collectives = metrics, collectives or SingleProcess()
        self.started = time.monotonic()
        self.rows = 0  # the examples every window so far trained on, over the workers

    def report(self, step):
        """The train line at `step` (rank 0), or at what `step()` reads after the metrics are taken (every example
        counted is then of a step at or before it). -> the line's step, None when it counted no example."""
        loss, auc, examples = summed_result(self.metrics, self.collectives)
        step = step() if callable(step) else step
        self.rows += examples
        now = time.monotonic()
        if examples and self.collectives.rank == 0:
            speed = examples / max(now - self.started, 1e-9)
            emit(format_metric("train", step, loss, auc, speed))
            record("train", step, loss=loss, auc=auc, examples_per_sec=speed, examples=examples)
        if examples:
            self.started = now
        if examples and not np.isfinite(loss):  # the same sum on every worker: all stop at this step
            raise Diverged(step, f"train loss={loss}")
        if examples and loss > DIVERGED_LOSS:
            raise Diverged(
                step,
                f"train loss={loss:.6g} is above {DIVERGED_LOSS:.2f} (10 x ln 2, ten times the log loss of a model "
                "that predicts the base rate)",
            )
        return step if examples else None

    def leave_out(self, since):
        """Leave the time from `since` (time.monotonic()) to now out of the window: an evaluation's."""
        self.started += time.monotonic() - since


def evaluate(trainer, dataset, step, collectives=None, step_fn=None):
    """Run the eval step over `dataset` (None: this worker reads no eval data), sum the eval metrics over
    the workers; rank 0 prints the eval line. -> (loss, auc)."""
    reset_evaluation(trainer)
    if dataset is not None:
        step_fn = step_fn or tf.function(trainer.eval_step)
        for batch in dataset:
            step_fn(batch)
    return report_evaluation(trainer.eval_metrics, step, collectives, getattr(trainer, "baseline_metrics", None))[:2]


def reset_evaluation(trainer):
    """Zero the eval metrics (and the baseline's) before an evaluation."""
    trainer.eval_metrics.reset()
    if getattr(trainer, "baseline_metrics", None) is not None:
        trainer.baseline_metrics.reset()


def report_evaluation(metrics, step, collectives=None, baseline=None):
    """The eval line of what `metrics` (eval metrics) hold, summed over the workers, with the AUC of `baseline`
    (the logistic-regression baseline's eval metrics, or None); rank 0 prints it. -> (loss, auc, examples)."""
    collectives = collectives or SingleProcess()
    loss, auc, examples, skipped = summed_counts(metrics, collectives)
    baseline_auc = summed_counts(baseline, collectives)[1] if baseline is not None else None
    if skipped and collectives.rank == 0:
        log(f"eval bad rows skipped: {skipped}")
    bound = metrics.max_skipped_fraction
    if skipped and bound is not None and skipped > bound * (skipped + examples):
        raise BadRowsPastBound("eval", skipped, skipped + examples, bound)  # on every worker: the same sums
    if examples and np.isfinite(loss):
        if collectives.rank == 0:
            emit(format_metric("eval", step, loss, auc, baseline_auc=baseline_auc))
            extra = {} if baseline_auc is None else {"baseline_auc": baseline_auc}
            record("eval", step, loss=loss, auc=auc, **extra)
        return loss, auc, examples
    # the same sums on every worker: all stop here
    if collectives.rank == 0:
        log(
            f"error: the evaluation at step {step} had {examples} rows and loss {loss}: "
            + (
                "the eval channel holds no rows (empty files, or every row skipped as bad); "
                if not examples
                else "the eval data or the model's predictions hold values that are not finite numbers; "
            )
            + "fix the eval data (or leave the channel out); no model exported"
        )
    raise SystemExit(1)
