"""DeepFM on core TensorFlow (tf.Module, tf.Variable, GradientTape), plus its sparse-aware optimizers,
streaming metrics and the train/eval steps shared by every entry point.

No Keras: the same code runs on TF 2.12 to Keras-3 era TensorFlow, under no strategy,
ParameterServerStrategy (embedding tables become ShardedVariables across the ps tasks), Horovod, or
(Multi-worker) MirroredStrategy with several local replicas.

Every update inside a step writes through the variable's handle (the helpers below): under a mirrored
strategy that is the copy of the replica running the step, so each replica applies the same all-reduced
update to its own copy and the copies stay identical without a merge_call (tf.Variable.assign on a
mirrored variable in a replica would demand an aggregation mode); everywhere else it is the variable.
"""

import numpy as np
import tensorflow as tf


def flat_variables(variables):
    """Expand ShardedVariables (PS partitioning) into their shards; gradients are per shard."""
    flat = []
    for var in variables:
        shards = getattr(var, "variables", None)
        flat.extend(shards if isinstance(shards, (list, tuple)) else [var])
    return flat


def _assign(var, value):
    tf.raw_ops.AssignVariableOp(resource=var.handle, value=tf.cast(value, var.dtype))


def _assign_add(var, value):
    tf.raw_ops.AssignAddVariableOp(resource=var.handle, value=tf.cast(value, var.dtype))


def _assign_sub(var, value):
    tf.raw_ops.AssignSubVariableOp(resource=var.handle, value=tf.cast(value, var.dtype))


def _scatter_sub(var, indices, rows):
    tf.raw_ops.ResourceScatterSub(resource=var.handle, indices=indices, updates=rows)


def _scatter_update(var, indices, rows):
    tf.raw_ops.ResourceScatterUpdate(resource=var.handle, indices=indices, updates=rows)


def full_value(var):
    """The whole value of a variable, concatenating the shards of a ShardedVariable."""
    shards = flat_variables([var])
    return shards[0].read_value() if len(shards) == 1 else tf.concat([s.read_value() for s in shards], 0)


class DeepFM(tf.Module):
    """first-order weights + FM second-order term + MLP over the field embeddings -> logit."""

    def __init__(self, field_size, feature_size, embedding_size, deep_layers, dropout=0.0,
                 batch_norm=False, l2_reg=0.0, compute_dtype=tf.float32, seed=0, name="deepfm"):
        super().__init__(name=name)
        self.field_size, self.embedding_size = field_size, embedding_size
        self.dropout, self.batch_norm, self.l2_reg = dropout, batch_norm, l2_reg
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self._seed = seed
        # Callables, so ParameterServerStrategy can create the tables partitioned.
        self.first_order = tf.Variable(self._normal([feature_size, 1], 0.01), name="first_order")
        self.embeddings = tf.Variable(self._normal([feature_size, embedding_size], 0.01), name="embeddings")
        self.bias = tf.Variable(tf.zeros([]), name="bias")
        self.kernels, self.biases, self.bn_params = [], [], []
        width = field_size * embedding_size
        for i, units in enumerate(list(deep_layers) + [1]):
            scale = np.sqrt(2.0 / (width + units))  # Glorot normal
            self.kernels.append(tf.Variable(self._normal([width, units], scale), name=f"kernel_{i}"))
            self.biases.append(tf.Variable(tf.zeros([units]), name=f"bias_{i}"))
            if batch_norm and i < len(deep_layers):
                self.bn_params.append({
                    "gamma": tf.Variable(tf.ones([units]), name=f"bn_gamma_{i}"),
                    "beta": tf.Variable(tf.zeros([units]), name=f"bn_beta_{i}"),
                    "mean": tf.Variable(tf.zeros([units]), trainable=False, name=f"bn_mean_{i}"),
                    "var": tf.Variable(tf.ones([units]), trainable=False, name=f"bn_var_{i}"),
                })
            width = units

    def _normal(self, shape, stddev):
        self._seed += 1
        seed = self._seed
        return lambda: tf.random.stateless_normal(shape, seed=[seed, 7], stddev=stddev)

    @property
    def sparse_variables(self):
        """Tables read through a gather: their gradients are IndexedSlices."""
        return [self.first_order, self.embeddings]

    @property
    def dense_variables(self):
        bn = [p[k] for p in self.bn_params for k in ("gamma", "beta")]
        return [self.bias] + self.kernels + self.biases + bn

    @property
    def all_variables(self):
        """Every variable in a fixed order (export copies values by position)."""
        moving = [p[k] for p in self.bn_params for k in ("mean", "var")]
        return self.sparse_variables + self.dense_variables + moving

    def __call__(self, ids, values, training=False):
        """-> (logits [batch], l2 penalty scalar)."""
        values = tf.cast(values, tf.float32)
        weights = tf.nn.embedding_lookup(self.first_order, ids)[..., 0]  # [B, F]
        vectors = tf.nn.embedding_lookup(self.embeddings, ids)  # [B, F, K]
        scaled = vectors * values[..., None]
        linear = tf.reduce_sum(weights * values, axis=1)
        summed = tf.reduce_sum(scaled, axis=1)
        fm = 0.5 * tf.reduce_sum(tf.square(summed) - tf.reduce_sum(tf.square(scaled), axis=1), axis=1)
        deep = self._mlp(tf.reshape(scaled, [-1, self.field_size * self.embedding_size]), training)
        logits = linear + fm + deep + self.bias
        batch = tf.cast(tf.shape(ids)[0], tf.float32)
        l2 = self.l2_reg * (tf.nn.l2_loss(weights) + tf.nn.l2_loss(vectors)) / batch
        l2 += self.l2_reg * tf.add_n([tf.nn.l2_loss(k) for k in self.kernels])
        return logits, l2

    def _mlp(self, x, training):
        x = tf.cast(x, self.compute_dtype)
        last = len(self.kernels) - 1
        for i, (kernel, bias) in enumerate(zip(self.kernels, self.biases)):
            x = tf.matmul(x, tf.cast(kernel, self.compute_dtype)) + tf.cast(bias, self.compute_dtype)
            if i == last:
                break
            if self.bn_params:
                x = self._batch_norm(x, self.bn_params[i], training)
            x = tf.nn.relu(x)
            if training and self.dropout > 0:
                x = tf.nn.dropout(x, rate=self.dropout)
        return tf.cast(x[:, 0], tf.float32)

    def _batch_norm(self, x, p, training, momentum=0.99, epsilon=1e-3):
        x32 = tf.cast(x, tf.float32)
        if training:
            mean, var = tf.nn.moments(x32, axes=[0])
            moving_mean, moving_var = mean, var
            replica = tf.distribute.get_replica_context()
            if replica is not None and replica.num_replicas_in_sync > 1:  # same moving stats in every copy
                moving_mean, moving_var = replica.all_reduce(tf.distribute.ReduceOp.MEAN, [mean, var])
            _assign(p["mean"], momentum * p["mean"] + (1 - momentum) * moving_mean)
            _assign(p["var"], momentum * p["var"] + (1 - momentum) * moving_var)
        else:
            mean, var = p["mean"], p["var"]
        y = tf.nn.batch_normalization(x32, mean, var, p["beta"], p["gamma"], epsilon)
        return tf.cast(y, self.compute_dtype)

    def predict(self, ids, values):
        logits, _ = self(ids, values, training=False)
        return tf.sigmoid(logits)


def build_model(hp, compute_dtype=tf.float32):
    """DeepFM from parsed hyperparameters (deepfm_hparams.parse_hyperparameters)."""
    return DeepFM(hp.field_size, hp.feature_size, hp.embedding_size, hp.deep_layers, hp.dropout,
                  hp.batch_norm, hp.l2_reg, compute_dtype=compute_dtype)


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

    def __init__(self, kind, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-7,
                 initial_accumulator=0.1, l1=0.0, l2=0.0, name="optimizer"):
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
                    slots[slot] = tf.Variable(tf.fill(var.shape, start), trainable=False,
                                              name=f"{var.name.split(':')[0]}/{slot}")
            self.slots.append(slots)
        self._variables = list(variables)

    def apply(self, grads):
        """grads: one per variable given to build() (None = no update)."""
        _assign_add(self.iterations, 1)
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
            _scatter_sub(var, indices, lr * rows)
        elif self.kind == "adagrad":
            tf.raw_ops.ResourceSparseApplyAdagradV2(var=var.handle, accum=slots["accum"].handle, lr=lr,
                                                     epsilon=self.epsilon, grad=rows, indices=indices)
        elif self.kind == "ftrl":
            tf.raw_ops.ResourceSparseApplyFtrlV2(
                var=var.handle, accum=slots["accum"].handle, linear=slots["linear"].handle, grad=rows,
                indices=indices, lr=lr, l1=self.l1, l2=self.l2, l2_shrinkage=0.0, lr_power=-0.5)
        else:
            m = self.beta1 * tf.gather(slots["m"], indices) + (1 - self.beta1) * rows
            v = self.beta2 * tf.gather(slots["v"], indices) + (1 - self.beta2) * tf.square(rows)
            _scatter_update(slots["m"], indices, m)
            _scatter_update(slots["v"], indices, v)
            _scatter_sub(var, indices, self._adam_lr(lr, step) * m / (tf.sqrt(v) + self.epsilon))

    def _dense(self, var, slots, grad, lr, step):
        if self.kind == "sgd":
            _assign_sub(var, lr * grad)
        elif self.kind == "adagrad":
            tf.raw_ops.ResourceApplyAdagradV2(var=var.handle, accum=slots["accum"].handle, lr=lr,
                                              epsilon=self.epsilon, grad=grad)
        elif self.kind == "ftrl":
            tf.raw_ops.ResourceApplyFtrlV2(var=var.handle, accum=slots["accum"].handle,
                                           linear=slots["linear"].handle, grad=grad, lr=lr, l1=self.l1,
                                           l2=self.l2, l2_shrinkage=0.0, lr_power=-0.5)
        else:
            _assign(slots["m"], self.beta1 * slots["m"] + (1 - self.beta1) * grad)
            _assign(slots["v"], self.beta2 * slots["v"] + (1 - self.beta2) * tf.square(grad))
            _assign_sub(var, self._adam_lr(lr, step) * slots["m"] / (tf.sqrt(slots["v"]) + self.epsilon))

    def _adam_lr(self, lr, step):
        return lr * tf.sqrt(1 - tf.pow(self.beta2, step)) / (1 - tf.pow(self.beta1, step))


class StreamingMetrics(tf.Module):
    """Loss sum, example count and a prediction histogram per label (for AUC), as variables so that
    ParameterServerStrategy workers can update them remotely and the chief can read them."""

    def __init__(self, buckets=1000, name="metrics"):
        super().__init__(name=name)
        self.buckets = buckets
        self.loss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="loss_sum")
        self.examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
        self.positives = tf.Variable(tf.zeros([buckets], tf.float64), trainable=False, name="positives")
        self.negatives = tf.Variable(tf.zeros([buckets], tf.float64), trainable=False, name="negatives")

    def update(self, labels, probs, losses):
        """losses: per-example log loss."""
        labels = tf.cast(tf.reshape(labels, [-1]), tf.float64)
        bucket = tf.clip_by_value(tf.cast(tf.reshape(probs, [-1]) * self.buckets, tf.int32), 0, self.buckets - 1)
        self.positives.assign_add(tf.math.unsorted_segment_sum(labels, bucket, self.buckets))
        self.negatives.assign_add(tf.math.unsorted_segment_sum(1.0 - labels, bucket, self.buckets))
        self.loss_sum.assign_add(tf.reduce_sum(tf.cast(losses, tf.float64)))
        self.examples.assign_add(tf.cast(tf.size(losses), tf.int64))

    def reset(self):
        for var in (self.loss_sum, self.examples, self.positives, self.negatives):
            var.assign(tf.zeros_like(var))

    def result(self):
        """-> (mean loss, AUC, examples) as Python numbers, read on the caller's side."""
        examples = int(self.examples.numpy())
        loss = float(self.loss_sum.numpy()) / examples if examples else float("nan")
        return loss, histogram_auc(self.positives.numpy(), self.negatives.numpy()), examples


def histogram_auc(positives, negatives):
    """ROC AUC from per-bucket label counts (ties within a bucket count half)."""
    pos, neg = np.asarray(positives, np.float64)[::-1], np.asarray(negatives, np.float64)[::-1]
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos == 0 or total_neg == 0:
        return float("nan")
    pos_above = np.cumsum(pos) - pos
    return float(np.sum(neg * (pos_above + 0.5 * pos)) / (total_pos * total_neg))


class LossScale(tf.Module):
    """Dynamic loss scaling for float16 compute: halve on overflow (and skip), double after
    `period` finite steps."""

    def __init__(self, initial=2.0 ** 15, period=2000, name="loss_scale"):
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
            out.append(tf.IndexedSlices(values, g.indices, g.dense_shape) if isinstance(g, tf.IndexedSlices)
                       else values)
        return out, finite

    def update(self, finite):
        if finite:
            _assign_add(self.good_steps, 1)
            if self.good_steps >= self.period:
                _assign(self.scale, self.scale * 2.0)
                _assign(self.good_steps, 0)
        else:
            _assign(self.scale, tf.maximum(self.scale / 2.0, 1.0))
            _assign(self.good_steps, 0)


class Trainer:
    """Holds model, optimizer, metrics; step functions are plain (wrap them in tf.function or
    ClusterCoordinator.schedule). grad_transform lets Horovod average gradients."""

    def __init__(self, model, optimizer, train_metrics, eval_metrics=None, loss_scale=None,
                 grad_transform=None):
        self.model, self.optimizer, self.loss_scale = model, optimizer, loss_scale
        self.train_metrics, self.eval_metrics = train_metrics, eval_metrics
        self.grad_transform = grad_transform
        self.variables = flat_variables(model.sparse_variables) + flat_variables(model.dense_variables)
        optimizer.build(self.variables)

    def train_step(self, batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            logits, l2 = self.model(features["ids"], features["values"], training=True)
            losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_mean(losses) + l2
            scaled = loss * self.loss_scale.scale if self.loss_scale is not None else loss
        grads = tape.gradient(scaled, self.variables)
        if self.grad_transform is not None:
            grads = self.grad_transform(grads)
        if self.loss_scale is not None:
            grads, finite = self.loss_scale.unscale(grads)
            if finite:
                self.optimizer.apply(grads)
            self.loss_scale.update(finite)
        else:
            self.optimizer.apply(grads)
        self.train_metrics.update(labels, tf.sigmoid(logits), losses)
        return loss

    def eval_step(self, batch):
        features, labels = batch
        logits, _ = self.model(features["ids"], features["values"], training=False)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        self.eval_metrics.update(labels, tf.sigmoid(logits), losses)
        return tf.reduce_mean(losses)


def build_trainer(hp, strategy=None, compute_dtype=tf.float32, learning_rate=None, grad_transform=None,
                  process_metrics=False):
    """Model + optimizer + metrics created in the strategy's scope (tables partitioned under PS).

    process_metrics: metrics as plain variables of this process, outside the scope, that every local
    replica adds into (in the scope of a mirrored strategy each replica would count into its own copy)."""
    scope = strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope()
    metrics = [StreamingMetrics(name="train_metrics"), StreamingMetrics(name="eval_metrics")] \
        if process_metrics else None
    with scope:
        model = build_model(hp, compute_dtype)
        optimizer = SparseOptimizer(hp.optimizer, hp.learning_rate if learning_rate is None else learning_rate)
        loss_scale = LossScale() if tf.as_dtype(compute_dtype) == tf.float16 else None
        metrics = metrics or [StreamingMetrics(name="train_metrics"), StreamingMetrics(name="eval_metrics")]
        return Trainer(model, optimizer, *metrics, loss_scale, grad_transform)
