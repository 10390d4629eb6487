"""Training DeepFM: the sparse-aware optimizers, dynamic loss scaling and the train and eval steps (`Trainer`); the
metrics they count into and the lines those make are deepfm_metrics'.

The steps are plain functions (wrap them in tf.function, strategy.run or ClusterCoordinator.schedule);
how workers talk (averaging gradients, summing metrics) comes in as a collectives object
(deepfm_collectives), so the same code serves one process, Horovod, MultiWorkerMirroredStrategy and
the parameter-server chief.
"""

import tensorflow as tf

from deepfm_features import BAD_ROWS_KEY
from deepfm_metrics import StreamingMetrics
from deepfm_summaries import follow_learning_rate
from deepfm_model import build_model
from deepfm_variables import (
    assign,
    assign_add,
    assign_sub,
    flat_variables,
    scatter_sub,
    scatter_update,
    set_untracked,
)


def _dedupe(grad):
    """IndexedSlices -> (unique indices, summed rows): accumulators must see one update per row."""
    unique, positions = tf.unique(grad.indices)
    rows = tf.math.unsorted_segment_sum(grad.values, positions, tf.shape(unique)[0])
    return unique, rows


class SparseOptimizer(tf.Module):
    """Adagrad, FTRL, SGD or lazy Adam; IndexedSlices gradients update only the rows in the batch.

    Keras' Adam would decay its moments over the whole embedding table every step; here Adam is lazy:
    moments of rows not in the batch are left alone. Slots sit next to their variable (same ps task).
    """

    KINDS = ("adam", "adagrad", "ftrl", "sgd")

    def __init__(
        self,
        kind,
        learning_rate,
        beta1=0.9,
        beta2=0.999,
        epsilon=1e-7,
        initial_accumulator=0.1,
        l1=0.0,
        l2=0.0,
        name="optimizer",
    ):
        super().__init__(name=name)
        if kind not in self.KINDS:
            raise ValueError(f"optimizer {kind!r} not one of {self.KINDS}")
        self.kind = kind
        self.learning_rate = tf.Variable(float(learning_rate), trainable=False, name="learning_rate")
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.initial_accumulator, self.l1, self.l2 = initial_accumulator, l1, l2
        self.slots = []  # one dict per variable, by position in build()'s list

    def build(self, variables):
        """Create slots for the flat (per-shard) variables; call in the strategy scope, eagerly."""
        extended = tf.distribute.get_strategy().extended
        names = {"adam": ("m", "v"), "adagrad": ("accum",), "ftrl": ("accum", "linear"), "sgd": ()}[self.kind]
        for var in variables:
            slots = {}
            with extended.colocate_vars_with(var):
                for slot in names:
                    start = self.initial_accumulator if slot == "accum" else 0.0
                    slots[slot] = tf.Variable(  # a callable: filled where the variable lives
                        lambda shape=var.shape, start=start: tf.fill(shape, start),
                        shape=var.shape,
                        dtype=tf.float32,
                        trainable=False,
                        name=f"{var.name.split(':')[0]}/{slot}",
                    )
            self.slots.append(slots)
        set_untracked(self, "_variables", variables)

    def apply(self, grads):
        """grads: one per variable given to build() (None = no update)."""
        assign_add(self.iterations, 1)
        lr = self.learning_rate.read_value()
        step = tf.cast(self.iterations, tf.float32)
        for var, slots, grad in zip(self._variables, self.slots, grads):
            if grad is None:
                continue
            if isinstance(grad, tf.IndexedSlices):
                indices, rows = _dedupe(grad)
                self._sparse(var, slots, indices, rows, lr, step)
            else:
                self._dense(var, slots, grad, lr, step)

    def _sparse(self, var, slots, indices, rows, lr, step):
        if self.kind == "sgd":
            scatter_sub(var, indices, lr * rows)
        elif self.kind == "adagrad":
            tf.raw_ops.ResourceSparseApplyAdagradV2(
                var=var.handle, accum=slots["accum"].handle, lr=lr, epsilon=self.epsilon, grad=rows, indices=indices
            )
        elif self.kind == "ftrl":
            tf.raw_ops.ResourceSparseApplyFtrlV2(
                var=var.handle,
                accum=slots["accum"].handle,
                linear=slots["linear"].handle,
                grad=rows,
                indices=indices,
                lr=lr,
                l1=self.l1,
                l2=self.l2,
                l2_shrinkage=0.0,
                lr_power=-0.5,
            )
        else:
            # Lazy Adam has no fused op: its moment math is placed where the table lives, so that under
            # parameter servers only the rows cross to the ps, not the moments there and back.
            with tf.device(var.device):
                m = self.beta1 * tf.gather(slots["m"], indices) + (1 - self.beta1) * rows
                v = self.beta2 * tf.gather(slots["v"], indices) + (1 - self.beta2) * tf.square(rows)
                scatter_update(slots["m"], indices, m)
                scatter_update(slots["v"], indices, v)
                scatter_sub(var, indices, self._adam_lr(lr, step) * m / (tf.sqrt(v) + self.epsilon))

    def _dense(self, var, slots, grad, lr, step):
        if self.kind == "sgd":
            assign_sub(var, lr * grad)
        elif self.kind == "adagrad":
            tf.raw_ops.ResourceApplyAdagradV2(
                var=var.handle, accum=slots["accum"].handle, lr=lr, epsilon=self.epsilon, grad=grad
            )
        elif self.kind == "ftrl":
            tf.raw_ops.ResourceApplyFtrlV2(
                var=var.handle,
                accum=slots["accum"].handle,
                linear=slots["linear"].handle,
                grad=grad,
                lr=lr,
                l1=self.l1,
                l2=self.l2,
                l2_shrinkage=0.0,
                lr_power=-0.5,
            )
        else:  # fused, on the variable's device: under parameter servers only the gradient crosses
            tf.raw_ops.ResourceApplyAdam(
                var=var.handle,
                m=slots["m"].handle,
                v=slots["v"].handle,
                beta1_power=tf.pow(self.beta1, step),
                beta2_power=tf.pow(self.beta2, step),
                lr=lr,
                beta1=self.beta1,
                beta2=self.beta2,
                epsilon=self.epsilon,
                grad=grad,
            )

    def _adam_lr(self, lr, step):
        return lr * tf.sqrt(1 - tf.pow(self.beta2, step)) / (1 - tf.pow(self.beta1, step))


class LossScale(tf.Module):
    """Dynamic loss scaling for float16 compute: halve on overflow (and skip), double after
    `period` finite steps."""

    def __init__(self, initial=2.0**15, period=2000, name="loss_scale"):
        super().__init__(name=name)
        self.scale = tf.Variable(initial, trainable=False, name="scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="good_steps")
        self.period = period

    def unscale(self, grads):
        """-> (grads / scale, all finite)."""
        out, finite = [], tf.constant(True)
        for g in grads:
            if g is None:
                out.append(None)
                continue
            values = g.values if isinstance(g, tf.IndexedSlices) else g
            finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(values)))
            values = values / self.scale
            out.append(
                tf.IndexedSlices(values, g.indices, g.dense_shape) if isinstance(g, tf.IndexedSlices) else values
            )
        return out, finite

    def update(self, finite):
        if finite:
            assign_add(self.good_steps, 1)
            if self.good_steps >= self.period:
                assign(self.scale, self.scale * 2.0)
                assign(self.good_steps, 0)
        else:
            assign(self.scale, tf.maximum(self.scale / 2.0, 1.0))
            assign(self.good_steps, 0)


class Trainer:
    """Holds model, optimizer, metrics; step functions are plain (wrap them in tf.function or
    ClusterCoordinator.schedule). grad_transform averages gradients over the workers
    (a collectives object's average_gradients)."""

    def __init__(
        self,
        model,
        optimizer,
        train_metrics,
        eval_metrics=None,
        loss_scale=None,
        grad_transform=None,
        baseline=None,
        baseline_metrics=None,
    ):
        """baseline: a deepfm_baseline.Baseline trained in the same steps, evaluated into baseline_metrics."""
        self.model, self.optimizer, self.loss_scale = model, optimizer, loss_scale
        self.baseline, self.baseline_metrics = baseline, baseline_metrics
        self.train_metrics, self.eval_metrics = train_metrics, eval_metrics
        self.grad_transform = grad_transform
        # [epochs completed, global step at the start of the current epoch]: checkpointed, so a restart
        # resumes inside the right epoch
        self.progress = tf.Variable([0, 0], dtype=tf.int64, trainable=False, name="progress")
        self.variables = flat_variables(model.sparse_variables) + flat_variables(model.dense_variables)
        optimizer.build(self.variables)

    def train_step(self, batch):
        loss, counts = self._step(batch)
        self.train_metrics.add(counts)
        return loss

    def train_step_counts(self, batch):
        """One training step that leaves the train metrics alone: -> what it would add to them
        (StreamingMetrics.counts), for a caller that adds several steps' at once."""
        return self._step(batch)[1]

    def _step(self, batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            logits, l2 = self.model(features["ids"], features["values"], training=True)
            losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_mean(losses) + l2
            scaled = loss * self.loss_scale.scale if self.loss_scale is not None else loss
            if self.baseline is not None:  # its own variables: the sum's gradients are each loss's
                ids = self.model.checked_ids(features["ids"])  # a bad id stops the step with the model's line
                scaled += self.baseline.loss(ids, features["values"], labels)
        params = self.variables + (self.baseline.params if self.baseline is not None else [])
        grads = tape.gradient(scaled, params)
        if self.grad_transform is not None:
            grads = self.grad_transform(grads)  # the model's and the baseline's in one call
        if self.baseline is not None:
            grads, baseline_grads = grads[: len(self.variables)], grads[len(self.variables) :]
            self.baseline.optimizer.apply(baseline_grads)
        if self.loss_scale is not None:
            grads, finite = self.loss_scale.unscale(grads)
            if finite:
                self.optimizer.apply(grads)
            else:  # skipped, but its batch is used up: iterations counts batches (resume, checkpoint names)
                assign_add(self.optimizer.iterations, 1)
            self.loss_scale.update(finite)
        else:
            self.optimizer.apply(grads)
        return loss, self.train_metrics.counts(labels, tf.sigmoid(logits), losses)

    def eval_step(self, batch):
        features, labels = batch
        logits, _ = self.model(features["ids"], features["values"], training=False)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        self.eval_metrics.update(labels, tf.sigmoid(logits), losses)
        if self.baseline is not None:
            ids = self.model.checked_ids(features["ids"])
            self.baseline.evaluate(self.baseline_metrics, ids, features["values"], labels)
        if BAD_ROWS_KEY in features:  # raw features: the rows the parser dropped as bad
            self.eval_metrics.skip(features[BAD_ROWS_KEY])
        return tf.reduce_mean(losses)


def build_trainer(
    hp, strategy=None, compute_dtype=tf.float32, learning_rate=None, grad_transform=None, process_metrics=False
):
    """Model + optimizer + metrics created in the strategy's scope (tables partitioned under PS).

    process_metrics: metrics as plain variables of this process, outside the scope, that every local
    replica adds into (in the scope of a mirrored strategy each replica would count into its own copy)."""
    scope = strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope()
    baseline = getattr(hp, "baseline", False)
    names = ["train_metrics", "eval_metrics"] + (["baseline_metrics"] if baseline else [])
    metrics = [StreamingMetrics(name=name) for name in names] if process_metrics else None
    with scope:
        model = build_model(hp, compute_dtype)
        rate = hp.learning_rate if learning_rate is None else learning_rate
        optimizer = SparseOptimizer(hp.optimizer, rate)
        loss_scale = LossScale() if tf.as_dtype(compute_dtype) == tf.float16 else None
        metrics = metrics or [StreamingMetrics(name=name) for name in names]
        spec = getattr(hp, "feature_spec", None)
        if spec is not None and spec.bad_rows == "skip":
            metrics[1].max_skipped_fraction = spec.max_bad_fraction
        follow_learning_rate(optimizer.learning_rate)
        if baseline:
            from deepfm_baseline import OPTIMIZER, Baseline

            own = SparseOptimizer(*OPTIMIZER, name="baseline_optimizer")
            baseline = Baseline(model.feature_size, own, hp.l2_reg)
        return Trainer(
            model, optimizer, *metrics[:2], loss_scale, grad_transform, baseline or None, (metrics[2:] or [None])[0]
        )
