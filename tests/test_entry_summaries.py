"""entrypoints/deepfm_summaries.py: the chief's TensorBoard scalars, read back with TensorFlow's own event reader
under every runtime, also one without the tensorboard package (the tf-2.21 runtime here); that they are scalars
to TensorBoard's own reader is checked end to end in test_local_operations."""

import pytest

import entry_support  # noqa: F401  puts entrypoints/ on sys.path

import deepfm_summaries as summaries

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too


def scalars(folder):
    """tag -> [(step, value)] from the event files in `folder`."""
    import tensorflow as tf

    found = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars"
                number = float(tf.make_ndarray(value.tensor))
                found.setdefault(value.tag, []).append((event.step, round(number, 6)))
    return found


def test_the_metric_values_and_the_learning_rate_become_scalars(tmp_path):
    import tensorflow as tf

    summaries.configure(str(tmp_path / "tb"))
    summaries.follow_learning_rate(tf.Variable(0.004))
    try:
        summaries.record("train", 10, loss=0.5, auc=0.7, examples_per_sec=1000.0)
        summaries.record("eval", 10, loss=0.45, auc=0.75)
        summaries.record("train", 20, loss=0.4, auc=0.8, examples_per_sec=1200.0)
    finally:
        summaries.configure("")
        summaries.follow_learning_rate(None)
    assert scalars(tmp_path / "tb") == {
        "train/loss": [(10, 0.5), (20, 0.4)],
        "train/auc": [(10, 0.7), (20, 0.8)],
        "train/examples_per_sec": [(10, 1000.0), (20, 1200.0)],
        "train/learning_rate": [(10, 0.004), (20, 0.004)],
        "eval/loss": [(10, 0.45)],
        "eval/auc": [(10, 0.75)],
    }


def test_no_folder_no_writer(tmp_path):
    summaries.configure("")
    summaries.record("train", 10, loss=0.5, auc=0.7)
    assert summaries._state["writer"] is None and not list(tmp_path.iterdir())
