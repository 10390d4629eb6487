"""DeepFM on core TensorFlow (tf.Module, tf.Variable): first-order weights, the FM second-order term
over the field embeddings and an MLP (the deep part), summed into one logit.

No Keras: the same model runs on TF 2.12 to Keras-3 era TensorFlow, under no strategy,
ParameterServerStrategy (embedding tables become ShardedVariables across the ps tasks), Horovod, or
(Multi-worker) MirroredStrategy with several local replicas.
"""

import os
from fractions import Fraction

import numpy as np
import tensorflow as tf

from deepfm_variables import assign

# Random bits behind one draw of tf.random.uniform in each dtype (TF's UniformDistribution: k * 2**-bits, k
# uniform): float32 keeps 23 bits of a 32-bit word, float16 10, bfloat16 7, float64 52 of a 64-bit one.
_UNIFORM_BITS = {tf.float32: 23, tf.float16: 10, tf.bfloat16: 7, tf.float64: 52}


def dropout_threshold(rate, dtype):
    """-> (high, low, low_bits): tf.nn.dropout(rate) drops an element when its uniform draw u < rate (both in
    `dtype`), that is when k < T for k = u * 2**bits; written with k's top byte h and its other low_bits
    bits l: drop when h < high, or h == high and l < low."""
    bits = _UNIFORM_BITS[tf.as_dtype(dtype)]
    scaled = Fraction(float(np.array(rate, tf.as_dtype(dtype).as_numpy_dtype))) * 2**bits
    threshold = -(-scaled.numerator // scaled.denominator)  # the count of k below the rate
    shift = max(bits, 8) - 8
    threshold <<= max(8 - bits, 0)  # fewer than 8 bits: k is h's top bits
    return threshold >> shift, threshold & ((1 << shift) - 1), shift


def dropout(x, rate):
    """tf.nn.dropout(x, rate) with the same law (each element kept independently with exactly its keep
    probability, scaled by 1 / (1 - rate)) from a quarter of the random words: one random byte per
    element decides, except on the one value in 256 where it ties with the threshold's top byte, where
    the draw's remaining bits come from a second, small draw. Random generation was most of what
    tf.nn.dropout cost a CPU step (it draws one 32-bit word per element)."""
    high, low, low_bits = dropout_threshold(rate, x.dtype)
    scaled = x * tf.constant(1 / (1 - rate), x.dtype)
    if high > 255:  # the rate rounds to 1 in x's dtype: every draw is below it
        return tf.where(tf.zeros_like(x, tf.bool), scaled, tf.zeros([], x.dtype))
    size = tf.size(x)
    seeds = tf.random.uniform([2, 2], maxval=tf.int64.max, dtype=tf.int64)  # stateful, as tf.nn.dropout
    words = tf.random.stateless_uniform([(size + 3) // 4], seeds[0], minval=None, maxval=None, dtype=tf.uint32)
    top = tf.reshape(tf.bitcast(words, tf.uint8), [-1])[:size]
    keep = top >= high
    if low:
        ties = tf.where(tf.equal(top, high))
        rest = tf.random.stateless_uniform([tf.shape(ties)[0]], seeds[1], minval=0, maxval=2**low_bits, dtype=tf.int64)
        keep = tf.tensor_scatter_nd_update(keep, ties, rest >= low)
    keep = tf.reshape(keep, tf.shape(x))
    if x.dtype == tf.float32:
        return tf.where(keep, scaled, tf.zeros([], x.dtype))
    # bfloat16/float16: the CPU's select (and its gradient's) runs several times slower than a multiply by the mask
    return scaled * tf.cast(keep, x.dtype)


def normal_initializer(shape, seed, stddev):
    """-> an initial_value callable: tf.random.stateless_normal(shape, seed=[seed, 7], stddev) called bare; given
    partition_shape/partition_offset (ParameterServerStrategy's partitioned variables), just those rows of that
    same tensor, computed where it runs (the shard's ps task), so a table's values do not depend on its shards."""

    def initial_value(partition_shape=None, partition_offset=None):
        if partition_shape is None:
            return normal_rows(shape, seed, stddev, 0, shape[0])
        return normal_rows(shape, seed, stddev, int(partition_offset[0]), int(partition_shape[0]))

    return initial_value


def normal_rows(shape, seed, stddev, first, count):
    """Rows first..first+count of tf.random.stateless_normal(shape, seed=[seed, 7], stddev), bit for bit, without
    the others: the counter-based generator (Philox) turns each counter value into 4 normals, element by element
    in row-major order, so the rows start `first * width // 4` counters on, a few normals into that block."""
    import numpy as np
    from tensorflow.python.ops import gen_stateless_random_ops_v2 as v2

    width = int(np.prod(shape[1:], dtype=np.int64))
    skip, drop = divmod(first * width, 4)
    with tf.init_scope():
        key, counter = v2.stateless_random_get_key_counter(tf.constant([seed, 7], tf.int64))
        low, high = (int(c) for c in counter.numpy())
    low += skip
    counter = tf.constant(np.array([low % 2**64, (high + low // 2**64) % 2**64], np.uint64))
    size, rows_shape = count * width + drop, [count] + list(shape[1:])
    return _scaled_normals(size, drop, rows_shape, key, counter, stddev)


@tf.function(
    input_signature=[
        tf.TensorSpec([], tf.int64),
        tf.TensorSpec([], tf.int64),
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None], tf.uint64),
        tf.TensorSpec([2], tf.uint64),
        tf.TensorSpec([], tf.float32),
    ]
)
def _scaled_normals(size, drop, shape, key, counter, stddev):
    """The draws times stddev, the first `drop` left out, in `shape`: in one graph the multiply writes into the
    draws' buffer (eagerly the draws stay referenced and it allocates another: a table shard's initialization
    peaked at 2.1x its size, 1.07x so)."""
    from tensorflow.python.ops import gen_stateless_random_ops_v2 as v2

    draws = v2.stateless_random_normal_v2(tf.reshape(size, [1]), key=key, counter=counter, alg=3, dtype=tf.float32)
    return tf.reshape((draws * stddev)[drop:], shape)


@tf.custom_gradient
def spread(rows, places):
    """rows[places]; its gradient sums the places of each row into a dense [rows, ...] tensor (tf.gather's own
    is IndexedSlices over `places`, which the embedding lookup's partitioned stitch would densify anyway)."""

    def gradient(upstream):
        return tf.math.unsorted_segment_sum(upstream, places, tf.shape(rows)[0]), None

    return tf.gather(rows, places), gradient


class DeepFM(tf.Module):
    """first-order weights + FM second-order term + MLP over the field embeddings -> logit."""

    def __init__(
        self,
        field_size,
        feature_size,
        embedding_size,
        deep_layers,
        dropout=0.0,
        batch_norm=False,
        l2_reg=0.0,
        compute_dtype=tf.float32,
        seed=0,
        pooling=None,
        l2_dense=0.0,
        byte_dropout=True,
        distinct_lookup=True,
        name="deepfm",
    ):
        """pooling: None (one input slot per field) or a callable [B, S, K] -> [B, F, K] (raw features'
        SlotPooling: a multi-hot field's slots summed into one field embedding).
        l2_reg: L2 on the embedding and first-order rows a batch looks up, per example: only those rows get
        a gradient, so the updates stay sparse (lazy optimizers, tables partitioned across ps tasks).
        l2_dense: L2 on the MLP kernels.
        byte_dropout: `dropout` (random bytes) rather than tf.nn.dropout (random words), where random
        generation is what a step's dropout costs: on CPUs.
        distinct_lookup: read each distinct id of a batch once (`_lookup`); its tables' gradients then have a
        row per distinct id, a number that differs between replicas."""
        super().__init__(name=name)
        self.pooling = pooling
        self.field_size, self.feature_size, self.embedding_size = field_size, feature_size, embedding_size
        self.dropout, self.batch_norm, self.l2_reg, self.l2_dense = dropout, batch_norm, l2_reg, l2_dense
        self.byte_dropout, self.distinct_lookup = byte_dropout, distinct_lookup
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self._seed = seed
        # Initializers that take partition_shape/partition_offset, with shape and dtype given: under
        # ParameterServerStrategy each shard's values are computed on the ps task that holds it.
        self.first_order = self._normal_variable([feature_size, 1], 0.01, "first_order")
        self.embeddings = self._normal_variable([feature_size, embedding_size], 0.01, "embeddings")
        self.bias = tf.Variable(tf.zeros([]), name="bias")
        self.kernels, self.biases, self.bn_params = [], [], []
        width = field_size * embedding_size
        for i, units in enumerate(list(deep_layers) + [1]):
            scale = np.sqrt(2.0 / (width + units))  # Glorot normal
            self.kernels.append(self._normal_variable([width, units], scale, f"kernel_{i}"))
            self.biases.append(tf.Variable(tf.zeros([units]), name=f"bias_{i}"))
            if batch_norm and i < len(deep_layers):
                self.bn_params.append(
                    {
                        "gamma": tf.Variable(tf.ones([units]), name=f"bn_gamma_{i}"),
                        "beta": tf.Variable(tf.zeros([units]), name=f"bn_beta_{i}"),
                        "mean": tf.Variable(tf.zeros([units]), trainable=False, name=f"bn_mean_{i}"),
                        "var": tf.Variable(tf.ones([units]), trainable=False, name=f"bn_var_{i}"),
                    }
                )
            width = units

    def _normal_variable(self, shape, stddev, name):
        self._seed += 1
        return tf.Variable(normal_initializer(shape, self._seed, stddev), shape=shape, dtype=tf.float32, name=name)

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
        return self.forward(self.sparse_variables, self.dense_variables, ids, values, training)

    def forward(self, sparse, dense, ids, values, training=False):
        """__call__ on the given weights: `sparse` and `dense` in the order of sparse_variables and
        dense_variables, variables or tensors (a parameter-server worker's own copy of some of a table's rows,
        `ids` then its positions in that copy)."""
        ids = self.checked_ids(ids)
        values = tf.cast(values, tf.float32)
        weights, vectors = (self._lookup(table, ids) for table in sparse)
        weights = weights[..., 0]  # [B, F]; vectors [B, F, K]
        scaled = vectors * values[..., None]
        if self.pooling is not None:
            scaled = self.pooling(scaled)
        linear = tf.reduce_sum(weights * values, axis=1)
        summed = tf.reduce_sum(scaled, axis=1)
        fm = 0.5 * tf.reduce_sum(tf.square(summed) - tf.reduce_sum(tf.square(scaled), axis=1), axis=1)
        bias, kernels, biases, bn = self._dense_parts(dense)
        deep = self._mlp(tf.reshape(scaled, [-1, self.field_size * self.embedding_size]), kernels, biases, bn, training)
        logits = linear + fm + deep + bias
        batch = tf.cast(tf.shape(ids)[0], tf.float32)
        l2 = self.l2_reg * (tf.nn.l2_loss(weights) + tf.nn.l2_loss(vectors)) / batch
        if self.l2_dense:
            l2 += self.l2_dense * tf.add_n([tf.nn.l2_loss(k) for k in kernels])
        return logits, l2

    def _dense_parts(self, dense):
        """dense (dense_variables' order) -> bias, kernels, biases, batch norm's parameters per layer (its moving
        statistics stay the variables)."""
        layers = len(self.kernels)
        kernels, biases, bn = dense[1 : 1 + layers], dense[1 + layers : 1 + 2 * layers], dense[1 + 2 * layers :]
        params = [
            {"gamma": bn[2 * i], "beta": bn[2 * i + 1], "mean": p["mean"], "var": p["var"]}
            for i, p in enumerate(self.bn_params)
        ]
        return dense[0], kernels, biases, params

    def _lookup(self, table, ids):
        """table's rows at ids ([..., width]). With distinct_lookup each distinct id of the batch is read once
        (CTR ids repeat) and spread to its places: under parameter servers only the distinct rows cross from
        the ps, and the table's gradient comes back summed per distinct row, as the optimizer applies it."""
        if not self.distinct_lookup:
            return tf.nn.embedding_lookup(table, ids)
        unique, places = tf.unique(tf.reshape(ids, [-1]))
        rows = spread(tf.nn.embedding_lookup(table, unique), places)
        return tf.reshape(rows, tf.concat([tf.shape(ids), [table.shape[1]]], 0))

    def checked_ids(self, ids):
        """ids, once every one is in [0, feature_size): a row with another id is a bad row on every device.
        The CPU's gather raises on it, a GPU's returns zeros and trains on (tf.gather's documented GPU
        behaviour); this check stops both with one line naming the id, its place and the fix (built only
        when an id is out: a step with good ids pays for one comparison)."""
        ids = tf.convert_to_tensor(ids)
        good = tf.logical_and(ids >= 0, ids < self.feature_size)
        check = tf.cond(tf.reduce_all(good), lambda: tf.constant(True), lambda: self._bad_id(ids, good))
        with tf.control_dependencies([check]):
            return tf.identity(ids)

    def _bad_id(self, ids, good):
        first = tf.argmin(tf.reshape(tf.cast(good, tf.int32), [-1]))
        width = tf.cast(tf.shape(ids)[1], first.dtype)
        problem = tf.strings.join(
            [
                "bad row: id ",
                tf.strings.as_string(tf.reshape(ids, [-1])[first]),
                " (row ",
                tf.strings.as_string(first // width),
                " of the batch, field slot ",
                tf.strings.as_string(first % width),
                f") is outside 0..{self.feature_size - 1}: feature_size ({self.feature_size}) must exceed every id in "
                "the data; set it to the largest id + 1, or index the data for this model",
            ]
        )
        with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [problem], summarize=1)]):
            return tf.constant(False)

    def _mlp(self, x, kernels, biases, bn_params, training):
        # Training steps compute in compute_dtype; evaluation and prediction in float32, as the export serves,
        # so the evaluation that picks the model to export measures the model it exports.
        dtype = self.compute_dtype if training else tf.float32
        x = tf.cast(x, dtype)
        last = len(kernels) - 1
        for i, (kernel, bias) in enumerate(zip(kernels, biases)):
            x = tf.matmul(x, tf.cast(kernel, dtype)) + tf.cast(bias, dtype)
            if i == last:
                break
            if bn_params:
                x = self._batch_norm(x, bn_params[i], training)
            x = tf.nn.relu(x)
            if training and self.dropout > 0:
                x = dropout(x, self.dropout) if self.byte_dropout else tf.nn.dropout(x, rate=self.dropout)
        return tf.cast(x[:, 0], tf.float32)

    def _batch_norm(self, x, p, training, momentum=0.99, epsilon=1e-3):
        x32 = tf.cast(x, tf.float32)
        if training:
            mean, var = tf.nn.moments(x32, axes=[0])
            moving_mean, moving_var = mean, var
            replica = tf.distribute.get_replica_context()
            if replica is not None and replica.num_replicas_in_sync > 1:  # same moving stats in every copy
                moving_mean, moving_var = replica.all_reduce(tf.distribute.ReduceOp.MEAN, [mean, var])
            assign(p["mean"], momentum * p["mean"] + (1 - momentum) * moving_mean)
            assign(p["var"], momentum * p["var"] + (1 - momentum) * moving_var)
        else:
            mean, var = p["mean"], p["var"]
        y = tf.nn.batch_normalization(x32, mean, var, p["beta"], p["gamma"], epsilon)
        return tf.cast(y, x.dtype)

    def predict(self, ids, values):
        logits, _ = self(ids, values, training=False)
        return tf.sigmoid(logits)


def build_model(hp, compute_dtype=tf.float32):
    """DeepFM from parsed hyperparameters (deepfm_hparams.parse_hyperparameters); with raw features the
    sizes come from the spec's layout and the model pools each field's slots."""
    from deepfm_hparams import feature_spec

    pooling, spec = None, feature_spec(hp)
    if spec is not None:
        import deepfm_features as F
        from deepfm_raw import SlotPooling

        layout = F.build_layout(spec)
        pooling = SlotPooling(layout, hp.embedding_size)
    return DeepFM(
        hp.field_size,
        hp.feature_size,
        hp.embedding_size,
        hp.deep_layers,
        hp.dropout,
        hp.batch_norm,
        hp.l2_reg,
        compute_dtype=compute_dtype,
        pooling=pooling,
        l2_dense=hp.l2_dense,
        byte_dropout=not steps_run_on_gpus(),
        distinct_lookup=not under_mirrored_strategy(),
    )


def under_mirrored_strategy():
    """Whether the model is built for a (MultiWorker)MirroredStrategy: TF's collectives there all-gather the
    replicas' IndexedSlices gradients only when every replica has as many rows (unequal ones abort the step
    with a shape mismatch, on TF 2.14 and 2.21), so a table's gradient keeps a row per place in the batch."""
    return isinstance(
        tf.distribute.get_strategy(), (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    )


def steps_run_on_gpus():
    """Whether the training steps run on GPUs: the host has some (SM_NUM_GPUS; a parameter-server chief hides
    its own but traces the steps its GPU workers run) or TensorFlow sees one. There tf.nn.dropout stays: random
    words are cheap on a GPU, and the byte dropout's bool scatter has no GPU kernel (TensorScatterUpdate)."""
    return int(os.environ.get("SM_NUM_GPUS") or 0) > 0 or bool(tf.config.list_physical_devices("GPU"))
