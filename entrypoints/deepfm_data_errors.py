"""A run that stops on bad input data names the file: TensorFlow's DataLossError says only "corrupted record
at 244", and a parse error only what it expected. On such an error the host's channel files are read again,
one at a time, to find the first one that fails and the record where it does (Pipe channels are FIFOs that
cannot be read twice: they are named, not searched)."""

import os

from deepfm_log import error_line, log


def _channel_files(env, channels):
    for channel in channels:
        folder = os.path.join(env.data_dir, channel)
        if env.input_mode(channel).lower() == "pipe" or not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not name.startswith((".", "_")) and os.path.isfile(path):
                yield path


def record_reader(hp, env):
    """path -> the file's records read and parsed one at a time, as the run parses them."""
    import tensorflow as tf
    import deepfm_input as di

    cfg = di.config_from_hparams(hp, "File", env.data_dir, env.config_dir, env.pipe_state_dir)
    parse = di.batch_parser(cfg)
    source = tf.data.TextLineDataset if cfg.text_records else tf.data.TFRecordDataset
    return lambda path: source([path]).batch(1).map(parse)


def is_bad_row(err):
    """A bad row met under bad_rows: fail: its assertion names the row already."""
    return "assertion failed:" in str(err.message)


def locate_bad_record(env, channels, read):
    """'<file>: record N' of the first record that `read(path)` cannot give; None when every file reads."""
    import tensorflow as tf

    for path in _channel_files(env, channels):
        count = 0
        try:
            for _ in read(path):
                count += 1
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
            return f"{path}: record {count + 1}"
    return None


def stop_on_bad_data(err, env, channels, read):
    """End the run on bad input (exit 1): one line naming the file and record where this host can find it."""
    where = locate_bad_record(env, channels, read)
    place = where or f"a file of channel(s) {', '.join(channels)} on another host or in a Pipe channel"
    log(f"error: bad input data in {place}: {error_line(err.message)}")
    raise SystemExit(1) from None


def stop_on_input_error(err, hp, env, channels):
    """End the run on an input error (exit 1): a bad row met under bad_rows: fail is its own line (its assertion
    names the row); any other names the file and record among `channels` and `eval`."""
    import deepfm_input as di

    if is_bad_row(err):
        log(f"error: {error_line(err.message)}")
        raise SystemExit(1) from None
    stop_on_bad_data(err, env, [*channels, di.EVAL_CHANNEL], record_reader(hp, env))
