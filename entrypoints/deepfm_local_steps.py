"""Local steps of a parameter-server worker (`local_steps` > 1): the worker reads the dense weights and the table
rows its next batches use, with their Adagrad accumulators, once; trains its own copy of them for those steps; and
adds what changed back on the ps tasks in one exchange. The ps traffic of a step is then paid once every
`local_steps` steps, as Downpour SGD's n_fetch and n_push: the copy does not see the other workers' updates until
its next read (stale reads), and theirs reach it added, not overwritten. With one worker the result is that of as
many ordinary steps.

Adagrad and SGD only (deepfm_hparams refuses the others): under them a row whose gradient is zero stays as it was,
so the copy of the rows is updated as one dense tensor; lazy Adam and FTRL would change it.
"""

import tensorflow as tf

from deepfm_features import BAD_ROWS_KEY
from deepfm_hparams import LOCAL_STEP_OPTIMIZERS
from deepfm_variables import assign_add, flat_variables


class LocalSteps:
    """`run(ids, values, labels, sizes)`: the steps of one group of batches (their rows concatenated, `sizes` the
    rows of each) on the worker's copy, then one exchange. -> the train metrics' counts of the steps."""

    def __init__(self, trainer):
        self.model, self.optimizer, self.trainer = trainer.model, trainer.optimizer, trainer
        if self.optimizer.kind not in LOCAL_STEP_OPTIMIZERS:
            raise ValueError(
                f"local steps need optimizer {' or '.join(LOCAL_STEP_OPTIMIZERS)}, not {self.optimizer.kind}"
            )
        slots = {id(var): slot for var, slot in zip(trainer.variables, self.optimizer.slots)}  # build()'s order
        self.accum = lambda var: slots[id(var)].get("accum")  # None under SGD
        self.adagrad = self.optimizer.kind == "adagrad"
        self.tables = [flat_variables([table]) for table in self.model.sparse_variables]
        self.dense = list(self.model.dense_variables)

    def run(self, ids, values, labels, sizes):
        ids = self.model.checked_ids(ids)  # the ids themselves: the copy's positions would pass any bound
        unique, places = tf.unique(tf.reshape(ids, [-1]))
        places = tf.reshape(places, tf.shape(ids))
        pieces, in_copy = self._pieces(unique)
        start = self._read(pieces, in_copy)
        weights = tuple(start)
        lr = self.optimizer.learning_rate.read_value()
        counts = self.trainer.train_metrics.zero_counts()
        scale = self.trainer.loss_scale.scale.read_value() if self.trainer.loss_scale is not None else None
        all_finite = tf.constant(True)
        ends = tf.cumsum(sizes)
        for step in tf.range(tf.size(sizes)):
            begin, end = ends[step] - sizes[step], ends[step]
            weights, new_counts, finite = self._step(
                weights, places[begin:end], values[begin:end], labels[begin:end], lr, scale
            )
            counts = tuple(total + new for total, new in zip(counts, new_counts))
            all_finite = tf.logical_and(all_finite, finite)
        self._push(pieces, in_copy, start, weights)
        assign_add(self.optimizer.iterations, tf.cast(tf.size(sizes), tf.int64))
        if scale is not None:
            self.trainer.loss_scale.update(all_finite)
        return counts

    def _step(self, weights, places, values, labels, lr, scale):
        """One step on the copy: weights = (values, accumulators) of the tables' rows and then of the dense
        variables, in _read's order."""
        params = list(weights[::2])
        sparse, dense = params[: len(self.tables)], params[len(self.tables) :]
        with tf.GradientTape() as tape:
            tape.watch(params)
            logits, l2 = self.model.forward(sparse, dense, places, values, training=True)
            losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_mean(losses) + l2
            scaled = loss * scale if scale is not None else loss
        grads = [tf.convert_to_tensor(grad) for grad in tape.gradient(scaled, params)]
        finite = tf.constant(True)
        if scale is not None:
            grads = [grad / scale for grad in grads]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(grad)) for grad in grads])
        updated = []
        for param, accum, grad in zip(params, weights[1::2], grads):
            param, accum = self._update(param, accum, grad, lr)
            updated += [param, accum]
        weights = tuple(tf.where(finite, new, old) for new, old in zip(updated, weights))
        return weights, self.trainer.train_metrics.counts(labels, tf.sigmoid(logits), losses), finite

    def _update(self, param, accum, grad, lr):
        if not self.adagrad:
            return param - lr * grad, accum
        accum = accum + tf.square(grad)  # ResourceApplyAdagradV2's update
        return param - lr * grad / (tf.sqrt(accum) + self.optimizer.epsilon), accum

    def _pieces(self, unique):
        """What the copy holds, piece by piece as the ps tasks keep it: [(variable, the ids read from it, or None for
        all of it)], each table's rows (then its accumulators') by shard, then each dense variable (and its
        accumulator); and for each table, where each shard's rows go in the copy."""
        pieces, places = [], []
        for shards in self.tables:
            by_shard = _by_shard(shards, unique)
            places.append([at for _, at in by_shard])
            holders = (shards, [self.accum(shard) for shard in shards]) if self.adagrad else (shards,)
            pieces += [(var, ids) for holder in holders for var, (ids, _) in zip(holder, by_shard)]
        for var in self.dense:
            pieces += [(var, None), (self.accum(var), None)] if self.adagrad else [(var, None)]
        return pieces, places

    def _read(self, pieces, places):
        """-> the copy: [rows, accumulator rows] of each table, then [value, accumulator] of each dense variable
        (SGD has no accumulator: zeros stand in and are never added back)."""
        values, weights = iter(_fetch(pieces)), []
        for at in places:
            rows = tf.dynamic_stitch(at, [next(values) for _ in at])
            weights += [
                rows,
                tf.dynamic_stitch(at, [next(values) for _ in at]) if self.adagrad else tf.zeros_like(rows),
            ]
        for _ in self.dense:
            value = next(values)
            weights += [value, next(values) if self.adagrad else tf.zeros_like(value)]
        return weights

    def _push(self, pieces, places, start, end):
        """Add the copy's changes (end - start) to the variables and accumulators on the ps tasks."""
        changes, updates = iter([new - old for new, old in zip(end, start)]), []
        for at in places:
            rows, accums = next(changes), next(changes)
            for change in (rows, accums) if self.adagrad else (rows,):
                updates += [tf.gather(change, shard_at) for shard_at in at]
        for value, accum in zip(changes, changes):
            updates += [value, accum] if self.adagrad else [value]
        _send(pieces, updates)


def _by_device(pieces):
    devices = {}
    for i, (var, _) in enumerate(pieces):
        devices.setdefault(var.device, []).append(i)
    return devices


def _size(var, ids):
    return var.shape.num_elements() if ids is None else tf.size(ids) * var.shape[1]


def _fetch(pieces):
    """The value of each piece, one transfer from each device that holds some: the pieces are packed into one
    tensor where they live and unpacked here."""
    out = [None] * len(pieces)
    for device, members in _by_device(pieces).items():
        with tf.device(device):
            packed = tf.concat(
                [
                    tf.reshape(var if ids is None else tf.gather(var, ids), [-1])
                    for var, ids in (pieces[i] for i in members)
                ],
                0,
            )
        sizes = tf.stack([tf.cast(_size(*pieces[i]), tf.int32) for i in members])
        for i, part in zip(members, tf.split(packed, sizes, num=len(members))):
            var, ids = pieces[i]
            out[i] = tf.reshape(part, var.shape if ids is None else [-1, var.shape[1]])
    return out


def _send(pieces, updates):
    """Add each update to its piece, one transfer to each device: packed here, unpacked and applied where the
    variables live."""
    for device, members in _by_device(pieces).items():
        packed = tf.concat([tf.reshape(updates[i], [-1]) for i in members], 0)
        sizes = tf.stack([tf.cast(_size(*pieces[i]), tf.int32) for i in members])
        with tf.device(device):
            for i, part in zip(members, tf.split(packed, sizes, num=len(members))):
                var, ids = pieces[i]
                if ids is None:
                    assign_add(var, tf.reshape(part, var.shape))
                else:
                    tf.raw_ops.ResourceScatterAdd(
                        resource=var.handle, indices=ids, updates=tf.reshape(part, [-1, var.shape[1]])
                    )


def take(iterator, count, raw):
    """Up to `count` batches of `iterator`, as LocalSteps.run takes them: -> (TensorArrays of their ids, values and
    labels, the batches' sizes, bad rows counted (raw features), whether the data ended first)."""
    ids, values, labels = (
        tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False)
        for dtype in (tf.int64, tf.float32, tf.float32)
    )
    sizes = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[])
    bad, ended = tf.constant(0, tf.int64), tf.constant(False)
    for i in tf.range(count):
        batch = iterator.get_next_as_optional()
        if not batch.has_value():
            ended = tf.constant(True)
            break
        features, label = batch.get_value()
        ids = ids.write(tf.cast(i, tf.int32), features["ids"])
        values = values.write(tf.cast(i, tf.int32), tf.cast(features["values"], tf.float32))
        labels = labels.write(tf.cast(i, tf.int32), tf.cast(label, tf.float32))
        sizes = sizes.write(tf.cast(i, tf.int32), tf.shape(label)[0])
        if raw:
            bad += tf.cast(features[BAD_ROWS_KEY], tf.int64)
    return ids, values, labels, sizes.stack(), bad, ended


def _by_shard(shards, unique):
    """[(the ids of `unique` in each shard, shifted to its rows, and their places in `unique`)]: a partitioned
    table's shards hold consecutive rows."""
    out, offset = [], 0
    for shard in shards:
        rows = shard.shape[0]
        inside = tf.where(tf.logical_and(unique >= offset, unique < offset + rows))[:, 0]
        out.append((tf.gather(unique, inside) - offset, tf.cast(inside, tf.int32)))
        offset += rows
    return out
