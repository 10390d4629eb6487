"""Raw features in TensorFlow: batch-first parsing of text lines or tf.train.Examples, the in-graph
transformation to the model's (ids, values), slot pooling for the model, and a raw serving signature.

The steps, each usable alone:
  records --parse_*_batch--> raw features by name + labels + bad-row count
          --FeatureTransform--> {"ids": int64[B, S], "values": float32[B, S]}  (layout of deepfm_features)
  model:  embeddings of the S slots --SlotPooling--> one embedding per field [B, F, K]
Raw features by name: numeric float32[B] (NaN = missing), categorical string[B] ("" = missing), multi-hot
string[B] (tokens joined by the field's separator). Serving takes exactly these.

Hashing is tf.strings.to_hash_bucket_fast (FarmHash Fingerprint64): the same bucket in every process and
TensorFlow version, whatever Python's hash seed.
"""

import tensorflow as tf

import deepfm_features as F

NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


# ---- parsing ----


def _first_bad_row(spec, lines, cells, label_cells, numeric_names, block, valid, files):
    """The assertion text naming what is wrong with the first bad row of a batch (BAD_RECORD first: the run then
    locates it by file and line): its column count, its label, or its first numeric cell that is not a number;
    then the row itself (its first 200 characters)."""
    import deepfm_input as di

    width = len(spec.columns)
    counts = cells.row_lengths()
    label_ok = tf.strings.regex_full_match(label_cells, NUMBER)
    is_label = label_ok & di.is_label(tf.strings.to_number(tf.where(label_ok, label_cells, "0"), tf.float32))
    valid = valid if valid is not None else tf.ones([tf.shape(lines)[0], 1], tf.bool)
    good = tf.equal(counts, width) & is_label & tf.reduce_all(valid, axis=1)
    first = tf.argmin(tf.cast(good, tf.int32))
    column = tf.argmin(tf.cast(valid[first], tf.int32))
    names = tf.constant(numeric_names or [""])
    cell = block[first][column] if block is not None else tf.constant("")
    problem = tf.where(
        tf.not_equal(counts[first], width),
        tf.strings.join(
            ["row has ", tf.strings.as_string(counts[first]), f" columns, not the {width} of features.columns"]
        ),
        tf.where(
            tf.logical_not(label_ok[first]),
            tf.strings.join(["label ", label_cells[first], " is not a number"]),
            tf.where(
                tf.logical_not(is_label[first]),
                tf.strings.join(["label ", label_cells[first], " is not 0 or 1"]),
                tf.strings.join(["column ", tf.gather(names, column), " value ", cell, " is not a number"]),
            ),
        ),
    )
    where = [" in ", tf.gather(files, first)] if files is not None else []
    return tf.strings.join([di.BAD_RECORD, problem, *where, ": ", tf.strings.substr(lines[first], 0, 200)])


def parse_text_batch(lines, spec, files=None):
    """A batch of text lines -> (raw features by name, labels float32[B'], bad rows dropped int64).

    A row is bad when its column count differs from spec.columns, its label is not 0 or 1, or a numeric cell
    (when not empty) is not a number. bad_rows: skip drops bad rows and counts them; fail stops with an
    InvalidArgumentError naming the first bad row and what is wrong with it (and its file, when `files`[B] is
    given).
    """
    import deepfm_input as di

    width = len(spec.columns)
    index = {name: i for i, name in enumerate(spec.columns)}
    cells = tf.strings.split(lines, sep=spec.delimiter)
    good = tf.equal(cells.row_lengths(), width)
    table = cells.to_tensor(default_value="", shape=[None, width])
    label_cells = table[:, index[spec.label]]
    good &= tf.strings.regex_full_match(label_cells, NUMBER)
    labels = tf.strings.to_number(tf.where(good, label_cells, "0"), tf.float32)
    good &= di.is_label(labels)
    numeric_names = [f.name for f in spec.numeric]
    block = valid = None
    if numeric_names:
        block = tf.gather(table, [index[n] for n in numeric_names], axis=1)
        missing = tf.equal(block, "")
        valid = missing | tf.strings.regex_full_match(block, NUMBER)
        good &= tf.reduce_all(valid, axis=1)
        numbers = tf.strings.to_number(tf.where(valid & ~missing, block, "0"), tf.float32)
        numbers = tf.where(missing, tf.constant(float("nan")), numbers)
    if spec.bad_rows == "fail":

        def refuse():
            problem = _first_bad_row(spec, lines, cells, label_cells, numeric_names, block, valid, files)
            with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [problem], summarize=1)]):
                return tf.constant(False)

        checks = [tf.cond(tf.reduce_all(good), lambda: tf.constant(True), refuse)]
        bad, keep = tf.constant(0, tf.int64), None
    else:
        bad, keep, checks = tf.reduce_sum(tf.cast(~good, tf.int64)), good, []
    labels = tf.where(good, labels, 0.0)
    if keep is not None:  # mask whole blocks once, not column by column
        table, labels = tf.boolean_mask(table, keep), tf.boolean_mask(labels, keep)
        numbers = tf.boolean_mask(numbers, keep) if numeric_names else None
    raw = {name: numbers[:, i] for i, name in enumerate(numeric_names)}
    for field in spec.categorical + spec.multi_hot:
        raw[field.name] = table[:, index[field.name]]
    with tf.control_dependencies(checks):
        labels = tf.identity(labels)
    return raw, labels, bad


def example_features(spec):
    """tf.io.parse_example's features for raw Examples: label float, numeric float (absent = missing),
    categorical bytes (absent = missing), multi-hot a bytes list of tokens."""
    features = {spec.label: tf.io.FixedLenFeature([], tf.float32)}
    for field in spec.numeric:
        features[field.name] = tf.io.FixedLenFeature([], tf.float32, default_value=float("nan"))
    for field in spec.categorical:
        features[field.name] = tf.io.FixedLenFeature([], tf.string, default_value="")
    for field in spec.multi_hot:
        features[field.name] = tf.io.RaggedFeature(tf.string)
    return features


def parse_example_batch(serialized, spec):
    """Serialized tf.train.Examples[B] -> (raw features by name, labels, bad rows dropped). A row whose label
    is not 0 or 1 is bad (skip: dropped and counted; fail: an assertion naming it). A malformed record fails
    the batch with TensorFlow's parse error (both policies)."""
    import deepfm_input as di

    parsed = tf.io.parse_example(serialized, example_features(spec))
    labels = parsed.pop(spec.label)
    for field in spec.multi_hot:
        parsed[field.name] = tf.strings.reduce_join(parsed[field.name], axis=1, separator=field.separator)
    good = di.is_label(labels)
    if spec.bad_rows == "fail":
        return parsed, di.checked_rows(labels, tf.zeros([tf.shape(labels)[0], 0])), tf.constant(0, tf.int64)
    parsed = {name: tf.boolean_mask(column, good) for name, column in parsed.items()}
    return parsed, tf.boolean_mask(labels, good), tf.reduce_sum(tf.cast(~good, tf.int64))


def batch_parser(spec, transform=None):
    """records[B] (lines or serialized Examples; or a (lines, files) pair) -> (features, labels), for
    Dataset.map after batch. features: transform(raw) (or raw) plus F.BAD_ROWS_KEY."""

    def parse(records, files=None):
        if spec.format == "tfrecord":
            raw, labels, bad = parse_example_batch(records, spec)
        else:
            raw, labels, bad = parse_text_batch(records, spec, files)
        features = dict(transform(raw)) if transform is not None else dict(raw)
        features[F.BAD_ROWS_KEY] = bad
        return features, labels

    return parse


def named_lines(files):
    """Lines of each file paired with the file's name (for bad-row errors), file by file."""
    return tf.data.Dataset.from_tensor_slices(files).flat_map(
        lambda name: tf.data.Dataset.zip((tf.data.TextLineDataset(name), tf.data.Dataset.from_tensors(name).repeat()))
    )


def raw_dataset(files, spec, batch_size, transform=None, shuffle_buffer=0, seed=None, epochs=1, drop_remainder=False):
    """Batches of (features, labels) from raw files: records -> shuffle -> batch -> parse (+ transform).
    files: paths (list or string tensor). epochs <= 0 repeats forever. The bad rows each batch dropped
    are features[F.BAD_ROWS_KEY]; sum them for the worker's total. With bad_rows: fail, each line travels
    with its file's name, for the error."""
    if spec.format == "tfrecord":
        records = tf.data.TFRecordDataset(files)
    elif spec.bad_rows == "fail":
        records = named_lines(files)
    else:
        records = tf.data.TextLineDataset(files)
    if shuffle_buffer > 1:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    batches = records.batch(batch_size, drop_remainder=drop_remainder)
    batches = batches.map(batch_parser(spec, transform), num_parallel_calls=tf.data.AUTOTUNE)
    if epochs != 1:
        batches = batches.repeat(epochs if epochs > 0 else None)
    return batches.prefetch(tf.data.AUTOTUNE)


# ---- transformation ----


def _signed_log1p(x):
    return tf.sign(x) * tf.math.log1p(tf.abs(x))


def _group_key(field):
    """Fields transformed by one op over their stacked columns: same kind and settings."""
    if isinstance(field, F.NumericField):
        return ("numeric", field.transform, field.boundaries)
    if isinstance(field, F.CategoricalField):
        return ("vocabulary", field.name) if field.vocabulary else ("hash", field.hash_buckets)
    return ("bag", field.name)


class FeatureTransform(tf.Module):
    """Raw features by name -> {"ids": int64[B, S], "values": float32[B, S]} in the spec's layout.
    Fields of one kind and settings are transformed together (one hash or bucketize op over their
    stacked columns), then the slots are put in layout order. Vocabulary tables are tracked here, so a
    SavedModel holding this module carries them as assets."""

    def __init__(self, spec, layout=None, name="feature_transform"):
        super().__init__(name=name)
        self.spec = spec
        self.layout = layout or F.build_layout(spec)
        self.tables = {}
        groups = {}
        for slots in self.layout.fields:
            groups.setdefault(_group_key(slots.spec), []).append(slots)
            field = slots.spec
            if isinstance(field, F.CategoricalField) and field.vocabulary:
                known = slots.size - 2
                init = tf.lookup.TextFileInitializer(
                    field.vocabulary,
                    tf.string,
                    tf.lookup.TextFileIndex.WHOLE_LINE,
                    tf.int64,
                    tf.lookup.TextFileIndex.LINE_NUMBER,
                    vocab_size=known,
                )
                self.tables[field.name] = tf.lookup.StaticHashTable(init, default_value=known)
        self._groups = list(groups.values())
        grouped_slots = [s.first_slot + k for members in self._groups for s in members for k in range(s.slots)]
        order = {slot: position for position, slot in enumerate(grouped_slots)}
        self._order = [order[slot] for slot in range(self.layout.slot_count)]

    def __call__(self, raw):
        ids, values = [], []
        for members in self._groups:
            field_ids, field_values = self._group(members, raw)
            ids.append(field_ids)
            values.append(field_values)
        ids, values = tf.concat(ids, axis=1), tf.concat(values, axis=1)
        if self._order != sorted(self._order):
            ids, values = tf.gather(ids, self._order, axis=1), tf.gather(values, self._order, axis=1)
        return {"ids": ids, "values": values}

    def _group(self, members, raw):
        field = members[0].spec
        offsets = tf.constant([m.offset for m in members], tf.int64)
        if isinstance(field, F.MultiHotField):
            return self._bag(field, offsets[0], raw[field.name])
        if isinstance(field, F.NumericField):
            x = tf.stack([tf.cast(raw[m.spec.name], tf.float32) for m in members], axis=1)
            missing = tf.math.is_nan(x)
            x = tf.where(missing, tf.zeros_like(x), x)
            if field.transform == "bucketize":
                bucket = tf.cast(
                    tf.raw_ops.Bucketize(input=x, boundaries=[float(b) for b in field.boundaries]), tf.int64
                )
                local, value = tf.where(missing, tf.zeros_like(bucket), 1 + bucket), tf.ones_like(x)
            else:
                local = tf.cast(~missing, tf.int64)
                value = tf.where(missing, tf.ones_like(x), _signed_log1p(x) if field.transform == "log1p" else x)
            return offsets + local, value
        column = tf.stack([raw[m.spec.name] for m in members], axis=1)
        if field.vocabulary:
            local = 1 + self.tables[field.name].lookup(column)
        else:
            local = 1 + tf.strings.to_hash_bucket_fast(column, field.hash_buckets)
        local = tf.where(tf.equal(column, ""), tf.zeros_like(local), local)
        return offsets + local, tf.ones(tf.shape(local), tf.float32)

    @staticmethod
    def _bag(field, offset, column):
        tokens = tf.strings.split(column, sep=field.separator)
        tokens = tf.ragged.boolean_mask(tokens, tf.not_equal(tokens, ""))[:, : field.max_length]
        hashed = tokens.with_flat_values(
            offset + 1 + tf.strings.to_hash_bucket_fast(tokens.flat_values, field.hash_buckets)
        )
        lengths = tokens.row_lengths()
        ids = hashed.to_tensor(default_value=offset, shape=[None, field.max_length])
        present = tf.cast(tf.sequence_mask(lengths, field.max_length), tf.float32)
        if field.pooling == "mean":
            present = present / tf.cast(tf.maximum(lengths, 1), tf.float32)[:, None]
        empty = tf.cast(tf.equal(lengths, 0), tf.float32)[:, None] * tf.one_hot([0], field.max_length)
        return ids, present + empty


# ---- the model's side ----


class SlotPooling:
    """Sums each field's slots: scaled embeddings [B, S, K] -> one per field [B, F, K], each field
    masked to its own embedding width (the first k of the model's K dimensions; the rest are zero)."""

    def __init__(self, layout, embedding_size):
        self.field_size = layout.field_size
        self.slot_fields = tf.constant(layout.slot_fields, tf.int32)
        self.identity = layout.slot_count == layout.field_size
        sizes = layout.embedding_sizes(embedding_size)
        self.mask = (
            None if min(sizes) == embedding_size else tf.sequence_mask(sizes, embedding_size, dtype=tf.float32)[None]
        )

    def __call__(self, scaled):
        pooled = scaled
        if not self.identity:
            pooled = tf.math.segment_sum(tf.transpose(scaled, [1, 0, 2]), self.slot_fields)
            pooled = tf.transpose(pooled, [1, 0, 2])
        if self.mask is not None:
            pooled = pooled * tf.cast(self.mask, pooled.dtype)
        return pooled


# ---- serving ----


def raw_signature(spec):
    """The raw serving inputs: one [None] tensor per feature, by name."""
    spec_of = {}
    for field in spec.fields:
        dtype = tf.float32 if isinstance(field, F.NumericField) else tf.string
        spec_of[field.name] = tf.TensorSpec([None], dtype, name=field.name)
    return spec_of


class RawServing(tf.Module):
    """A trained model answering raw features: `raw` (features by name -> probabilities, the
    serving_default of raw-feature models) and `indexed` (feat_ids, feat_vals [None, S])."""

    def __init__(self, model, spec, layout=None):
        super().__init__(name="raw_serving")
        self.model = model
        self.transform = FeatureTransform(spec, layout)
        slots = self.transform.layout.slot_count
        self.raw = tf.function(self._raw, input_signature=[raw_signature(spec)])
        self.indexed = tf.function(
            self._indexed,
            input_signature=[
                tf.TensorSpec([None, slots], tf.int64, name="feat_ids"),
                tf.TensorSpec([None, slots], tf.float32, name="feat_vals"),
            ],
        )

    def _raw(self, features):
        inputs = self.transform(features)
        return {"probabilities": self.model.predict(inputs["ids"], inputs["values"])}

    def _indexed(self, feat_ids, feat_vals):
        return {"probabilities": self.model.predict(feat_ids, feat_vals)}

    def save(self, path, options=None):
        tf.saved_model.save(
            self, path, signatures={"serving_default": self.raw, "indexed": self.indexed}, options=options
        )
        return path
