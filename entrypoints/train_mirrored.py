"""DeepFM with MultiWorkerMirroredStrategy (SageMaker `distribution={"multi_worker_mirrored_strategy":
{"enabled": True}}`): one worker process per host, one replica per local GPU inside it.

The container toolkit sets TF_CONFIG = {"cluster": {"worker": ["algo-1:8890", ...]}, "task": {"type":
"worker", "index": i}}; without it (a plain run) the same layout is built from SM_HOSTS. The strategy
finds every GPU the worker sees (none: one replica on the CPU) and supplies the all-reduce.

Each step a worker reads `batch_size x local replicas` examples and gives each local replica its own
`batch_size` slice. Every replica computes gradients on its slice; they are averaged over all replicas
of all hosts (IndexedSlices of the embedding tables stay sparse), and each replica applies that same
update to its own copy of the variables (mirrored: one copy per local device), so the copies start
equal (rank 0's values broadcast) and stay equal. Scaling, stated:
- per-replica batch = batch_size; global batch = batch_size x replicas (replicas = hosts x local GPUs);
- learning rate = learning_rate x replicas when scale_lr (the default), else learning_rate unchanged.
The loop (uneven shards, rank-0 checkpoints and export, sharded evaluation) is deepfm_sync's, shared
with the Horovod script; its collectives here count workers (one contribution per host), not replicas.
"""

import json
import os
import sys

import deepfm_hparams
import deepfm_runtime as rt
import deepfm_sync

MWMS_PORT = 8890  # the port sagemaker-tensorflow-training gives every worker


def tf_config_from_hosts(hosts, current_host, port=MWMS_PORT):
    return {"cluster": {"worker": [f"{host}:{port}" for host in hosts]},
            "task": {"type": "worker", "index": hosts.index(current_host)}, "environment": "cloud"}


class MirroredCollectives:
    """Collectives over the strategy's workers; each worker may hold several local replicas."""

    def __init__(self, strategy, rank):
        import tensorflow as tf

        self.tf, self.strategy = tf, strategy
        self.local_replicas = len(strategy.extended.worker_devices)
        self.replicas = strategy.num_replicas_in_sync
        self.rank, self.size = rank, self.replicas // self.local_replicas
        self._sum = tf.function(lambda t: strategy.run(self._worker_sum, args=(t,)))

    def local_index(self):
        """This replica's index among its worker's replicas (a worker's replicas are numbered
        consecutively in the sync group); inside strategy.run only."""
        return self.tf.distribute.get_replica_context().replica_id_in_sync_group % self.local_replicas

    def _worker_sum(self, tensor):
        tf = self.tf
        # identity() places the value on this replica's device; an argument has none to reduce to.
        local = tf.identity(tensor)
        if self.local_replicas > 1:  # one contribution per worker, not one per local replica
            local = tf.where(self.local_index() == 0, local, tf.zeros_like(local))
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)

    def average_gradients(self, grads):
        present = [g for g in grads if g is not None]
        averaged = iter(self.tf.distribute.get_replica_context().all_reduce(self.tf.distribute.ReduceOp.MEAN,
                                                                            present))
        return [None if g is None else next(averaged) for g in grads]

    def local_copies(self, variable):
        return list(self.strategy.experimental_local_results(variable))

    def _local(self, value):
        return self.strategy.experimental_local_results(value)[0]

    def all_have(self, flag):
        total = self._local(self._sum(self.tf.constant([1.0 if flag else 0.0])))
        return int(round(float(total.numpy()[0]))) == self.size

    def sum(self, tensor):
        return self._local(self._sum(tensor)).numpy()

    def broadcast(self, variables):
        """No broadcast in the strategy's API: sum rank 0's values with everyone else's zeros, all
        variables packed into one float64 vector (exact for float32 and for step counters); the
        assignment, outside any replica, sets every local copy."""
        tf = self.tf
        packed = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in variables], axis=0)
        if self.rank != 0:
            packed = tf.zeros_like(packed)
        total = self._local(self._sum(packed))
        sizes = [int(tf.size(v)) for v in variables]
        for var, part in zip(variables, tf.split(total, sizes)):
            var.assign(tf.reshape(tf.cast(part, var.dtype), var.shape))


def replica_train_step(trainer, collectives, batch_size):
    """-> step(batch of batch_size x local replicas): each local replica trains on its own slice."""
    tf = collectives.tf

    def replica_step(batch):
        start = collectives.local_index() * batch_size
        return trainer.train_step(tf.nest.map_structure(lambda t: t[start:start + batch_size], batch))

    return tf.function(lambda batch: collectives.strategy.run(replica_step, args=(batch,)))


def main(argv):
    hp = deepfm_hparams.parse_or_exit(argv, prog="train_mirrored.py")
    env = rt.load_env()
    rt.check_environment_or_exit(env, prog="train_mirrored.py")
    if "TF_CONFIG" not in os.environ and env.num_hosts > 1:
        os.environ["TF_CONFIG"] = json.dumps(tf_config_from_hosts(env.hosts, env.current_host))
    rt.set_thread_environment(hp, env)

    import tensorflow as tf

    compute_dtype = rt.configure_tensorflow(hp, env)  # thread pools, GPU memory growth: before the strategy
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any other TensorFlow op
    resolver = strategy.cluster_resolver
    rank = resolver.task_id if resolver is not None and resolver.task_type else 0
    collectives = MirroredCollectives(strategy, rank)
    # One process per host: workers are hosts, so the shard table sees hosts x 1.
    where = deepfm_sync.Placement(rank, collectives.size, collectives.size)
    learning_rate = hp.learning_rate * (collectives.replicas if hp.scale_lr else 1)

    from deepfm_model import build_trainer

    trainer = build_trainer(hp, strategy, compute_dtype=compute_dtype, learning_rate=learning_rate,
                            grad_transform=collectives.average_gradients, process_metrics=True)
    if rank == 0:
        rt.log(f"multi_worker_mirrored workers={collectives.size} local_replicas={collectives.local_replicas} "
               f"replicas={collectives.replicas} per_replica_batch={hp.batch_size} "
               f"global_batch={hp.batch_size * collectives.replicas} learning_rate={learning_rate:g} "
               f"(scale_lr={hp.scale_lr}) devices={','.join(strategy.extended.worker_devices)} "
               f"TF_CONFIG={os.environ.get('TF_CONFIG', '')}")
    deepfm_sync.run(hp, env, trainer, collectives, where,
                    train_step_fn=replica_train_step(trainer, collectives, hp.batch_size),
                    batch_size=hp.batch_size * collectives.local_replicas)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
