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

import numpy as np

from deepfm_checkpoint import CheckpointKeeper, checkpoint_dir, export_saved_model
from deepfm_log import log
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
    average = collectives.average_gradients
    if sparse_allreduce(hp, collectives) == "dense":
        def average(grads):
            return collectives.average_gradients(sparse_as_dense(grads))
    trainer = build_trainer(hp, strategy, compute_dtype=compute_dtype, learning_rate=learning_rate,
                            grad_transform=average, process_metrics=strategy is not None)
    return trainer, learning_rate


def model_state(trainer):
    """Every variable a restart or a broadcast must carry: model, optimizer slots and step, loss scale."""
    state = list(trainer.model.variables) + list(trainer.optimizer.variables)
    if trainer.loss_scale is not None:
        state += list(trainer.loss_scale.variables)
    unique = {v.ref(): v for v in state}  # the optimizer also references the model's variables
    return list(unique.values())


def train(hp, env, trainer, collectives, where, keeper=None, step_fn=None, batch_size=None, whole_batches=True):
    """Run the synchronous loop; -> the global step reached. `step_fn(batch)` defaults to the
    trainer's train step traced once; `batch_size` is what one step of this worker consumes."""
    import tensorflow as tf
    from deepfm_training import TrainWindow

    step = int(trainer.optimizer.iterations.numpy())
    step_fn = step_fn or tf.function(trainer.train_step)
    iterator = iter(train_dataset(hp, env, where, skip_batches=step, batch_size=batch_size,
                                  whole_batches=whole_batches))
    window = TrainWindow(trainer.train_metrics, collectives)
    bad_rows = 0
    run_window = window_runner(step_fn, collectives)  # the end-of-data check, in the steps where possible
    while not hp.max_steps or step < hp.max_steps:
        todo = steps_window(step, hp)
        try:
            trained, bad = run_window(iterator, todo)
        except tf.errors.InvalidArgumentError as err:  # bad_rows: fail met a bad row
            log(f"error: {err.message.strip().splitlines()[0]}")
            raise SystemExit(1) from None
        step, bad_rows = step + trained, bad_rows + bad
        if step % hp.log_steps == 0 and trained:
            window.report(step)
        if keeper is not None:
            keeper.maybe_save(step)
        if trained < todo:
            break
    window.report(step)  # the last partial window (prints nothing when it is empty)
    if hp.features:
        log(f"bad rows skipped: {bad_rows}")
    return step


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


def run(hp, env, trainer, collectives, where, train_step_fn=None, eval_step_fn=None, batch_size=None,
        whole_batches=True):
    """Restore (rank 0) -> broadcast -> train -> final checkpoint -> evaluate -> export (rank 0).
    `batch_size`: examples one step of this worker consumes (default hp.batch_size); whole_batches=False
    (one process, one replica) also trains on each epoch's last partial batch. -> the step reached."""
    import deepfm_input as di
    from deepfm_training import evaluate

    keeper = None
    if where.rank == 0:
        keeper = CheckpointKeeper(trainer, checkpoint_dir(hp, env), hp.checkpoint_steps)
        keeper.restore_latest()
    collectives.broadcast(model_state(trainer))
    start = int(trainer.optimizer.iterations.numpy())
    step = train(hp, env, trainer, collectives, where, keeper, train_step_fn, batch_size, whole_batches)
    if where.rank == 0:
        log(f"trained steps {start}..{step} on {where.size} workers")
        if step == start and not (hp.max_steps and step >= hp.max_steps):
            log("warning: no step trained: some worker's shard holds less than one whole batch")
    if keeper is not None:
        keeper.maybe_save(step, force=True)
    if di.EVAL_CHANNEL in env.channels:
        evaluate(trainer, eval_dataset(hp, env, where), step, collectives, eval_step_fn)
    dump_weights(trainer, where.rank, step, getattr(collectives, "local_copies", None))
    if where.rank == 0 and hp.export:
        export_saved_model(trainer.model, hp, env.model_dir)
    return step
