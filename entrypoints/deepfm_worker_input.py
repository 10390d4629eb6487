"""What one worker reads: its place among the hosts (`Placement`), its training channels, input mode
and shard (the shard table of deepfm_input applied to the container), and its datasets.

deepfm_input (and with it TensorFlow) is imported inside the functions: importing this module must not
start TensorFlow before the thread environment is set.
"""

import math
import os

from deepfm_container import input_mode, resolve_s3_shard
from deepfm_log import log


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
        return (
            f"rank={self.rank}/{self.size} host={self.host_index}/{self.num_hosts} "
            f"local_rank={self.local_rank}/{self.workers_per_host}"
        )


ALONE = Placement(0, 1, 1)  # one worker on one host: reads everything


def training_input(hp, env, where):
    """-> (channels, input mode, multi_path, s3_shard, (num_shards, index)) of this worker's training data."""
    import deepfm_input as di

    channels = di.training_channels(env.channels, where.workers_per_host, where.local_rank)
    multi_path = di.is_multi_path(env.channels)
    mode = input_mode(env, channels)
    if mode.lower() == "pipe" and not multi_path and where.workers_per_host > 1:
        raise ValueError(
            f"Pipe mode with {where.workers_per_host} workers per host needs one training channel "
            "per worker (train, train-1, ...): a FIFO can be read by one process only"
        )
    s3_shard = resolve_s3_shard(hp, env, channels)
    shards = di.shard_for(
        where.num_hosts, where.host_index, where.workers_per_host, where.local_rank, multi_path, s3_shard
    )
    return channels, mode, multi_path, s3_shard, shards


def input_config(hp, env, mode, rank):
    import deepfm_input as di

    # PipeModeDataset counts epochs per channel in its state dir; one dir per rank keeps them apart.
    return di.config_from_hparams(
        hp, mode, env.data_dir, env.config_dir, os.path.join(env.pipe_state_dir, f"rank-{rank}")
    )


def train_dataset(hp, env, where, skip_batches=0, whole_batches=True, epoch=None):
    """This worker's training batches of hp.batch_size:
    hp.epochs passes, or with `epoch` that epoch's pass alone (shuffled in an order of its own).
    whole_batches: drop each epoch's last partial batch, so every step has the same shapes on every
    worker and replica (one trace, no ragged tail)."""
    import deepfm_input as di

    channels, mode, multi_path, s3_shard, shards = training_input(hp, env, where)
    log(
        f"{where} channels={','.join(channels)} mode={mode} multi_path={multi_path} s3_shard={s3_shard} "
        f"shard={shards[1]}/{shards[0]}"
    )
    return di.make_dataset(
        input_config(hp, env, mode, where.rank),
        channels,
        *shards,
        training=True,
        epochs=hp.epochs if epoch is None else 1,
        skip_batches=skip_batches,
        drop_remainder=whole_batches,
        seed=where.rank + 7919 * (epoch or 0),
    )


def eval_dataset(hp, env, where):
    """This worker's part of `eval`; None when it reads none (Pipe mode: rank 0 alone reads the FIFO)."""
    import deepfm_input as di

    mode = env.input_mode(di.EVAL_CHANNEL)
    if mode.lower() == "pipe":
        if where.rank != 0:
            return None
        shards = (1, 0)
    else:
        s3_shard = resolve_s3_shard(hp, env, [di.EVAL_CHANNEL])
        shards = di.shard_for(
            where.num_hosts, where.host_index, where.workers_per_host, where.local_rank, False, s3_shard
        )
    dataset = di.make_dataset(input_config(hp, env, mode, where.rank), [di.EVAL_CHANNEL], *shards, training=False)
    if hp.eval_batches:
        dataset = dataset.take(math.ceil(hp.eval_batches / where.size))
    return dataset


def worker_eval_shard(env, where):
    """A parameter-server worker's share of `eval` when the workers evaluate: -> (has_eval, num_shards, index).
    has_eval: its host holds `eval` as files (a Pipe-mode `eval` is the chief's). The shard is that of an
    S3-sharded `eval` (the host's objects split among its workers); the chief splits a replicated one among
    the workers that have it (deepfm_ps_eval.WorkerEvaluation)."""
    import deepfm_input as di

    if di.EVAL_CHANNEL not in env.channels or env.input_mode(di.EVAL_CHANNEL).lower() == "pipe":
        return False, 1, 0
    return True, where.workers_per_host, where.local_rank
