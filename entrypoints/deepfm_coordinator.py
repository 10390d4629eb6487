"""The parameter-server loop: the chief drives training with ParameterServerStrategy and a
ClusterCoordinator, the embedding tables partitioned across the ps tasks, the steps running on the
workers; it has the workers evaluate on `eval` (deepfm_ps_eval), checkpoints and exports.

Under the strategy the dataset function is traced on the chief and runs on each worker: it reads the
worker's own host files through paths relative to the worker's working directory (its
SAGEMAKER_BASE_DIR) and its shard from a small file the worker writes there before serving (deepfm_worker_shard).
"""

import time

from deepfm_checkpoint import CheckpointKeeper, checkpoint_dir, export_saved_model, stop_diverged, stop_untrained
from deepfm_features import BAD_ROWS_KEY
from deepfm_data_errors import is_bad_row, record_reader, stop_on_bad_data
from deepfm_log import error_line, log
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
REPORTED_ELSEWHERE = ("encountered the following error when processing closure",
                      "Start cancelling closures due to error", "derived error is ignored", "/job:ps/")


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
        log(f"a closure's request was rejected by its task ({REJECTED_REQUEST}, a TensorFlow race); "
            f"scheduling again ({len(rejected)}/{MAX_REJECTED})")


def embedding_partitioner(hp, num_ps):
    """Split only the two embedding tables (rows = feature_size) across the ps tasks."""
    import tensorflow as tf

    by_size = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10,
                                                                          max_shards=num_ps)

    def partition(shape, dtype):
        if shape.rank and shape[0] == hp.feature_size:
            return by_size(shape, dtype)
        return [1] * max(shape.rank, 1)

    return partition


def closure_sizes(todo, steps_per_closure, num_workers):
    """`todo` steps as closures of at most steps_per_closure steps, small enough that every worker gets
    one when the window is short (a window ends at each log, checkpoint and evaluation step)."""
    size = max(1, min(steps_per_closure, -(-todo // num_workers)))
    return [size] * (todo // size) + ([todo % size] if todo % size else [])


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
    """The chief's run: restore -> schedule steps on the workers -> checkpoint -> evaluate -> export."""
    compute_dtype = configure_tensorflow(hp, env)  # the dtype of the steps it traces for the workers
    import tensorflow as tf
    import deepfm_input
    from deepfm_hparams import crossed, steps_to_boundary
    from deepfm_selection import ModelSelection
    from deepfm_sync import evaluates_during_training
    from deepfm_training import TrainWindow, build_trainer, evaluate
    from deepfm_variables import flat_variables

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=embedding_partitioner(hp, len(cluster["ps"])))
    problem = in_worker_replicas_problem(strategy.num_replicas_in_sync)
    if problem:
        log(f"error: {problem}")
        raise SystemExit(1)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    watch = watch_workers(cluster)  # a dead worker ends the run instead of ClusterCoordinator's wait for it
    report_closure_errors_once()
    trainer = build_trainer(hp, strategy=strategy, compute_dtype=compute_dtype)
    shards = flat_variables([trainer.model.embeddings])
    log(f"chief: {len(cluster['worker'])} workers, {len(cluster['ps'])} ps, "
        f"replicas_in_sync={strategy.num_replicas_in_sync} per worker task; embeddings in {len(shards)} shard(s) "
        f"on {' '.join(shard.device for shard in shards)}")
    keeper = CheckpointKeeper(trainer, checkpoint_dir(hp, env), hp.checkpoint_steps,
                              io_device="/job:chief/replica:0/task:0/device:CPU:0")
    step = keeper.restore_latest()

    channels, mode = training_input(hp, env, ALONE)[:2]  # each worker's shard comes from its SHARD_FILE
    cfg = deepfm_input.config_from_hparams(hp, mode, "input/data", env.config_dir, "pipe_state")

    def epoch_iterator(skip):  # one pass over each worker's data, `skip` batches on each already trained
        def dataset_fn():
            shard = read_worker_shard_file()
            return deepfm_input.make_dataset(cfg, channels, shard[NUM_SHARDS], shard[SHARD_INDEX], training=True, epochs=1,
                                             skip_batches=skip)

        return iter(coordinator.create_per_worker_dataset(dataset_fn))

    raw = hp.features != ""
    answers = WorkerAnswers(strategy, len(cluster["worker"]))

    def bad_data(err):
        stop_on_bad_data(err, env, [*channels, deepfm_input.EVAL_CHANNEL], record_reader(hp, env))

    def join(coordinator, rejected):
        join_or_exit(coordinator, rejected, bad_data)

    @tf.function
    def worker_steps(it, count):
        # Up to `count` steps in one closure: one chief round trip for all of them. A worker whose data is
        # used up marks itself done and stops, instead of raising OutOfRangeError, which would cancel the
        # closures of workers that still have data. The closure returns nothing: a result would be copied
        # to the chief after every closure (a round trip, and a remote function instantiated per worker
        # while the others' closures run, which races inside TensorFlow: REJECTED_REQUEST).
        task = read_worker_shard_file()[TASK]
        for _ in tf.range(count):
            batch = it.get_next_as_optional()
            if not batch.has_value():
                answers.mark_done(task)
                break
            value = batch.get_value()
            strategy.run(trainer.train_step, args=(value,))
            if raw:
                answers.add_bad_rows(task, value[0][BAD_ROWS_KEY])

    window = TrainWindow(trainer.train_metrics)
    selection, eval_step = ModelSelection(hp), tf.function(trainer.eval_step)
    has_eval = deepfm_input.EVAL_CHANNEL in env.channels
    during = has_eval and evaluates_during_training(hp, env, ALONE)
    epoch, epoch_start = (int(v) for v in trainer.progress.numpy())
    evaluated, stopped, rejected = [], False, []

    spread = WorkerEvaluation(hp, env, strategy, coordinator, trainer, len(cluster["worker"]),
                              join=lambda: join(coordinator, rejected), rejected=rejected) if has_eval and workers_evaluate(env) else None

    def evaluate_now(step):  # on the workers, else the chief alone; its time left out of the window
        started = time.monotonic()
        if spread is not None and spread.ready():
            loss, auc, rows = spread.run(step)
            log(f"evaluated {rows} rows on {len(spread.holders)} worker(s) in {time.monotonic() - started:.2f} s")
        else:
            loss, auc = evaluate(trainer, eval_dataset(hp, env, ALONE), step, step_fn=eval_step)
            log(f"evaluated on the chief in {time.monotonic() - started:.2f} s")
        window.leave_out(started)
        evaluated.append(step)
        return selection.observe(trainer.model, step, loss, auc)

    def reached(step):
        return bool(hp.max_steps and step >= hp.max_steps)

    from deepfm_training import Diverged

    try:
        while (hp.epochs <= 0 or epoch < hp.epochs) and not stopped and not reached(step):
            # resume: each worker skips its share of the steps this epoch already trained
            iterator = epoch_iterator((step - epoch_start) // len(cluster["worker"]))
            answers.new_epoch()
            exhausted = False
            while not (exhausted or stopped or reached(step)):
                todo = steps_to_boundary(step, hp)
                for count in closure_sizes(todo, hp.steps_per_closure, len(cluster["worker"])):
                    coordinator.schedule(worker_steps, args=(iterator, tf.constant(count, tf.int64)))
                join(coordinator, rejected)
                previous, step = step, int(trainer.optimizer.iterations.numpy())
                exhausted = step - previous < todo and answers.all_done()  # some closures found no data
                if step // hp.log_steps > previous // hp.log_steps:
                    window.report(step)
                keeper.maybe_save(step)
                if during and crossed(previous, step, hp.eval_steps):
                    stopped = evaluate_now(step)
            if not exhausted or step == epoch_start:
                break  # max_steps or early stopping: the epoch stays unfinished; or the data holds no batch
            epoch, epoch_start = epoch + 1, step
            trainer.progress.assign([epoch, epoch_start])
            log(f"training data exhausted on every worker: epoch {epoch}/{hp.epochs} done at step {step}")
            if during and not hp.eval_steps:
                stopped = evaluate_now(step)
        window.report(step)
        if step == 0:
            stop_untrained(",".join(channels), "every worker", "each worker's share of it was empty")
        for task, count in enumerate(answers.bad_rows()) if raw else []:
            log(f"bad rows skipped: {count} (worker {task})")
        keeper.maybe_save(step, force=True)
        if has_eval and (not evaluated or evaluated[-1] != step):
            evaluate_now(step)
    except Diverged as err:
        stop_diverged(err, keeper)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:  # read on the chief itself
        bad_data(err)
    if hp.export:
        export_saved_model(selection.model_to_export(trainer.model, step), hp, env.model_dir)
    watch.stop()
    return 0
