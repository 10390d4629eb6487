"""A synchronous run's steps (deepfm_sync.SyncSteps) over several epochs, in-process: each epoch's iterator stepped
from its own first batch, and the window loop traced once for the whole run."""

from types import SimpleNamespace

import pytest

import entry_support as es  # noqa: F401  puts entrypoints/ on sys.path
import deepfm_hparams
from deepfm_collectives import SingleProcess
from deepfm_sync import SyncSteps


@pytest.mark.runtimes  # whether an epoch's new iterator retraces the loop depends on TensorFlow's version
def test_every_epoch_runs_on_its_own_iterator_through_one_traced_window_loop():
    import tensorflow as tf

    epochs = [[1.0, 2.0, 3.0], [10.0, 20.0]]
    stepped = tf.Variable(0.0)
    traces = []

    def step(batch):
        traces.append(1)  # Python runs this only while tracing
        stepped.assign_add(tf.reduce_sum(batch[0]))

    def train_input(skip_steps, epoch):
        values = tf.data.Dataset.from_tensor_slices(epochs[epoch][skip_steps:])
        return values.map(lambda v: (tf.reshape(v, [1]), tf.reshape(v, [1])))

    hp = deepfm_hparams.parse_hyperparameters(["--export", "false"])
    where = SimpleNamespace(rank=0, size=1)
    steps = SyncSteps(hp, None, None, SingleProcess(), where, step, train_input, eval_step_fn=lambda batch: None)
    windows = []
    for epoch in range(len(epochs)):
        batches = steps.epoch_input(epoch, 0)
        windows += [steps.run_steps(batches, 0, 2), steps.run_steps(batches, 2, 5)]
        # the first window of the next epoch must not start from this one's look-ahead (its data's end)
    assert windows == [(2, False), (1, True), (2, False), (0, True)]
    assert stepped.numpy() == 36.0
    assert len(traces) == 1
