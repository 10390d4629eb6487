"""The parameter-server run: the chief drives deepfm_loop's loop with ParameterServerStrategy and a
ClusterCoordinator, the embedding tables partitioned across the ps tasks, the steps running on the
workers (`CoordinatorSteps`); it has the workers evaluate on `eval` (deepfm_ps_eval).

Under the strategy the dataset function is traced on the chief and runs on each worker: it reads the
worker's own host files through paths relative to the worker's working directory (its
SAGEMAKER_BASE_DIR) and its shard from a small file the worker writes there before serving (deepfm_worker_shard).
"""

import time

from deepfm_baseline import BaselineLocalSteps
from deepfm_checkpoint import CheckpointKeeper, checkpoint_dir, shared_by_every_host
from deepfm_data_errors import is_bad_row, stop_on_input_error
from deepfm_features import BAD_ROWS_KEY
from deepfm_log import error_line, log
from deepfm_local_steps import LocalSteps, take
from deepfm_loop import Distribution
from deepfm_ps_eval import WorkerEvaluation, workers_evaluate
from deepfm_tuning import configure_tensorflow
from deepfm_worker_watch import watch_workers
from deepfm_worker_input import ALONE, eval_dataset, training_input
from deepfm_worker_shard import NUM_SHARDS, SHARD_INDEX, TASK, read_worker_shard_file
from ps_gpu_workers import in_worker_replicas_problem

# What ClusterCoordinator logs at ERROR about failed closures, with the whole gRPC detail over dozens of
# lines: errors that join() raises next (the caller reports them once: a line of its own, or the
# traceback), errors it says it ignores, and errors naming a ps (retried while transient; when not,
# join() raises them and the chief names the ps in one line).
REPORTED_ELSEWHERE = (
    "encountered the following error when processing closure",
    "Start cancelling closures due to error",
    "derived error is ignored",
    "/job:ps/",
)


class _ReportedElsewhere:
    def filter(self, record):
        message = record.getMessage()
        return not any(text in message for text in REPORTED_ELSEWHERE)


def report_closure_errors_once():
    import logging

    logging.getLogger("tensorflow").addFilter(_ReportedElsewhere())


# TensorFlow's EagerClusterFunctionLibraryRuntime::Run (2.14 and current sources alike) keeps a pointer into its
# vector of instantiated remote functions after dropping the lock; an Instantiate on another thread that
# grows the vector frees it, and the request is sent with a destroyed device string: the task rejects the
# malformed request ("Unable to parse request", INTERNAL) before running anything. The loop below no longer
# instantiates functions while closures run; a rejected closure that still happens is scheduled again.
REJECTED_REQUEST = "Unable to parse request"
MAX_REJECTED = 3


def join_or_exit(coordinator, rejected=None, on_bad_data=None):
    """coordinator.join(); a bad row met under bad_rows: fail ends the run with its one line, exit 1; other bad
    input (a corrupt record, another field size) goes to on_bad_data(err), which names the file. A closure
    whose request TensorFlow malformed (REJECTED_REQUEST) is counted in `rejected` (a list) and the join
    returns: the caller goes on from optimizer.iterations, scheduling what did not run again; the
    (MAX_REJECTED + 1)th is raised."""
    import tensorflow as tf

    try:
        coordinator.join()
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as err:
        if on_bad_data is not None and not is_bad_row(err):
            on_bad_data(err)
        log(f"error: {error_line(err.message)}")
        raise SystemExit(1) from None
    except tf.errors.InternalError as err:
        if rejected is None or REJECTED_REQUEST not in err.message or len(rejected) >= MAX_REJECTED:
            raise
        rejected.append(err.message)
        log(
            f"a closure's request was rejected by its task ({REJECTED_REQUEST}, a TensorFlow race); "
            f"scheduling again ({len(rejected)}/{MAX_REJECTED})"
        )


def embedding_partitioner(hp, num_ps):
    """Split only the two embedding tables (rows = feature_size) across the ps tasks."""
    import tensorflow as tf

    by_size = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=num_ps)

    def partition(shape, dtype):
        if shape.rank and shape[0] == hp.feature_size:
            return by_size(shape, dtype)
        return [1] * max(shape.rank, 1)

    return partition


def closure_sizes(todo, steps_per_closure, num_workers, local_steps=1):
    """`todo` steps as closures of at most steps_per_closure steps: an even share for each worker (a window ends
    at each log, checkpoint and evaluation step, and waits for its last closure), each share in closures of whole
    groups of local_steps, so it takes as few exchanges with the ps as it can. 50 steps at 16 on 2 workers with 8
    local steps are 16, 16, 9 and 9, not 16, 16, 16 and 2, which one worker would run 32 steps of while the other
    ran 18."""
    most = steps_per_closure // local_steps * local_steps or steps_per_closure
    sizes = []
    for worker in range(num_workers):
        share = todo // num_workers + (worker < todo % num_workers)
        sizes += [most] * (share // most) + ([share % most] if share % most else [])
    return sorted(sizes, reverse=True)


class WorkerAnswers:
    """What the chief learns from its workers' closures, kept in variables on a ps that the closures
    write: which workers' data is used up this epoch, and the bad rows each skipped (raw features)."""

    def __init__(self, strategy, num_workers):
        import tensorflow as tf

        with strategy.scope():
            self.done = tf.Variable(tf.zeros([num_workers], tf.int64), trainable=False, name="dfm_workers_done")
            self.bad = tf.Variable(tf.zeros([num_workers], tf.int64), trainable=False, name="dfm_bad_rows")

    def mark_done(self, task):  # in a closure
        import tensorflow as tf

        self.done.scatter_update(tf.IndexedSlices(tf.ones([1], tf.int64), tf.reshape(task, [1])))

    def add_bad_rows(self, task, count):  # in a closure
        import tensorflow as tf

        self.bad.scatter_add(tf.IndexedSlices(tf.reshape(tf.cast(count, tf.int64), [1]), tf.reshape(task, [1])))

    def new_epoch(self):
        import tensorflow as tf

        self.done.assign(tf.zeros_like(self.done))

    def all_done(self):
        return bool(self.done.numpy().all())

    def bad_rows(self):
        return [int(count) for count in self.bad.numpy()]


def train_with_coordinator(hp, env, cluster):
    """The chief's run: deepfm_loop's, its steps scheduled on the workers (CoordinatorSteps)."""
    compute_dtype = configure_tensorflow(hp, env)  # the dtype of the steps it traces for the workers
    import tensorflow as tf
    from deepfm_loop import TrainingLoop
    from deepfm_training import build_trainer
    from deepfm_variables import flat_variables

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=embedding_partitioner(hp, len(cluster["ps"]))
    )
    problem = in_worker_replicas_problem(strategy.num_replicas_in_sync)
    if problem:
        log(f"error: {problem}")
        raise SystemExit(1)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    watch = watch_workers(cluster)  # a dead worker ends the run instead of ClusterCoordinator's wait for it
    report_closure_errors_once()
    trainer = build_trainer(hp, strategy=strategy, compute_dtype=compute_dtype)
    shards = flat_variables([trainer.model.embeddings])
    log(
        f"chief: {len(cluster['worker'])} workers, {len(cluster['ps'])} ps, "
        f"replicas_in_sync={strategy.num_replicas_in_sync} per worker task; embeddings in {len(shards)} shard(s) "
        f"on {' '.join(shard.device for shard in shards)}"
        + (f"; each worker trains {hp.local_steps} local steps between exchanges" if hp.local_steps > 1 else "")
    )
    directory = checkpoint_dir(hp, env)
    keeper = CheckpointKeeper(
        trainer,
        directory,
        hp.checkpoint_steps,
        io_device="/job:chief/replica:0/task:0/device:CPU:0",
        tasks_write=shared_by_every_host(directory, env),
    )
    log(
        f"checkpoints in {directory}, written by "
        + ("each task (a directory every host mounts)" if keeper.tasks_write else "the chief")
    )
    steps = CoordinatorSteps(hp, env, strategy, coordinator, trainer, len(cluster["worker"]))
    TrainingLoop(hp, env, trainer, steps, keeper).run()
    watch.stop()
    return 0


class CoordinatorSteps(Distribution):
    """The steps of a parameter-server run: a window's steps scheduled on the workers as closures of up to
    steps_per_closure steps each (closure_sizes), each worker reading its own shard; its data ends when every
    worker has used up its pass (WorkerAnswers). Evaluation runs on the workers (deepfm_ps_eval), else on the
    chief alone."""

    epoch_end_words = "training data exhausted on every worker: "

    def __init__(self, hp, env, strategy, coordinator, trainer, num_workers):
        import tensorflow as tf
        import deepfm_input

        self.hp, self.env, self.coordinator, self.trainer = hp, env, coordinator, trainer
        self.workers = num_workers
        self.channels, mode = training_input(hp, env, ALONE)[:2]  # each worker's shard comes from its SHARD_FILE
        self.cfg = deepfm_input.config_from_hparams(hp, mode, "input/data", env.config_dir, "pipe_state")
        self.answers = answers = WorkerAnswers(strategy, num_workers)
        self.rejected = []
        self.eval_step = tf.function(trainer.eval_step)
        raw = hp.features != ""

        @tf.function
        def worker_steps(it, count):
            # Up to `count` steps in one closure: one chief round trip for all of them. A worker whose data is
            # used up marks itself done and stops, instead of raising OutOfRangeError, which would cancel the
            # closures of workers that still have data. The closure returns nothing: a result would be copied
            # to the chief after every closure (a round trip, and a remote function instantiated per worker
            # while the others' closures run, which races inside TensorFlow: REJECTED_REQUEST).
            # The train metrics (variables on a ps) get the closure's counts once, not one update per step.
            task = read_worker_shard_file()[TASK]
            counts = trainer.train_metrics.zero_counts()
            for _ in tf.range(count):
                batch = it.get_next_as_optional()
                if not batch.has_value():
                    answers.mark_done(task)
                    break
                value = batch.get_value()
                step = strategy.run(trainer.train_step_counts, args=(value,))
                counts = tuple(total + new for total, new in zip(counts, step))
                if raw:
                    answers.add_bad_rows(task, value[0][BAD_ROWS_KEY])
            trainer.train_metrics.add(counts)

        local = LocalSteps(trainer) if hp.local_steps > 1 else None
        baseline = (
            BaselineLocalSteps(trainer.baseline, trainer.model.checked_ids)
            if local is not None and trainer.baseline is not None
            else None
        )

        @tf.function
        def worker_local_steps(it, count):
            # worker_steps in groups of local_steps batches, each trained on the worker's own copy of the weights
            # it uses and added back to the ps tasks once (deepfm_local_steps)
            task = read_worker_shard_file()[TASK]
            counts = trainer.train_metrics.zero_counts()
            bad = tf.constant(0, tf.int64)
            done = tf.constant(0, tf.int64)
            while done < count:
                ids, values, labels, sizes, group_bad, ended = take(it, tf.minimum(count - done, hp.local_steps), raw)
                if tf.size(sizes) > 0:
                    group = strategy.run(local.run, args=(ids.concat(), values.concat(), labels.concat(), sizes))
                    if baseline is not None:
                        strategy.run(baseline.run, args=(ids.concat(), values.concat(), labels.concat(), sizes))
                    counts = tuple(total + new for total, new in zip(counts, group))
                bad += group_bad
                done += tf.cast(tf.size(sizes), tf.int64)
                if ended:
                    answers.mark_done(task)
                    break
            trainer.train_metrics.add(counts)
            if raw:
                answers.add_bad_rows(task, bad)

        self.worker_steps = worker_local_steps if local is not None else worker_steps
        has_eval = deepfm_input.EVAL_CHANNEL in env.channels
        self.spread = (
            WorkerEvaluation(
                hp, env, strategy, coordinator, trainer, num_workers, join=self.join, rejected=self.rejected
            )
            if has_eval and workers_evaluate(env)
            else None
        )

    def join(self):
        join_or_exit(
            self.coordinator, self.rejected, lambda err: stop_on_input_error(err, self.hp, self.env, self.channels)
        )

    def epoch_input(self, epoch, skip_steps):
        cfg, channels, skip = self.cfg, self.channels, skip_steps // self.workers  # each worker skips its share

        def dataset_fn():  # one pass over each worker's data
            import deepfm_input

            shard = read_worker_shard_file()
            return deepfm_input.make_dataset(
                cfg, channels, shard[NUM_SHARDS], shard[SHARD_INDEX], training=True, epochs=1, skip_batches=skip
            )

        iterator = iter(self.coordinator.create_per_worker_dataset(dataset_fn))
        self.answers.new_epoch()
        return iterator

    def run_steps(self, epoch_input, step, todo):
        import tensorflow as tf

        for count in closure_sizes(todo, self.hp.steps_per_closure, self.workers, self.hp.local_steps):
            self.coordinator.schedule(self.worker_steps, args=(epoch_input, tf.constant(count, tf.int64)))
        self.join()
        trained = int(self.trainer.optimizer.iterations.numpy()) - step
        return trained, trained < todo and self.answers.all_done()  # else a rejected closure: scheduled again

    def evaluate(self, step):  # on the workers, else the chief alone
        from deepfm_metrics import evaluate

        started = time.monotonic()
        if self.spread is not None and self.spread.ready():
            loss, auc, rows = self.spread.run(step)
            log(f"evaluated {rows} rows on {len(self.spread.holders)} worker(s) in {time.monotonic() - started:.2f} s")
        else:
            loss, auc = evaluate(self.trainer, eval_dataset(self.hp, self.env, ALONE), step, step_fn=self.eval_step)
            log(f"evaluated on the chief in {time.monotonic() - started:.2f} s")
        return loss, auc

    def bad_rows(self):
        return [(f"worker {task}", count) for task, count in enumerate(self.answers.bad_rows())]

    def training_channels(self):
        return self.channels

    def untrained(self):
        return "every worker", "each worker's share of it was empty"
