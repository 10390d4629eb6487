"""DeepFM with MultiWorkerMirroredStrategy (SageMaker `distribution={"multi_worker_mirrored_strategy":
{"enabled": True}}`): one worker process per host, one replica per local GPU inside it.

The container toolkit sets TF_CONFIG = {"cluster": {"worker": ["algo-1:8890", ...]}, "task": {"type":
"worker", "index": i}}; without it (a plain run) the same layout is built from SM_HOSTS. The strategy
finds every GPU the worker sees (none: one replica on the CPU) and supplies the all-reduce.

Each replica gets batches of its own: the worker's input pipeline (its host's shard, parsed on the host
CPU in batches of `batch_size`) hands consecutive batches to its local replicas in turn, each prefetched
onto the replica's device (distribute_datasets_from_function, fetch to device), so every GPU receives
only its own `batch_size` rows (a worker with no GPU and one replica reads its batches directly).
Every replica computes gradients on its batch; they are averaged over all replicas
of all hosts (IndexedSlices of the embedding tables stay sparse), and each replica applies that same
update to its own copy of the variables (mirrored: one copy per local device), so the copies start
equal (rank 0's values broadcast) and stay equal. Scaling, stated:
- per-replica batch = batch_size; global batch = batch_size x replicas (replicas = hosts x local GPUs);
- learning rate = learning_rate x replicas when scale_lr (the default), else learning_rate unchanged.
The steps (uneven shards, sharded evaluation) are deepfm_sync's, shared with the Horovod script, driven by
the one training loop (deepfm_loop: rank-0 checkpoints and export); its collectives
(deepfm_collectives.MirroredCollectives) count workers (one
contribution per host), not replicas.
"""

import json
import os
import sys

import deepfm_sync
from deepfm_container import start_or_exit

from deepfm_log import log, log_peak_memory
from deepfm_tuning import configure_tensorflow, per_process_threads, set_thread_environment
from deepfm_worker_input import Placement, train_dataset

PROG = "train_mirrored.py"
MWMS_PORT = 8890  # the port sagemaker-tensorflow-training gives every worker


def tf_config_from_hosts(hosts, current_host, port=MWMS_PORT):
    return {
        "cluster": {"worker": [f"{host}:{port}" for host in hosts]},
        "task": {"type": "worker", "index": hosts.index(current_host)},
        "environment": "cloud",
    }


def replica_input(hp, env, strategy, where, local_replicas, num_gpus):
    """-> train_input(skip_steps, epoch) for deepfm_sync.SyncSteps: a distributed dataset whose elements hold
    one `batch_size` batch per local replica, already on that replica's device. None (deepfm_sync's plain
    input) for a worker without GPUs and one replica: its batches are already where it runs, and the
    distributed input's machinery costs ~7% of small steps (316 vs 341 steps/s, MLP 64-32, batch 256). The worker's one
    pipeline (its
    host's shard, one Pipe-mode FIFO reader) batches at `batch_size`; its replicas take batches in turn,
    so a step trains on the same rows as one device would on `batch_size x local replicas` ones."""
    if local_replicas == 1 and not num_gpus:
        return None

    def train_input(skip_steps, epoch):
        return per_replica(
            strategy,
            lambda: train_dataset(hp, env, where, skip_batches=skip_steps * local_replicas, epoch=epoch),
            hp.batch_size,
        )

    return train_input


def per_replica(strategy, dataset_fn, batch_size):
    """dataset_fn() (whole per-replica batches, built once per worker) -> the distributed dataset whose steps give
    each local replica the next batch, fetched ahead onto its device, as (batch, real): it never ends
    (endless), so each step is a plain get_next from the replicas' own prefetch buffers."""
    import tensorflow as tf

    options = tf.distribute.InputOptions(
        experimental_fetch_to_device=True, experimental_replication_mode=tf.distribute.InputReplicationMode.PER_WORKER
    )
    return strategy.distribute_datasets_from_function(lambda _: endless(dataset_fn(), batch_size), options)


def endless(dataset, batch_size):
    """(batch, True) for each batch of `dataset`, then (a batch of zeros, False) forever. A distributed
    iterator over a dataset that ends pads a short step with empty batches and ends with an optional, whose
    value is read on one device; over an endless one each replica's batch comes from its own device.
    Every tensor with a batch dimension is stated to have `batch_size` rows (whole batches; raw-text
    parsing leaves the dimension unknown), so a step's batch has one shape in the traced loop."""
    import tensorflow as tf

    def whole(*batch):
        def rows(t):
            return tf.ensure_shape(t, [batch_size] + t.shape[1:].as_list()) if t.shape.rank else t

        return tf.nest.map_structure(rows, batch), True

    real = dataset.map(whole)
    filler = tf.nest.map_structure(
        lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype), real.element_spec[0]
    )
    return real.concatenate(tf.data.Dataset.from_tensors((filler, False)).repeat())


def replica_train_step(trainer, strategy):
    """-> step(per-replica batches): each replica trains on its own batch."""
    import tensorflow as tf

    return tf.function(lambda batch: strategy.run(trainer.train_step, args=(batch,)))


def main(argv):
    hp, env = start_or_exit(argv, PROG)
    if "TF_CONFIG" not in os.environ and env.num_hosts > 1:
        os.environ["TF_CONFIG"] = json.dumps(tf_config_from_hosts(env.hosts, env.current_host))
    hp = per_process_threads(hp, env.num_cpus, 1, ["MultiWorkerMirrored worker"])
    set_thread_environment(hp, env)

    import tensorflow as tf
    from deepfm_collectives import MirroredCollectives, communication_implementation, communication_options

    compute_dtype = configure_tensorflow(hp, env)  # thread pools, GPU memory growth: before the strategy
    num_gpus = len(tf.config.list_physical_devices("GPU"))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(  # before any other TensorFlow op
        communication_options=communication_options(tf, num_gpus)
    )
    resolver = strategy.cluster_resolver
    rank = resolver.task_id if resolver is not None and resolver.task_type else 0
    collectives = MirroredCollectives(strategy, rank)
    # One process per host: workers are hosts, so the shard table sees hosts x 1.
    where = Placement(rank, collectives.size, collectives.size)
    trainer, learning_rate = deepfm_sync.build_sync_trainer(hp, collectives, compute_dtype, strategy)
    if rank == 0:
        log(
            f"multi_worker_mirrored workers={collectives.size} local_replicas={collectives.local_replicas} "
            f"replicas={collectives.replicas} per_replica_batch={hp.batch_size} "
            f"global_batch={hp.batch_size * collectives.replicas} learning_rate={learning_rate:g} "
            f"(scale_lr={hp.scale_lr}) devices={','.join(strategy.extended.worker_devices)} "
            f"communication={communication_implementation(num_gpus)} "
            f"sparse_allreduce={deepfm_sync.sparse_allreduce(hp, collectives)} "
            f"TF_CONFIG={os.environ.get('TF_CONFIG', '')}"
        )
    deepfm_sync.run(
        hp,
        env,
        trainer,
        collectives,
        where,
        train_step_fn=replica_train_step(trainer, strategy),
        train_input=replica_input(hp, env, strategy, where, collectives.local_replicas, num_gpus),
    )
    log_peak_memory(f"rank {rank}", env.current_host)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
