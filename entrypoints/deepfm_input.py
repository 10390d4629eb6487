"""Input pipeline of the DeepFM entry points: channel choice, the shard table, tf.data datasets.

Files are listed and sharded inside the graph (tf.io.matching_files, dataset.shard with tensor
arguments), not in Python: under ParameterServerStrategy the dataset function is traced once on the
chief and runs on every worker, and each worker must read the files of ITS host. Paths may therefore
be relative: a worker process runs with its SAGEMAKER_BASE_DIR as working directory.
"""

import re
from dataclasses import dataclass

import tensorflow as tf
from deepfm_shards import shard_for  # noqa: F401  (the shard table; di.shard_for for the pipeline's callers)

EVAL_CHANNEL = "eval"
_TRAIN_INDEX = re.compile(r"^train(?:-(\d+))?$")


def train_channel_index(name):
    """`train` -> 0, `train-3` -> 3, anything else -> None."""
    match = _TRAIN_INDEX.match(name)
    if not match:
        return None
    return int(match.group(1) or 0)


def is_multi_path(channels):
    return any((train_channel_index(c) or 0) > 0 for c in channels)


def training_channels(channels, workers_per_host, local_rank):
    """The training channels local worker `local_rank` reads, chosen by name: index i % workers == rank.

    With one path (`train` only) every local worker reads `train` and the shard table splits it."""
    indexed = sorted((train_channel_index(c), c) for c in channels if train_channel_index(c) is not None)
    if not indexed:
        raise ValueError(f"no training channel (train, train-1, ...) among {sorted(channels)}")
    if not is_multi_path(channels):
        return [indexed[0][1]]
    mine = [name for index, name in indexed if index % workers_per_host == local_rank]
    if not mine:
        raise ValueError(
            f"local worker {local_rank} of {workers_per_host} has no channel among "
            f"{[name for _, name in indexed]}: give at least one channel per worker"
        )
    return mine


@dataclass(frozen=True)
class InputConfig:
    """How to read records; shared by every dataset of a run."""

    field_size: int
    batch_size: int
    data_format: str = "tfrecord"  # tfrecord | libsvm
    shuffle_buffer: int = 10000
    prefetch: int = 2  # -1 = AUTOTUNE
    cache: bool = False
    input_mode: str = "File"  # File | FastFile | Pipe
    data_dir: str = "/opt/ml/input/data"  # channel dirs (File) or FIFOs `<channel>_<n>` (Pipe)
    config_dir: str = "/opt/ml/input/config"  # inputdataconfig.json, read when the dataset is built
    pipe_state_dir: str = "/opt/ml/pipe_state"
    feature_spec: object = None  # deepfm_features.FeatureSpec: raw records, parsed and hashed in the graph
    data_threads: int = 0  # tf.data's private thread pool; 0: TensorFlow's shared pool (all vCPUs)

    @property
    def text_records(self):
        if self.feature_spec is not None:
            return self.feature_spec.format != "tfrecord"
        return self.data_format == "libsvm"


def config_from_hparams(hp, input_mode, data_dir, config_dir, pipe_state_dir):
    """InputConfig from parsed hyperparameters."""
    return InputConfig(
        field_size=hp.field_size,
        batch_size=hp.batch_size,
        data_format=hp.data_format,
        shuffle_buffer=hp.shuffle_buffer,
        prefetch=hp.prefetch,
        cache=hp.cache,
        input_mode=input_mode,
        data_dir=data_dir,
        config_dir=config_dir,
        pipe_state_dir=pipe_state_dir,
        feature_spec=getattr(hp, "feature_spec", None),
        data_threads=getattr(hp, "data_threads", 0),
    )


def list_files(channel_dirs):
    """Sorted data files directly under the channel dirs, in-graph; hidden and `_` files left out."""
    found = [tf.io.matching_files(tf.strings.join([d, "/*"])) for d in channel_dirs]
    files = tf.concat(found, axis=0) if len(found) > 1 else found[0]
    base = tf.strings.regex_replace(files, r"^.*/", "")
    keep = tf.logical_not(tf.strings.regex_full_match(base, r"[._].*"))
    return tf.boolean_mask(files, keep)


def _file_records(files, cfg, num_shards, index):
    """Shard the sorted file list when there are at least num_shards files, else the records.

    Which level shards is a tensor (under PS the file list is only known on the worker), so both levels
    use the native Dataset.shard, the one not sharding with a pass-through (1, 0): a per-record filter
    function here cost a 5x slower pipeline.
    """
    num_shards = tf.cast(num_shards, tf.int64)
    index = tf.cast(index, tf.int64)
    by_file = tf.size(files, out_type=tf.int64) >= num_shards
    one, zero = tf.constant(1, tf.int64), tf.constant(0, tf.int64)
    names = tf.data.Dataset.from_tensor_slices(files)
    names = names.shard(tf.where(by_file, num_shards, one), tf.where(by_file, index, zero))
    reader = tf.data.TextLineDataset if cfg.text_records else tf.data.TFRecordDataset
    records = names.flat_map(reader)
    return records.shard(tf.where(by_file, one, num_shards), tf.where(by_file, zero, index))


def _pipe_records(channels, cfg, num_shards, index):
    from sagemaker_tensorflow import PipeModeDataset  # only in Pipe mode: the op library is heavy

    record_format = "TextLine" if cfg.text_records else "TFRecord"
    streams = [
        PipeModeDataset(
            channel,
            record_format=record_format,
            pipe_dir=cfg.data_dir,
            state_dir=cfg.pipe_state_dir,
            config_dir=cfg.config_dir,
        )
        for channel in channels
    ]
    records = streams[0]
    for more in streams[1:]:
        records = records.concatenate(more)
    if not (isinstance(num_shards, int) and num_shards == 1):
        records = records.shard(tf.cast(num_shards, tf.int64), tf.cast(index, tf.int64))
    return records


# The start of an assertion's text about a record the parser refuses: the run then locates it by file and record
# (deepfm_data_errors), reading the files again one record at a time.
BAD_RECORD = "bad record: "


def is_label(labels):
    """Per row, whether its label is 0 or 1 (a click or not: anything else is a bad row)."""
    return tf.logical_or(tf.equal(labels, 0.0), tf.equal(labels, 1.0))


def checked_rows(labels, values):
    """labels, once every row's label is 0 or 1 and its values are finite; else an assertion naming what is wrong
    with the batch's first bad row (built only then: a good batch pays for the comparisons)."""
    label_ok = is_label(labels)
    finite = tf.math.is_finite(values)
    good = tf.logical_and(label_ok, tf.reduce_all(finite, axis=1))

    def refuse():
        first = tf.argmin(tf.cast(good, tf.int32))
        # the first value that is not finite (a row of none: past the end, where a NaN stands in)
        slot = tf.argmin(tf.concat([tf.cast(finite[first], tf.int32), [0]], 0))
        value = tf.gather(tf.concat([values[first], [float("nan")]], 0), slot)
        problem = tf.where(
            label_ok[first],
            tf.strings.join(
                [
                    "value ",
                    tf.strings.as_string(value),
                    " in field slot ",
                    tf.strings.as_string(slot),
                    " is not a finite number",
                ]
            ),
            tf.strings.join(["label ", tf.strings.as_string(labels[first], shortest=True), " is not 0 or 1"]),
        )
        with tf.control_dependencies(
            [tf.debugging.Assert(tf.constant(False), [tf.strings.join([BAD_RECORD, problem])])]
        ):
            return tf.constant(False)

    check = tf.cond(tf.reduce_all(good), lambda: tf.constant(True), refuse)
    with tf.control_dependencies([check]):
        return tf.identity(labels)


def parse_tfrecord_batch(serialized, field_size):
    features = tf.io.parse_example(
        serialized,
        {
            "label": tf.io.FixedLenFeature([], tf.float32),
            "ids": tf.io.FixedLenFeature([field_size], tf.int64),
            "values": tf.io.FixedLenFeature([field_size], tf.float32),
        },
    )
    labels = checked_rows(features["label"], features["values"])
    return {"ids": features["ids"], "values": features["values"]}, labels


def parse_libsvm_batch(lines, field_size):
    """`label id:value id:value ...` with exactly field_size pairs per line."""
    # A row without exactly field_size pairs fails the reshape (the converter reports such rows).
    tokens = tf.reshape(tf.strings.split(tf.strings.strip(lines)).flat_values, [-1, field_size + 1])
    labels = tf.strings.to_number(tokens[:, 0], tf.float32)
    pairs = tf.reshape(tf.strings.split(tf.reshape(tokens[:, 1:], [-1]), ":").flat_values, [-1, 2])
    ids = tf.strings.to_number(pairs[:, 0], tf.int64)
    values = tf.reshape(tf.strings.to_number(pairs[:, 1], tf.float32), [-1, field_size])
    return ({"ids": tf.reshape(ids, [-1, field_size]), "values": values}, checked_rows(labels, values))


def batch_parser(cfg):
    """records[B] -> ({"ids", "values"} (+ the bad-row count with raw features), labels). The raw
    features' transform is created here, inside the dataset function (under PS: on each worker)."""
    if cfg.feature_spec is not None:
        import deepfm_raw

        return deepfm_raw.batch_parser(cfg.feature_spec, deepfm_raw.FeatureTransform(cfg.feature_spec))
    parse = parse_libsvm_batch if cfg.data_format == "libsvm" else parse_tfrecord_batch
    return lambda raw: parse(raw, cfg.field_size)


def make_dataset(
    cfg, channels, num_shards=1, index=0, training=True, epochs=1, skip_batches=0, drop_remainder=False, seed=None
):
    """Batches of ({"ids", "values"}, label) for the given channels (by name) of one worker.

    Order: records -> shard -> (cache) -> shuffle -> batch -> parse on the batch -> repeat -> skip
    (resume) -> prefetch. num_shards/index may be tensors (a PS worker reads them from its host).
    epochs <= 0 repeats forever. Pipe mode repeats by opening one new FIFO per epoch (`train_0`,
    `train_1`, ...): Dataset.repeat would open one FIFO more than there are epochs and wait on it.
    """
    pipe = cfg.input_mode.lower() == "pipe"

    def one_pass():
        if pipe:
            records = _pipe_records(channels, cfg, num_shards, index)
        else:
            files = list_files([f"{cfg.data_dir}/{channel}" for channel in channels])
            records = _file_records(files, cfg, num_shards, index)
            if cfg.cache:
                records = records.cache()
        if training and cfg.shuffle_buffer > 1:
            records = records.shuffle(cfg.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        batches = records.batch(cfg.batch_size, drop_remainder=drop_remainder)
        return batches.map(batch_parser(cfg), num_parallel_calls=tf.data.AUTOTUNE)

    if training and pipe:
        passes = tf.data.Dataset.range(epochs) if epochs > 0 else tf.data.Dataset.counter()
        batches = passes.flat_map(lambda _: one_pass())
    elif training:
        batches = one_pass().repeat(epochs if epochs > 0 else None)
    else:
        batches = one_pass()
    if skip_batches:
        batches = batches.skip(skip_batches)
    batches = batches.prefetch(tf.data.AUTOTUNE if cfg.prefetch < 0 else cfg.prefetch)
    if cfg.data_threads > 0:
        options = tf.data.Options()
        options.threading.private_threadpool_size = cfg.data_threads
        batches = batches.with_options(options)
    return batches
