"""A run that stops on bad input data names the file, the record (line, in text) and the reason: TensorFlow's
DataLossError says only "corrupted record at 244", a parse error only what it expected, and an error that
crossed from a parameter-server worker "2 root error(s) found". On such an error the host's channel files are
read again, one at a time, to find the first one that fails, the record where it does and why (Pipe channels
are FIFOs that cannot be read twice: they are named, not searched). A run whose skipped bad rows pass their
bound (`features.bad_rows.max_fraction`) is located the same way."""

import dataclasses
import os
import re

from deepfm_log import error_line, log

SEARCH_BATCH = 1024  # records read at a time while searching; the failing batch is read again one by one


def _channel_files(env, channels):
    for channel in channels:
        folder = os.path.join(env.data_dir, channel)
        if env.input_mode(channel).lower() == "pipe" or not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not name.startswith((".", "_")) and os.path.isfile(path):
                yield path


def record_reader(hp, env, feature_spec=None):
    """path, skip, batch -> the file's records parsed as the run parses them (with `feature_spec` instead of
    the run's, when given), `batch` at a time after the first `skip`. Has `.unit`: what a record is called."""
    import tensorflow as tf
    import deepfm_input as di

    cfg = di.config_from_hparams(hp, "File", env.data_dir, env.config_dir, env.pipe_state_dir)
    if feature_spec is not None:
        cfg = dataclasses.replace(cfg, feature_spec=feature_spec)
    parse = di.batch_parser(cfg)
    source = tf.data.TextLineDataset if cfg.text_records else tf.data.TFRecordDataset

    def read(path, skip=0, batch=1):
        return source([path]).skip(skip).batch(batch).map(parse)

    read.unit = "line" if cfg.text_records else "record"
    return read


def is_bad_row(err):
    """A bad row the model's checks met (an id past feature_size): its assertion names the row already. A
    record the parser refused (di.BAD_RECORD) is located by file and record instead."""
    import deepfm_input as di

    message = str(err.message)
    return "assertion failed:" in message and di.BAD_RECORD not in message


def _first_failure(read, path, skip, batch):
    """-> (records read whole before the failure: whole batches of `batch`, its error), or None when the file
    reads to its end."""
    import tensorflow as tf

    batches = 0
    try:
        for _ in read(path, skip, batch):
            batches += 1
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        return batches * batch, err
    return None


def locate_bad_record(env, channels, read):
    """(path, record number from 1, reason) of the first record that `read` cannot give; None when every file
    reads. Read SEARCH_BATCH records at a time, then the failing batch one record at a time."""
    for path in _channel_files(env, channels):
        failed = _first_failure(read, path, 0, SEARCH_BATCH)
        if failed is None:
            continue
        start = failed[0]
        count, err = _first_failure(read, path, start, 1) or (0, failed[1])
        return path, start + count + 1, reason(err.message)
    return None


_SIZE = re.compile(r"Key: (\w+)[.,].*?Values size: (\d+) but output shape: \[(\d+)\]", re.S)
_MISSING = re.compile(r"Feature: (\w+) \(data type: \w+\) is required but could not be found")
_CORRUPT = re.compile(r"corrupted record at (\d+)")
_TRUNCATED = re.compile(r"truncated record at (\d+)")


def reason(message):
    """What is wrong with a record, in one line, from TensorFlow's error message."""
    import deepfm_input as di

    message = str(message)
    found = _SIZE.search(message)
    if found:
        key, size, expected = found.groups()
        return f"row has {size} {key}, the spec's field_size is {expected}"
    found = _MISSING.search(message)
    if found:
        return f"the record has no `{found.group(1)}` feature (not a record of the bundled scripts' schema)"
    found = _CORRUPT.search(message)
    if found:
        return (
            f"corrupted record at byte {found.group(1)}: not a TFRecord file, or a damaged one (a length or "
            "checksum that does not match its bytes)"
        )
    found = _TRUNCATED.search(message)
    if found:
        return f"the file ends inside a record (truncated record at byte {found.group(1)}): it was cut short"
    if "Could not parse example input" in message or "Can't parse serialized Example" in message:
        return "the record is not a tf.train.Example"
    line = error_line(message)
    refused = re.fullmatch(rf"\[{di.BAD_RECORD}(.*)\]", line, re.S)  # the parser's own assertion
    return refused.group(1) if refused else line


def stop_on_bad_data(err, env, channels, read):
    """End the run on bad input (exit 1): one line naming the file, record and reason where this host can find
    it."""
    found = locate_bad_record(env, channels, read)
    if found is not None:
        path, number, why = found
        log(f"error: bad input data in {path}: {read.unit} {number}: {why}")
    else:
        place = f"a file of channel(s) {', '.join(channels)} on another host or in a Pipe channel"
        log(f"error: bad input data in {place}: {reason(err.message)}")
    raise SystemExit(1) from None


def stop_on_input_error(err, hp, env, channels):
    """End the run on an input error (exit 1): a bad row the model's checks met is its own line (its assertion
    names the row); any other names the file and record among `channels` and `eval`."""
    import deepfm_input as di

    if is_bad_row(err):
        log(f"error: {error_line(err.message)}")
        raise SystemExit(1) from None
    stop_on_bad_data(err, env, [*channels, di.EVAL_CHANNEL], record_reader(hp, env))


def stop_past_bad_row_bound(hp, env, dist, rows_trained):
    """With raw features and bad_rows: skip, end the run (exit 1) when more than max_fraction of the training rows
    read were bad. `rows_trained`: the rows the run trained on, over the workers; `dist` counts the bad rows
    (deepfm_loop's Distribution: its own workers', summed over its collectives)."""
    import numpy as np
    import tensorflow as tf

    spec = getattr(hp, "feature_spec", None)
    if spec is None or spec.bad_rows != "skip":
        return
    mine = sum(count for _, count in dist.bad_rows())
    bad = int(round(float(np.asarray(dist.collectives.sum(tf.constant([mine], tf.float64)))[0])))
    read = bad + rows_trained
    if bad and bad > spec.max_bad_fraction * read:
        stop_bad_rows_past_bound(hp, env, dist.rank, dist.training_channels(), bad, read)


def stop_bad_rows_past_bound(hp, env, rank, channels, bad, read):
    """End the run (exit 1): one line on rank 0 naming the channel, the count, the share and the first bad row
    (file and line, or record) this host's files of `channels` hold, found by reading them with bad_rows: fail."""
    if rank == 0:
        spec = hp.feature_spec
        reader = record_reader(hp, env, dataclasses.replace(spec, bad_rows="fail"))
        found = locate_bad_record(env, channels, reader)
        first = (
            f"the first: {found[0]}: {reader.unit} {found[1]}: {found[2]}"
            if found
            else "the first is in a file on another host"
        )
        log(
            f"error: too many bad rows in channel {', '.join(channels)}: {bad} of {read} rows read ({bad / read:.1%}) "
            f"were bad, more than features.bad_rows.max_fraction {spec.max_bad_fraction:g}; {first}"
        )
    raise SystemExit(1)
