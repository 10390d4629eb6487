"""Evaluation on the parameter-server workers (`WorkerEvaluation`), for deepfm_coordinator's loop.

The chief evaluating the whole `eval` channel itself stalled training: every worker waited while one
process (on a host it shares with a worker) read all of it. Here each worker evaluates its share; the
coordinator's `join` (which counts rejected requests in `rejected`) comes in as an argument; the worker's share
is in its shard file (deepfm_worker_shard).
"""

import os

from deepfm_log import log
from deepfm_worker_shard import EVAL_INDEX, EVAL_SHARDS, HAS_EVAL, TASK, read_worker_shard_file

EVAL_ON_ENV = "DFM_PS_EVAL"  # workers (default): the workers evaluate; chief: the chief alone, as before


def workers_evaluate(env):
    """Whether the workers evaluate (WorkerEvaluation): not with `eval` in Pipe mode (one FIFO, read once by
    the chief after training) nor with DFM_PS_EVAL=chief."""
    import deepfm_input

    return (
        env.input_mode(deepfm_input.EVAL_CHANNEL).lower() != "pipe"
        and os.environ.get(EVAL_ON_ENV, "workers").lower() != "chief"
    )


class WorkerEvaluation:
    """Evaluation spread over the workers (TensorFlow's inline distributed evaluation) instead of the
    chief evaluating the whole channel while every worker waits: each worker runs the eval step over its
    share of `eval`, read on the worker like its training shard, into the eval metrics (variables on a ps);
    the chief reads their sum after the join. Training waits as before, so the eval line's step, model
    selection and the export stay exact, for 1/N of the time. A replicated `eval` is split among the
    workers whose hosts hold it, an S3-sharded one is each host's objects split among its workers: every
    row counted once. Closures return nothing (deepfm_coordinator.REJECTED_REQUEST); each marks its task in
    `answered`, and the chief schedules rounds until every worker has answered (the coordinator picks the
    worker: one closure each is likely, not certain)."""

    def __init__(self, hp, env, strategy, coordinator, trainer, num_workers, join, rejected):
        import tensorflow as tf
        import deepfm_input
        from deepfm_container import resolve_s3_shard

        self.hp, self.coordinator, self.trainer, self.num_workers = hp, coordinator, trainer, num_workers
        self.join, self.rejected = join, rejected
        self.s3_sharded = resolve_s3_shard(hp, env, [deepfm_input.EVAL_CHANNEL])
        self.cfg = deepfm_input.config_from_hparams(
            hp, env.input_mode(deepfm_input.EVAL_CHANNEL), "input/data", env.config_dir, "pipe_state"
        )
        with strategy.scope():
            self.answered = tf.Variable(tf.zeros([num_workers], tf.int64), trainable=False, name="dfm_eval_answered")
        self.holders, self.dataset, self.iterator = None, None, None

        @tf.function
        def probe():  # answers 1 + whether the worker's host holds `eval`
            fields = read_worker_shard_file()
            self._answer(fields[TASK], 1 + fields[HAS_EVAL])

        @tf.function
        def evaluate_share(iterator):
            task = read_worker_shard_file()[TASK]
            for _ in tf.range(tf.constant(1 << 62, tf.int64)):  # until the share is used up
                batch = iterator.get_next_as_optional()
                if not batch.has_value():
                    break
                strategy.run(trainer.eval_step, args=(batch.get_value(),))
            self._answer(task, 1)

        self.probe, self.evaluate_share = probe, evaluate_share

    def _answer(self, task, value):  # in a closure
        import tensorflow as tf

        value = tf.reshape(tf.cast(value, tf.int64), [1])
        self.answered.scatter_update(tf.IndexedSlices(value, tf.reshape(task, [1])))

    def _on_every_worker(self, function, args=()):
        """Schedule `function` until every worker has run it once. -> False when a closure's request was
        rejected (REJECTED_REQUEST): the caller starts again."""
        import tensorflow as tf

        self.answered.assign(tf.zeros_like(self.answered))
        while True:
            for _ in range(self.num_workers - int(tf.math.count_nonzero(self.answered))):
                self.coordinator.schedule(function, args=args)
            before = len(self.rejected)
            self.join()
            if len(self.rejected) > before:
                self.join()  # the closures still running end first
                return False
            if self.answered.numpy().all():
                return True

    def ready(self):
        """Ask the workers once which hold `eval`, then build their eval datasets. -> False: none does."""
        if self.holders is None:
            while not self._on_every_worker(self.probe):
                pass
            self.holders = [task for task, answer in enumerate(self.answered.numpy()) if answer == 2]
            if self.holders:
                self.dataset = self.coordinator.create_per_worker_dataset(self._dataset_fn())
                log(
                    f"evaluation on the workers: task(s) {' '.join(map(str, self.holders))} of {self.num_workers} "
                    f"hold `eval` ({'S3-sharded: each its host' if self.s3_sharded else 'split among them'})"
                )
        return bool(self.holders)

    def _dataset_fn(self):
        import math
        import tensorflow as tf
        import deepfm_input

        share = {task: rank for rank, task in enumerate(self.holders)}
        counts = [len(self.holders) if task in share else 1 for task in range(self.num_workers)]
        indices = [share.get(task, 0) for task in range(self.num_workers)]
        batches = math.ceil(self.hp.eval_batches / len(self.holders)) if self.hp.eval_batches else -1
        limits = [batches if task in share else 0 for task in range(self.num_workers)]
        cfg, s3_sharded = self.cfg, self.s3_sharded

        def dataset_fn():  # traced on the chief, run on each worker
            fields = read_worker_shard_file()
            task = fields[TASK]
            if s3_sharded:  # the worker's own share of its host's objects
                shards = fields[EVAL_SHARDS], fields[EVAL_INDEX]
            else:
                shards = tf.gather(tf.constant(counts, tf.int64), task), tf.gather(tf.constant(indices, tf.int64), task)
            dataset = deepfm_input.make_dataset(cfg, [deepfm_input.EVAL_CHANNEL], *shards, training=False)
            return dataset.take(tf.gather(tf.constant(limits, tf.int64), task))

        return dataset_fn

    def run(self, step):
        """One evaluation of the current model on the workers; the chief prints the eval line.
        -> (loss, auc, rows)."""
        from deepfm_metrics import report_evaluation, reset_evaluation

        while True:
            reset_evaluation(self.trainer)
            # kept until the next evaluation and released here, while no closure runs (not whenever the
            # last reference to the previous pass's iterators drops, perhaps during a training window)
            self.iterator = None
            self.iterator = iter(self.dataset)
            if self._on_every_worker(self.evaluate_share, (self.iterator,)):
                return report_evaluation(self.trainer.eval_metrics, step, baseline=self.trainer.baseline_metrics)
