"""The logistic-regression baseline trained beside DeepFM (`baseline` hyperparameter): DeepFM's first-order term
alone, sum_f w[id_f] * value_f + b, with its own weight table (feature_size x 1, partitioned across the ps tasks like
the model's tables, each shard created where it lives) and its own optimizer (OPTIMIZER, whatever the run's). It
trains on the same batches inside the same step (its gradients averaged with the model's in one call where workers
average), is evaluated with the model at every evaluation (`baseline_auc=` on the eval line), is checkpointed with
it and is never exported.

`BaselineLocalSteps` is its part of a parameter-server worker's local steps (deepfm_local_steps): its rows read
once, trained on the worker's copy, the change added back once (whatever the model's optimizer: local steps
need Adagrad or SGD of the model, not of the baseline, whose lazy Adam's copy updates only the rows each step has).
"""

import tensorflow as tf

from deepfm_local_steps import _by_shard, _fetch, _send
from deepfm_variables import assign_add, flat_variables, set_untracked

# Its optimizer, whatever the run's (kind, learning rate): lazy Adam at 0.002 came within 0.0004 of scikit-learn's
# tuned logistic regression after the demo's 4 epochs, where the demo's Adagrad at 0.3 was 0.0074 below it, still
# climbing (docs/quality.md).
OPTIMIZER = ("adam", 0.002)


class Baseline(tf.Module):
    """Logistic regression over the model's ids and values. `optimizer`: a SparseOptimizer of its own (built
    here, in the caller's strategy scope); `l2_reg`: the model's L2 on the rows a batch looks up, per example."""

    def __init__(self, feature_size, optimizer, l2_reg=0.0, name="baseline"):
        super().__init__(name=name)
        shape = [feature_size, 1]

        def zeros(partition_shape=None, partition_offset=None):  # a shard's own rows, on its ps
            return tf.zeros(shape if partition_shape is None else partition_shape)

        self.weights = tf.Variable(zeros, shape=shape, dtype=tf.float32, name="baseline_weights")
        self.bias = tf.Variable(tf.zeros([]), name="baseline_bias")
        self.optimizer = optimizer
        self.l2_reg = l2_reg
        set_untracked(self, "params", flat_variables([self.weights]) + [self.bias])
        optimizer.build(self.params)

    def logits(self, ids, values):
        """-> (logits [batch], the weights looked up [batch, fields])."""
        weights = tf.nn.embedding_lookup(self.weights, ids)[..., 0]
        return tf.reduce_sum(weights * tf.cast(values, tf.float32), axis=1) + self.bias, weights

    def loss(self, ids, values, labels):
        """-> the training loss of a batch (mean log loss + L2 on the rows it looks up)."""
        logits, weights = self.logits(ids, values)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
        batch = tf.cast(tf.shape(logits)[0], tf.float32)
        return tf.reduce_mean(losses) + self.l2_reg * tf.nn.l2_loss(weights) / batch

    def evaluate(self, metrics, ids, values, labels):
        """Count a batch's predictions into `metrics` (a StreamingMetrics)."""
        logits, _ = self.logits(ids, values)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
        metrics.update(labels, tf.sigmoid(logits), losses)


class BaselineLocalSteps:
    """The baseline's steps of one group of batches on a parameter-server worker's copy: its rows and bias with
    their lazy-Adam moments read in one transfer per ps, the steps trained here (a row's moments move only in a step
    whose batch has it, as the lazy update does), the changes added back in one."""

    def __init__(self, baseline, checked_ids):
        """checked_ids: the model's check of a batch's ids (DeepFM.checked_ids), so a bad id stops with its line."""
        self.baseline, self.checked_ids = baseline, checked_ids
        self.optimizer = baseline.optimizer
        self.shards = flat_variables([baseline.weights])
        self.slots = {id(var): slot for var, slot in zip(baseline.params, self.optimizer.slots)}

    def _pieces(self, unique):
        by_shard = _by_shard(self.shards, unique)
        holders = [self.shards] + [[self.slots[id(s)][name] for s in self.shards] for name in ("m", "v")]
        pieces = [(var, ids) for holder in holders for var, (ids, _) in zip(holder, by_shard)]
        bias = self.baseline.bias
        pieces += [(bias, None), (self.slots[id(bias)]["m"], None), (self.slots[id(bias)]["v"], None)]
        return pieces, [at for _, at in by_shard]

    def run(self, ids, values, labels, sizes):
        ids = self.checked_ids(ids)
        unique, places = tf.unique(tf.reshape(ids, [-1]))
        places = tf.reshape(places, tf.shape(ids))
        pieces, at = self._pieces(unique)
        fetched, n = _fetch(pieces), len(self.shards)
        start = tuple(tf.dynamic_stitch(at, fetched[k * n : (k + 1) * n]) for k in range(3)) + tuple(fetched[-3:])
        state = start
        lr = self.optimizer.learning_rate.read_value()
        first = tf.cast(self.optimizer.iterations, tf.float32)
        ends = tf.cumsum(sizes)
        for step in tf.range(tf.size(sizes)):
            begin, end = ends[step] - sizes[step], ends[step]
            t = first + tf.cast(step, tf.float32) + 1
            state = self._step(state, places[begin:end], values[begin:end], labels[begin:end], lr, t, tf.size(unique))
        changes = [new - old for new, old in zip(state, start)]
        updates = [tf.gather(change, shard_at) for change in changes[:3] for shard_at in at] + changes[3:]
        _send(pieces, updates)
        assign_add(self.optimizer.iterations, tf.cast(tf.size(sizes), tf.int64))

    def _step(self, state, places, values, labels, lr, t, rows_in_copy):
        rows, m, v, bias, bias_m, bias_v = state
        with tf.GradientTape() as tape:
            tape.watch([rows, bias])
            weights = tf.gather(rows, places)[..., 0]
            logits = tf.reduce_sum(weights * values, axis=1) + bias
            losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            batch = tf.cast(tf.shape(logits)[0], tf.float32)
            loss = tf.reduce_mean(losses) + self.baseline.l2_reg * tf.nn.l2_loss(weights) / batch
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, [rows, bias])]
        flat = tf.reshape(places, [-1])
        touched = tf.math.unsorted_segment_max(tf.ones_like(flat), flat, rows_in_copy)[:, None] > 0  # lazy: these
        opt = self.optimizer
        step_lr = lr * tf.sqrt(1 - tf.pow(opt.beta2, t)) / (1 - tf.pow(opt.beta1, t))
        new_m = opt.beta1 * m + (1 - opt.beta1) * grads[0]
        new_v = opt.beta2 * v + (1 - opt.beta2) * tf.square(grads[0])
        m, v = tf.where(touched, new_m, m), tf.where(touched, new_v, v)
        rows = tf.where(touched, rows - step_lr * m / (tf.sqrt(v) + opt.epsilon), rows)
        bias_m = opt.beta1 * bias_m + (1 - opt.beta1) * grads[1]
        bias_v = opt.beta2 * bias_v + (1 - opt.beta2) * tf.square(grads[1])
        bias = bias - step_lr * bias_m / (tf.sqrt(bias_v) + opt.epsilon)
        return rows, m, v, bias, bias_m, bias_v
