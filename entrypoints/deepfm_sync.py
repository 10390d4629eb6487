"""Synchronous data-parallel training: the steps (`SyncSteps`) that deepfm_loop drives for train_horovod.py,
train_mirrored.py and train_ps.py on one host.

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

from deepfm_checkpoint import CheckpointKeeper, checkpoint_dir
from deepfm_loop import Distribution
from deepfm_sync_steps import window_runner
from deepfm_worker_input import eval_dataset, train_dataset, training_input

DUMP_WEIGHTS_ENV = "DFM_DUMP_WEIGHTS"  # test hook: every worker writes its final weights here


def sparse_allreduce(hp, collectives):
    """dense | gather: how this run averages the embedding gradients (deepfm_hparams.resolve_sparse_allreduce)."""
    from deepfm_hparams import resolve_sparse_allreduce

    return resolve_sparse_allreduce(
        hp.sparse_allreduce,
        hp.feature_size,
        hp.embedding_size,
        hp.batch_size,
        hp.field_size,
        collectives.replicas,
        hp.optimizer,
    )


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
    trainer = build_trainer(
        hp,
        strategy,
        compute_dtype=compute_dtype,
        learning_rate=learning_rate,
        grad_transform=average,
        process_metrics=strategy is not None,
    )
    return trainer, learning_rate


def model_state(trainer):
    """Every variable a restart or a broadcast must carry: model, optimizer slots and step, loss scale, baseline."""
    state = list(trainer.model.variables) + list(trainer.optimizer.variables) + [trainer.progress]
    if trainer.loss_scale is not None:
        state += list(trainer.loss_scale.variables)
    if getattr(trainer, "baseline", None) is not None:
        state += list(trainer.baseline.variables)
    unique = {v.ref(): v for v in state}  # the optimizer also references the model's variables
    return list(unique.values())


class SyncSteps(Distribution):
    """Every worker steps together: a window of steps runs as one traced loop with the end-of-data check
    inside it (deepfm_sync_steps), and ends, on every worker alike, at the first step some worker has no batch
    for. `step_fn(batch)` defaults to the trainer's train step traced once; `train_input(skip_steps, epoch)`
    gives an epoch's batches, the first skip_steps steps' left out (default: this worker's train_dataset);
    evaluation is sharded across the workers and their metrics summed."""

    def __init__(
        self,
        hp,
        env,
        trainer,
        collectives,
        where,
        step_fn=None,
        train_input=None,
        whole_batches=True,
        eval_step_fn=None,
    ):
        import tensorflow as tf

        self.hp, self.env, self.trainer, self.collectives, self.where = hp, env, trainer, collectives, where
        self.rank, self.workers, self.longest_window = where.rank, where.size, hp.sync_check_steps
        self.step_fn = step_fn or tf.function(trainer.train_step)
        self.eval_step_fn = eval_step_fn or tf.function(trainer.eval_step)
        self.train_input = train_input or (
            lambda skip_steps, epoch: train_dataset(
                hp, env, where, skip_batches=skip_steps, whole_batches=whole_batches, epoch=epoch
            )
        )
        self.skipped = 0
        self.run_window = window_runner(self.step_fn, collectives)

    def after_restore(self):
        self.collectives.broadcast(model_state(self.trainer))

    def epoch_input(self, epoch, skip_steps):
        return iter(self.train_input(skip_steps, epoch))

    def run_steps(self, epoch_input, step, todo, progress=None):
        trained, bad = self.run_window(epoch_input, todo)
        self.skipped += bad
        return trained, trained < todo

    def evaluate(self, step):  # every worker: its part of eval, summed
        from deepfm_metrics import evaluate

        dataset = eval_dataset(self.hp, self.env, self.where)
        return evaluate(self.trainer, dataset, step, self.collectives, self.eval_step_fn)

    def bad_rows(self):
        return [(None, self.skipped)]

    def training_channels(self):
        return training_input(self.hp, self.env, self.where)[0]

    def untrained(self):
        why = (
            "the channel holds no rows"
            if self.where.size == 1
            else f"some worker's share holds less than one whole batch ({self.hp.batch_size} rows)"
        )
        return f"{self.env.current_host} ({self.where})", why


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


def run(
    hp, env, trainer, collectives, where, train_step_fn=None, eval_step_fn=None, train_input=None, whole_batches=True
):
    """deepfm_loop's run with these workers' steps: restore (rank 0) -> broadcast -> train, evaluating every
    eval_steps steps or after each epoch -> final checkpoint and evaluation -> export (rank 0).
    `train_input(skip_steps, epoch)`: an epoch's batches (SyncSteps'); whole_batches=False (one process, one
    replica) also trains on each epoch's last partial batch. -> the step reached."""
    from deepfm_loop import TrainingLoop

    keeper = CheckpointKeeper(trainer, checkpoint_dir(hp, env), hp.checkpoint_steps) if where.rank == 0 else None
    steps = SyncSteps(hp, env, trainer, collectives, where, train_step_fn, train_input, whole_batches, eval_step_fn)
    step = TrainingLoop(hp, env, trainer, steps, keeper).run()
    dump_weights(trainer, where.rank, step, getattr(collectives, "local_copies", None))
    return step
