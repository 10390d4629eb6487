"""Synchronous data-parallel training: the loop shared by train_horovod.py and train_mirrored.py.

Every worker holds a whole model; each step the gradients are averaged across workers, so all copies
apply the same update and stay identical. What differs between Horovod and MultiWorkerMirroredStrategy
is only how workers talk, passed in as a `collectives` object with:

- `rank`, `size`
- `average_gradients(grads)`: inside the traced train step; IndexedSlices stay sparse (gathered)
- `all_have(flag) -> bool`: True when every worker has `flag` (one small collective per step)
- `sum(tensor) -> tensor`: elementwise sum over workers
- `broadcast(variables)`: rank 0's values everywhere
- optionally `local_copies(var)`: every copy a worker holds of a variable (several local replicas)

Uneven shards never deadlock: before each step every worker says whether it still has a batch, and
all stop at the first step where any worker has none, so every worker runs the same number of steps.
Only rank 0 saves checkpoints, logs metric lines and exports; evaluation is sharded across workers and
their metric histograms summed, so no worker waits long on another.
"""

import argparse
import math
import os
import time

import numpy as np

import deepfm_runtime as rt

DUMP_WEIGHTS_ENV = "DFM_DUMP_WEIGHTS"  # test hook: every worker writes its final weights here


class Placement:
    """Where one worker sits: `hosts x workers_per_host` workers, filled host by host in rank order
    (mpirun's by-slot mapping with `--host algo-1:P,algo-2:P`)."""

    def __init__(self, rank, size, num_hosts):
        if size % num_hosts:
            raise ValueError(f"{size} workers do not divide over {num_hosts} hosts")
        self.rank, self.size, self.num_hosts = rank, size, num_hosts
        self.workers_per_host = size // num_hosts
        # From the rank, not SM_CURRENT_HOST: under MPI every rank inherits the first host's environment.
        self.host_index, self.local_rank = divmod(rank, self.workers_per_host)

    def __repr__(self):
        return (f"rank={self.rank}/{self.size} host={self.host_index}/{self.num_hosts} "
                f"local_rank={self.local_rank}/{self.workers_per_host}")


def per_process_threads(hp, cpus, processes):
    """Thread pools left at 0 (= all vCPUs) get the host's vCPUs split over its processes."""
    share = max(1, cpus // max(1, processes))
    values = dict(vars(hp))
    for name in ("intra_op_threads", "inter_op_threads", "omp_num_threads"):
        values[name] = values[name] or share
    return argparse.Namespace(**values)


def _input_config(hp, env, mode, rank, batch_size=None):
    import deepfm_input as di  # imports TensorFlow: not before the thread environment is set
    # PipeModeDataset counts epochs per channel in its state dir; one dir per rank keeps them apart.
    return di.config_from_hparams(hp, mode, env.data_dir, env.config_dir,
                                  os.path.join(env.pipe_state_dir, f"rank-{rank}"), batch_size=batch_size)


def train_dataset(hp, env, where, skip_batches=0, batch_size=None):
    """This worker's training batches (of `batch_size`, default hp.batch_size: what one step consumes)."""
    import deepfm_input as di  # imports TensorFlow: not before the thread environment is set
    channels = di.training_channels(env.channels, where.workers_per_host, where.local_rank)
    multi_path = di.is_multi_path(env.channels)
    mode = rt.input_mode(env, channels)
    if mode.lower() == "pipe" and not multi_path and where.workers_per_host > 1:
        raise ValueError(f"Pipe mode with {where.workers_per_host} workers per host needs one training channel "
                         "per worker (train, train-1, ...): a FIFO can be read by one process only")
    s3_shard = rt.resolve_s3_shard(hp, env, channels)
    shards = di.shard_for(where.num_hosts, where.host_index, where.workers_per_host, where.local_rank,
                          multi_path, s3_shard)
    rt.log(f"{where} channels={','.join(channels)} mode={mode} multi_path={multi_path} s3_shard={s3_shard} "
           f"shard={shards[1]}/{shards[0]}")
    # Whole batches only: every step has the same shapes on every worker (one trace, no ragged tail).
    return di.make_dataset(_input_config(hp, env, mode, where.rank, batch_size), channels, *shards, training=True,
                           epochs=hp.epochs, skip_batches=skip_batches, drop_remainder=True, seed=where.rank)


def eval_dataset(hp, env, where):
    """This worker's part of `eval`; None when it reads none (Pipe mode: rank 0 alone reads the FIFO)."""
    import deepfm_input as di  # imports TensorFlow: not before the thread environment is set
    mode = env.input_mode(di.EVAL_CHANNEL)
    if mode.lower() == "pipe":
        if where.rank != 0:
            return None
        shards = (1, 0)
    else:
        s3_shard = rt.resolve_s3_shard(hp, env, [di.EVAL_CHANNEL])
        shards = di.shard_for(where.num_hosts, where.host_index, where.workers_per_host, where.local_rank,
                              False, s3_shard)
    dataset = di.make_dataset(_input_config(hp, env, mode, where.rank), [di.EVAL_CHANNEL], *shards, training=False)
    if hp.eval_steps:
        dataset = dataset.take(math.ceil(hp.eval_steps / where.size))
    return dataset


def global_metrics(metrics, collectives):
    """Sum a StreamingMetrics over workers (one collective), reset it -> (loss, auc, examples)."""
    import tensorflow as tf
    from deepfm_model import histogram_auc

    parts = (metrics.loss_sum, metrics.examples, metrics.positives, metrics.negatives)
    packed = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in parts], axis=0)
    total = np.asarray(collectives.sum(packed))
    metrics.reset()
    loss_sum, examples = total[0], total[1]
    positives, negatives = np.split(total[2:], 2)
    loss = loss_sum / examples if examples else float("nan")
    return loss, histogram_auc(positives, negatives), int(examples)


def model_state(trainer):
    """Every variable a restart or a broadcast must carry: model, optimizer slots and step, loss scale."""
    state = list(trainer.model.variables) + list(trainer.optimizer.variables)
    if trainer.loss_scale is not None:
        state += list(trainer.loss_scale.variables)
    unique = {v.ref(): v for v in state}  # the optimizer also references the model's variables
    return list(unique.values())


def train(hp, env, trainer, collectives, where, keeper=None, step_fn=None, batch_size=None):
    """Run the synchronous loop; -> the global step reached. `step_fn(batch)` defaults to the
    trainer's train step traced once; `batch_size` is what one step of this worker consumes."""
    import tensorflow as tf

    step = int(trainer.optimizer.iterations.numpy())
    step_fn = step_fn or tf.function(trainer.train_step)
    iterator = iter(train_dataset(hp, env, where, skip_batches=step, batch_size=batch_size))
    window_start = time.monotonic()
    while not hp.max_steps or step < hp.max_steps:
        batch = iterator.get_next_as_optional()
        if not collectives.all_have(bool(batch.has_value())):
            break
        step_fn(batch.get_value())
        step += 1
        if step % hp.log_steps == 0:
            loss, auc, examples = global_metrics(trainer.train_metrics, collectives)
            now = time.monotonic()
            if where.rank == 0:
                print(rt.format_metric("train", step, loss, auc, examples / max(now - window_start, 1e-9)),
                      flush=True)
            window_start = now
        if keeper is not None:
            keeper.maybe_save(step)
    return step


def evaluate(hp, env, trainer, collectives, where, step, step_fn=None):
    """Every worker evaluates its shard; rank 0 logs the combined line. -> (loss, auc) or None."""
    import deepfm_input as di  # imports TensorFlow: not before the thread environment is set
    import tensorflow as tf

    if di.EVAL_CHANNEL not in env.channels:
        return None
    dataset = eval_dataset(hp, env, where)
    trainer.eval_metrics.reset()
    if dataset is not None:
        step_fn = step_fn or tf.function(trainer.eval_step)
        for batch in dataset:
            step_fn(batch)
    loss, auc, examples = global_metrics(trainer.eval_metrics, collectives)
    if where.rank == 0:
        if examples:
            print(rt.format_metric("eval", step, loss, auc), flush=True)
        else:
            rt.log("eval channel is empty: no eval line")
    return loss, auc


def dump_weights(trainer, rank, step, local_copies=None):
    """Test hook: `$DFM_DUMP_WEIGHTS/rank-<r>.npz` with every model variable, by position (`vNN`), and
    with `local_copies(var)` (a mirrored variable's per-replica copies) the other copies as `vNN_cK`."""
    folder = os.environ.get(DUMP_WEIGHTS_ENV)
    if not folder:
        return None
    from deepfm_model import full_value

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank-{rank}.npz")
    arrays = {}
    for i, var in enumerate(trainer.model.all_variables):
        arrays[f"v{i:02d}"] = full_value(var).numpy()
        for k, copy in enumerate(local_copies(var)[1:] if local_copies else [], start=1):
            arrays[f"v{i:02d}_c{k}"] = copy.numpy()
    np.savez(path, step=step, **arrays)
    return path


def run(hp, env, trainer, collectives, where, train_step_fn=None, eval_step_fn=None, batch_size=None):
    """Restore (rank 0) -> broadcast -> train -> final checkpoint -> evaluate -> export (rank 0).
    `batch_size`: examples one step of this worker consumes (default hp.batch_size)."""
    keeper = None
    if where.rank == 0:
        keeper = rt.CheckpointKeeper(trainer, rt.checkpoint_dir(hp, env), hp.checkpoint_steps)
        keeper.restore_latest()
    collectives.broadcast(model_state(trainer))
    start = int(trainer.optimizer.iterations.numpy())
    step = train(hp, env, trainer, collectives, where, keeper, train_step_fn, batch_size)
    if where.rank == 0:
        rt.log(f"trained steps {start}..{step} on {where.size} workers")
        if step == start and not (hp.max_steps and step >= hp.max_steps):
            rt.log("warning: no step trained: some worker's shard holds less than one whole batch")
    if keeper is not None:
        keeper.maybe_save(step, force=True)
    evaluate(hp, env, trainer, collectives, where, step, eval_step_fn)
    dump_weights(trainer, where.rank, step, getattr(collectives, "local_copies", None))
    if where.rank == 0 and hp.export:
        rt.export_saved_model(trainer.model, hp, env.model_dir)
    return step
