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
from deepfm_closure_errors import report_closure_errors_once
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

# TensorFlow's EagerClusterFunctionLibraryRuntime::Run (2.14 and current sources alike) keeps a pointer into its
# vector of instantiated remote functions after dropping the lock; an Instantiate on another thread that
# grows the vector frees it, and the request is sent with a destroyed device string: the task rejects the
# malformed request ("Unable to parse request", INTERNAL) before running anything. The loop below no longer
# instantiates functions while closures run; a rejected closure that still happens is scheduled again.
REJECTED_REQUEST = "Unable to parse request"
MAX_REJECTED = 3


def join_or_exit(coordinator, rejected=None, on_bad_data=None, wait=None):
    """coordinator.join(), or `wait` (coordinator.done: a look that does not block, and raises a failed closure's
    error once, as join does) -> what it returned. A bad row met under bad_rows: fail ends the run with its one
    line, exit 1; other bad input (a corrupt record, another field size) goes to on_bad_data(err), which names the
    file. A closure whose request TensorFlow malformed (REJECTED_REQUEST) is counted in `rejected` (a list) and the
    call returns False: the caller goes on from optimizer.iterations, scheduling what did not run again; the
    (MAX_REJECTED + 1)th is raised."""
    import tensorflow as tf

    try:
        return (wait or coordinator.join)()
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
        return False


def embedding_partitioner(hp, num_ps):
    """Split only the two embedding tables (rows = feature_size) across the ps tasks."""
    import tensorflow as tf

    by_size = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=num_ps)

    def partition(shape, dtype):
        if shape.rank and shape[0] == hp.feature_size:
            return by_size(shape, dtype)
        return [1] * max(shape.rank, 1)

    return partition


def closure_size(steps_per_closure, local_steps=1):
    """The steps of a full closure: steps_per_closure, in whole groups of local_steps when it holds one."""
    return steps_per_closure // local_steps * local_steps or steps_per_closure


def closure_sizes(todo, steps_per_closure, num_workers, local_steps=1):
    """`todo` steps as closures of at most steps_per_closure steps: an even share for each worker (the last steps
    of a window, which ends at each checkpoint and evaluation step and waits for its last closure), each share in
    closures of whole groups of local_steps, so it takes as few exchanges with the ps as it can. 50 steps at 16 on
    2 workers with 8 local steps are 16, 16, 9 and 9, not 16, 16, 16 and 2, which one worker would run 32 steps of
    while the other ran 18."""
    most = closure_size(steps_per_closure, local_steps)
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


# A window keeps at most this many closures a worker queued or running, and schedules more as the step advances: a
# worker never waits for the chief's next look, and a window to the next checkpoint (thousands of steps) never
# fills ClusterCoordinator's queue, whose schedule() blocks when full.
IN_FLIGHT = 3
LOOK_SECONDS = 0.2  # the longest the chief waits between reads of the step while a window runs (a remote read)
SOONEST_LOOK_SECONDS = 0.02


def seconds_to_look(steps_to_line, steps_per_second):
    """How long the chief waits before it reads the step again: until the next train line is due at the rate the
    steps went since its last read, within SOONEST_LOOK_SECONDS..LOOK_SECONDS (a line comes close to its step,
    and the chief reads little more often than it prints)."""
    if steps_per_second <= 0:
        return LOOK_SECONDS
    return min(LOOK_SECONDS, max(SOONEST_LOOK_SECONDS, steps_to_line / steps_per_second))


class CoordinatorSteps(Distribution):
    """The steps of a parameter-server run: a window's steps scheduled on the workers as closures of up to
    steps_per_closure steps each (IN_FLIGHT a worker at a time, the last ones as closure_sizes), each worker
    reading its own shard; its data ends when every worker has used up its pass (WorkerAnswers). The train lines
    need no window end: the chief reads the step while the closures run and the loop prints them (a window ends
    only at a checkpoint, an evaluation, max_steps or the data's end, each a wait for every worker's last
    closure). Evaluation runs on the workers (deepfm_ps_eval), else on the chief alone."""

    epoch_end_words = "training data exhausted on every worker: "
    lines_end_windows = False

    def __init__(self, hp, env, strategy, coordinator, trainer, num_workers):
        import tensorflow as tf
        import deepfm_input

        self.hp, self.env, self.coordinator, self.trainer = hp, env, coordinator, trainer
        self.workers = num_workers
        self.lines_end_windows = hp.line_barrier
        self.channels, mode = training_input(hp, env, ALONE)[:2]  # each worker's shard comes from its SHARD_FILE
        self.cfg = deepfm_input.config_from_hparams(hp, mode, "input/data", env.config_dir, "pipe_state")
        self.answers = answers = WorkerAnswers(strategy, num_workers)
        self.rejected = []
        self.eval_step = tf.function(trainer.eval_step)
        # Traced, and its function instantiated on the ps tasks, before any closure runs (REJECTED_REQUEST): the
        # train lines take the metrics while closures run. They hold nothing yet.
        trainer.train_metrics.take()
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
        join_or_exit(self.coordinator, self.rejected, self.on_bad_data)

    def idle(self):
        """Whether no closure is queued or running, without waiting (a failed closure's error as join's)."""
        return join_or_exit(self.coordinator, self.rejected, self.on_bad_data, wait=self.coordinator.done)

    def on_bad_data(self, err):
        stop_on_input_error(err, self.hp, self.env, self.channels)

    def settle(self):
        """Let the closures in flight end, whatever they raise: the run is stopping for another reason."""
        import tensorflow as tf

        try:
            self.coordinator.join()
        except tf.errors.OpError:
            pass

    def step(self):
        return int(self.trainer.optimizer.iterations.numpy())  # a variable on a ps: a remote read, no closure waits

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

    def run_steps(self, epoch_input, step, todo, progress=None):
        """The window's closures, IN_FLIGHT a worker queued or running at a time, more scheduled as the step
        advances and none once every worker's data is used up; at each read of the step (seconds_to_look apart)
        the step reached goes to `progress`, no closure waited for; the window ends with a join."""
        import tensorflow as tf

        end = step + todo
        try:
            self.look_while_running(epoch_input, step, end, progress)
        except tf.errors.OpError:
            # A read of a ps that failed (a ps gone) leaves its error in this thread's eager executor, and TensorFlow
            # prints it with a traceback at each executor object Python frees (Executor.__del__ waits on it): the
            # run's one error line would not be last. The error goes on to train_ps, which names the ps.
            from tensorflow.python.eager import context

            context.context().executor.clear_error()
            raise
        self.join()
        trained = self.step() - step
        return trained, trained < todo and self.answers.all_done()  # else a rejected closure: scheduled again

    def look_while_running(self, epoch_input, step, end, progress):
        """run_steps' loop until the step reaches `end` or every worker's data is used up."""
        import tensorflow as tf
        from deepfm_metrics import Diverged

        hp = self.hp
        most = closure_size(hp.steps_per_closure, hp.local_steps)
        bound = IN_FLIGHT * self.workers * most
        scheduled = step  # the step the closures scheduled so far reach, when each runs all its steps
        last = None  # (step, time) of the last read
        while True:
            idle = self.idle()
            reached, now = self.step(), time.monotonic()
            if idle:  # a closure that met the data's end, or was cancelled, ran fewer steps than scheduled
                scheduled = reached
            if reached >= end or self.answers.all_done():
                break
            room = bound - (scheduled - reached)
            if end - scheduled <= room:  # the window's last steps: an even share for each worker
                sizes = closure_sizes(end - scheduled, hp.steps_per_closure, self.workers, hp.local_steps)
            else:
                sizes = [most] * (room // most)
            for count in sizes:
                self.coordinator.schedule(self.worker_steps, args=(epoch_input, tf.constant(count, tf.int64)))
            scheduled += sum(sizes)
            if progress is not None:
                try:
                    progress(reached)
                except Diverged:  # the closures in flight end before the run stops
                    self.settle()
                    raise
            rate = (reached - last[0]) / (now - last[1]) if last and now > last[1] else 0.0
            last = (reached, now)
            time.sleep(seconds_to_look(hp.log_steps - reached % hp.log_steps, rate))

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
