"""Synchronous data-parallel training: the loop of train_horovod.py, train_mirrored.py and of
train_ps.py on one host.

Every worker holds a whole model; each step the gradients are averaged across workers, so all copies
apply the same update and stay identical. How workers talk is a collectives object
(deepfm_collectives: one process alone, Horovod, MultiWorkerMirroredStrategy).

Uneven shards never deadlock: in each step every worker says whether it still has a batch, and all
stop at the first step where any worker has none, so every worker runs the same number of steps (the
check runs inside the traced step; the host reads it once per window: deepfm_sync_steps).
Only rank 0 saves checkpoints, logs metric lines and exports; evaluation is sharded across workers and
their metric histograms summed, so no worker waits long on another.
"""

import os
import time

import numpy as np

from deepfm_checkpoint import CheckpointKeeper, checkpoint_dir, export_saved_model, stop_diverged, stop_untrained
from deepfm_data_errors import is_bad_row, record_reader, stop_on_bad_data
from deepfm_log import error_line, log
from deepfm_sync_steps import window_runner
from deepfm_sync_steps import window as steps_window
from deepfm_worker_input import eval_dataset, train_dataset

DUMP_WEIGHTS_ENV = "DFM_DUMP_WEIGHTS"  # test hook: every worker writes its final weights here


def sparse_allreduce(hp, collectives):
    """dense | gather: how this run averages the embedding gradients (deepfm_hparams.resolve_sparse_allreduce)."""
    from deepfm_hparams import resolve_sparse_allreduce

    return resolve_sparse_allreduce(hp.sparse_allreduce, hp.feature_size, hp.embedding_size, hp.batch_size,
                                    hp.field_size, collectives.replicas, hp.optimizer)


def build_sync_trainer(hp, collectives, compute_dtype, strategy=None):
    """The trainer of a synchronous run: gradients averaged over the workers every step (embedding
    gradients densified first when sparse_allreduce resolves to dense), the learning rate scaled by the
    replicas in sync when scale_lr. Under a (mirrored) strategy the metrics are the process's own, which
    every local replica adds into. -> (trainer, learning rate)."""
    from deepfm_collectives import sparse_as_dense
    from deepfm_training import build_trainer

    learning_rate = hp.learning_rate * (collectives.replicas if hp.scale_lr else 1)
    if sparse_allreduce(hp, collectives) == "dense":
        def average(grads):
            return collectives.average_gradients(sparse_as_dense(grads))
    else:
        average = collectives.average_gradients
    trainer = build_trainer(hp, strategy, compute_dtype=compute_dtype, learning_rate=learning_rate,
                            grad_transform=average, process_metrics=strategy is not None)
    return trainer, learning_rate


def model_state(trainer):
    """Every variable a restart or a broadcast must carry: model, optimizer slots and step, loss scale."""
    state = list(trainer.model.variables) + list(trainer.optimizer.variables) + [trainer.progress]
    if trainer.loss_scale is not None:
        state += list(trainer.loss_scale.variables)
    unique = {v.ref(): v for v in state}  # the optimizer also references the model's variables
    return list(unique.values())


def train(hp, env, trainer, collectives, where, keeper=None, step_fn=None, train_input=None, whole_batches=True,
          evaluate=None):
    """Run the synchronous loop, one pass over the data per epoch; -> the global step reached.
    `step_fn(batch)` defaults to the trainer's train step traced once; `train_input(skip_steps, epoch)`
    gives the epoch's batches, the first skip_steps steps' left out (default: this worker's train_dataset);
    `evaluate(step)` runs on every worker every `eval_steps` steps, or after each whole epoch when
    eval_steps is 0, and ends training when it returns True."""
    import tensorflow as tf
    from deepfm_hparams import crossed
    from deepfm_training import TrainWindow

    step = int(trainer.optimizer.iterations.numpy())
    epoch, epoch_start = (int(v) for v in trainer.progress.numpy())
    step_fn = step_fn or tf.function(trainer.train_step)
    train_input = train_input or (lambda skip_steps, epoch: train_dataset(
        hp, env, where, skip_batches=skip_steps, whole_batches=whole_batches, epoch=epoch))
    window = TrainWindow(trainer.train_metrics, collectives)
    bad_rows = 0
    stopped = False
    while (hp.epochs <= 0 or epoch < hp.epochs) and not stopped and not (hp.max_steps and step >= hp.max_steps):
        # resume: skip the batches this epoch already trained on
        iterator = iter(train_input(step - epoch_start, epoch))
        # a runner per epoch: it carries its look-ahead batch from one window to the next of one iterator
        run_window = window_runner(step_fn, collectives)  # the end-of-data check, in the steps where possible
        exhausted = False
        while not hp.max_steps or step < hp.max_steps:
            todo = steps_window(step, hp)
            try:
                trained, bad = run_window(iterator, todo)
            except tf.errors.InvalidArgumentError as err:
                if not is_bad_row(err):
                    raise  # not a row the features refused: the run names the file (run)
                log(f"error: {error_line(err.message)}")
                raise SystemExit(1) from None
            previous, step, bad_rows = step, step + trained, bad_rows + bad
            if step % hp.log_steps == 0 and trained:
                window.report(step)
            if keeper is not None:
                keeper.maybe_save(step)
            if evaluate is not None and crossed(previous, step, hp.eval_steps):
                stopped = evaluate_in(window, evaluate, step)
            if trained < todo or stopped:
                exhausted = trained < todo
                break
        if not exhausted or step == epoch_start:
            break  # max_steps or early stopping: the epoch stays unfinished; or the data holds no batch
        epoch, epoch_start = epoch + 1, step
        trainer.progress.assign([epoch, epoch_start])
        if where.rank == 0:
            log(f"epoch {epoch}/{hp.epochs} done at step {step}")
        if evaluate is not None and not hp.eval_steps:
            stopped = evaluate_in(window, evaluate, step)
    window.report(step)  # the last partial window (prints nothing when it is empty)
    if hp.features:
        log(f"bad rows skipped: {bad_rows}")
    return step


def evaluate_in(window, evaluate, step):
    """evaluate(step), its time left out of the train window. -> whether training stops."""
    started = time.monotonic()
    stop = evaluate(step)
    window.leave_out(started)
    return stop


def dump_weights(trainer, rank, step, local_copies=None):
    """Test hook: `$DFM_DUMP_WEIGHTS/rank-<r>.npz` with every model variable, by position (`vNN`), and
    with `local_copies(var)` (a mirrored variable's per-replica copies) the other copies as `vNN_cK`."""
    folder = os.environ.get(DUMP_WEIGHTS_ENV)
    if not folder:
        return None
    from deepfm_variables import full_value

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank-{rank}.npz")
    arrays = {}
    for i, var in enumerate(trainer.model.all_variables):
        arrays[f"v{i:02d}"] = full_value(var).numpy()
        for k, copy in enumerate(local_copies(var)[1:] if local_copies else [], start=1):
            arrays[f"v{i:02d}_c{k}"] = copy.numpy()
    np.savez(path, step=step, **arrays)
    return path


def run(hp, env, trainer, collectives, where, train_step_fn=None, eval_step_fn=None, train_input=None,
        whole_batches=True):
    """Restore (rank 0) -> broadcast -> train, evaluating every eval_steps steps or after each epoch ->
    final checkpoint -> final evaluation (unless the last one is at this step) -> export (rank 0) of the
    best evaluation's model (best_of). `train_input(skip_steps, epoch)`: an epoch's batches (train's);
    whole_batches=False (one process, one replica) also trains on each epoch's last partial batch.
    -> the step reached."""
    import tensorflow as tf
    import deepfm_input as di
    from deepfm_selection import ModelSelection, stop_together
    from deepfm_training import evaluate

    keeper = None
    if where.rank == 0:
        keeper = CheckpointKeeper(trainer, checkpoint_dir(hp, env), hp.checkpoint_steps)
        keeper.restore_latest()
    collectives.broadcast(model_state(trainer))
    start = int(trainer.optimizer.iterations.numpy())
    selection = ModelSelection(hp, where.rank)
    eval_step_fn = eval_step_fn or tf.function(trainer.eval_step)
    evaluated = []

    def evaluate_now(step):  # every worker: its part of eval, summed; rank 0 decides whether to stop
        loss, auc = evaluate(trainer, eval_dataset(hp, env, where), step, collectives, eval_step_fn)
        evaluated.append(step)
        return stop_together(collectives, selection.observe(trainer.model, step, loss, auc))

    has_eval = di.EVAL_CHANNEL in env.channels
    during = has_eval and evaluates_during_training(hp, env, where)
    from deepfm_training import Diverged
    from deepfm_worker_input import training_input

    try:
        step = train(hp, env, trainer, collectives, where, keeper, train_step_fn, train_input, whole_batches,
                     evaluate=evaluate_now if during else None)
        if where.rank == 0:
            log(f"trained steps {start}..{step} on {where.size} workers")
        if step == 0:
            channels = ",".join(training_input(hp, env, where)[0])
            why = ("the channel holds no rows" if where.size == 1 else
                   f"some worker's share holds less than one whole batch ({hp.batch_size} rows)")
            stop_untrained(channels, f"{env.current_host} ({where})", why)
        if keeper is not None:
            keeper.maybe_save(step, force=True)
        if has_eval and (not evaluated or evaluated[-1] != step):
            evaluate_now(step)
    except Diverged as err:
        stop_diverged(err, keeper)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        stop_on_bad_data(err, env, [*training_input(hp, env, where)[0], di.EVAL_CHANNEL], record_reader(hp, env))
    dump_weights(trainer, where.rank, step, getattr(collectives, "local_copies", None))
    if where.rank == 0 and hp.export:
        export_saved_model(selection.model_to_export(trainer.model, step), hp, env.model_dir)
    return step


def evaluates_during_training(hp, env, where):
    """Evaluate during training (every eval_steps steps, or after every epoch), unless `eval` arrives in
    Pipe mode (it is read once, at the end: each reading takes a FIFO of its own). Rank 0 says which."""
    import deepfm_input as di

    if env.input_mode(di.EVAL_CHANNEL).lower() == "pipe":
        if where.rank == 0:
            log("evaluating once, after training: the eval channel is in Pipe mode")
        return False
    return True
