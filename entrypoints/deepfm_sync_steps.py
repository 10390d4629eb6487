"""Synchronous steps without a host round trip each: the end-of-data check runs inside the traced step.

Every step a worker takes its next batch if it has one, the workers agree in-graph (a one-number
collective) whether all have one, and the step trains only if they do.
A window of such steps (`sync_check_steps`, or fewer up to the next log, checkpoint, evaluation or
max_steps boundary: deepfm_loop chooses it) runs as one traced loop, and the host waits once per window for
its count instead of on the check before each step. The loop stops at the first step some worker has no batch for, on
every
worker alike, so no worker waits on another and every worker counts the same steps.
"""

from deepfm_features import BAD_ROWS_KEY


def guarded_steps(step_fn, collectives):
    """-> run(iterator, todo) -> (steps trained, bad rows their batches skipped): up to `todo` steps, each
    taken only when every worker has a batch, stopping at the first that is not.

    The check is the condition of a traced while loop, with the batch fetched one step ahead, so no
    conditional wraps the step: MultiWorkerMirrored's strategy.run cannot be traced inside one across
    workers (TF 2.14: "You must feed a value for placeholder"). The look-ahead batch and its check are
    carried from one window to the next of the same iterator. One runner serves every epoch's iterator: the
    loop is traced once, not again for each epoch."""
    import tensorflow as tf

    @tf.function
    def fetch(iterator):
        batch, have = take(iterator)
        return batch, collectives.all_have_tensor(have)

    @tf.function
    def steps(iterator, batch, have, todo):
        def body(done, batch, have, bad_rows):
            value = value_of(batch)
            step_fn(value)
            bad_rows += bad_rows_in(value)
            batch, have = fetch(iterator)
            return done + 1, batch, have, bad_rows

        start = (tf.constant(0, tf.int64), batch, have, tf.constant(0, tf.int64))
        return tf.while_loop(lambda done, _, have, __: tf.logical_and(done < todo, have), body, start)

    ahead = None  # (iterator, its next batch, its check): fetched by that iterator's last window

    def run(iterator, todo):
        nonlocal ahead
        batch, have = ahead[1:] if ahead is not None and ahead[0] is iterator else fetch(iterator)
        trained, batch, have, bad_rows = steps(iterator, batch, have, tf.constant(todo, tf.int64))
        ahead = (iterator, batch, have)
        return int(trained.numpy()), int(bad_rows.numpy())

    return run


def take(iterator):
    """-> (batch, whether this worker has one for this step). A plain iterator's batch is an optional; a
    distributed one (MultiWorkerMirrored's per-replica input, train_mirrored.per_replica) never ends: its
    elements pair each replica's batch with a flag, false once its pipeline has run out, and the step is
    this worker's only when every local replica's is real (get_next keeps each replica's batch on its
    device, where an optional's value would be read on one)."""
    import tensorflow as tf

    if isinstance(iterator, tf.distribute.DistributedIterator):
        batch, real = iterator.get_next()
        return batch, tf.reduce_all(tf.stack(tf.nest.flatten(real, expand_composites=True)))
    batch = iterator.get_next_as_optional()
    return batch, batch.has_value()


def value_of(batch):
    """The step's batch from what take() returned."""
    import tensorflow as tf

    return batch.get_value() if isinstance(batch, tf.experimental.Optional) else batch


def bad_rows_in(value):
    """-> int64 tensor: the bad rows a step's batch skipped (raw input's per-batch count; 0 without it),
    summed over the local replicas' batches when the value is per replica."""
    import tensorflow as tf

    count = value[0].get(BAD_ROWS_KEY) if isinstance(value[0], dict) else None
    if count is None:
        return tf.constant(0, tf.int64)
    return tf.add_n([tf.cast(c, tf.int64) for c in tf.nest.flatten(count, expand_composites=True)])


def host_checked_steps(step_fn, collectives):
    """-> fn(iterator, todo) -> (steps trained, bad rows): the same steps with the check on the host
    before each one (a round trip per step): the loop before the in-graph check, kept as the benchmark's
    baseline (bench/sync_steps.py)."""

    def steps(iterator, todo):
        trained = bad_rows = 0
        for _ in range(todo):
            batch, have = take(iterator)
            if not collectives.all_have(bool(have)):
                break
            value = value_of(batch)
            bad_rows += int(bad_rows_in(value))
            step_fn(value)
            trained += 1
        return trained, bad_rows

    return steps


def window_runner(step_fn, collectives):
    """-> fn(iterator, todo) -> (steps trained, bad rows) as plain ints, the checks in-graph."""
    return guarded_steps(step_fn, collectives)
