"""The logistic-regression baseline trained beside DeepFM (`baseline` hyperparameter): DeepFM's first-order term
alone, sum_f w[id_f] * value_f + b, with its own weight table (feature_size x 1, partitioned across the ps tasks like
the model's tables, each shard created where it lives) and its own optimizer (the run's kind and learning rate). It
trains on the same batches inside the same step (its gradients averaged with the model's in one call where workers
average), is evaluated with the model at every evaluation (`baseline_auc=` on the eval line), is checkpointed with
it and is never exported.

`BaselineLocalSteps` is its part of a parameter-server worker's local steps (deepfm_local_steps): its rows read
once, trained on the worker's copy, the change added back once.
"""

import tensorflow as tf

from deepfm_local_steps import _by_shard, _fetch, _send
from deepfm_variables import flat_variables


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
        self.params = flat_variables([self.weights]) + [self.bias]
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
    """The baseline's steps of one group of batches on a parameter-server worker's copy (Adagrad or SGD, as the
    model's local steps): its rows and bias (with their accumulators) read in one transfer per ps, the steps
    trained here, the changes added back in one."""

    def __init__(self, baseline, checked_ids):
        """checked_ids: the model's check of a batch's ids (DeepFM.checked_ids), so a bad id stops with its line."""
        self.baseline, self.checked_ids = baseline, checked_ids
        self.shards = flat_variables([baseline.weights])
        slots = {id(var): slot for var, slot in zip(baseline.params, baseline.optimizer.slots)}
        self.accum = lambda var: slots[id(var)].get("accum")
        self.adagrad = baseline.optimizer.kind == "adagrad"

    def _pieces(self, unique):
        by_shard = _by_shard(self.shards, unique)
        holders = [self.shards] + ([[self.accum(s) for s in self.shards]] if self.adagrad else [])
        pieces = [(var, ids) for holder in holders for var, (ids, _) in zip(holder, by_shard)]
        bias = self.baseline.bias
        pieces += [(bias, None)] + ([(self.accum(bias), None)] if self.adagrad else [])
        return pieces, [at for _, at in by_shard]

    def run(self, ids, values, labels, sizes):
        ids = self.checked_ids(ids)
        unique, places = tf.unique(tf.reshape(ids, [-1]))
        places = tf.reshape(places, tf.shape(ids))
        pieces, at = self._pieces(unique)
        fetched, n = _fetch(pieces), len(self.shards)
        rows = tf.dynamic_stitch(at, fetched[:n])
        rows_acc = tf.dynamic_stitch(at, fetched[n : 2 * n]) if self.adagrad else tf.zeros_like(rows)
        bias = fetched[-2] if self.adagrad else fetched[-1]
        bias_acc = fetched[-1] if self.adagrad else tf.zeros_like(bias)
        start = (rows, rows_acc, bias, bias_acc)
        state = start
        lr = self.baseline.optimizer.learning_rate.read_value()
        ends = tf.cumsum(sizes)
        for step in tf.range(tf.size(sizes)):
            begin, end = ends[step] - sizes[step], ends[step]
            state = self._step(state, places[begin:end], values[begin:end], labels[begin:end], lr)
        changes = [new - old for new, old in zip(state, start)]
        updates = [tf.gather(changes[0], shard_at) for shard_at in at]
        if self.adagrad:
            updates += [tf.gather(changes[1], shard_at) for shard_at in at]
        updates += [changes[2]] + ([changes[3]] if self.adagrad else [])
        _send(pieces, updates)

    def _step(self, state, places, values, labels, lr):
        rows, rows_acc, bias, bias_acc = state
        with tf.GradientTape() as tape:
            tape.watch([rows, bias])
            weights = tf.gather(rows, places)[..., 0]
            logits = tf.reduce_sum(weights * values, axis=1) + bias
            losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            batch = tf.cast(tf.shape(logits)[0], tf.float32)
            loss = tf.reduce_mean(losses) + self.baseline.l2_reg * tf.nn.l2_loss(weights) / batch
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, [rows, bias])]
        rows, rows_acc = self._update(rows, rows_acc, grads[0], lr)
        bias, bias_acc = self._update(bias, bias_acc, grads[1], lr)
        return rows, rows_acc, bias, bias_acc

    def _update(self, param, accum, grad, lr):
        if not self.adagrad:
            return param - lr * grad, accum
        accum = accum + tf.square(grad)
        return param - lr * grad / (tf.sqrt(accum) + self.baseline.optimizer.epsilon), accum
