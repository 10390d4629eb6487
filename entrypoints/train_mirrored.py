"""DeepFM with MultiWorkerMirroredStrategy (SageMaker `distribution={"multi_worker_mirrored_strategy":
{"enabled": True}}`): one worker process per host, gradients averaged with TensorFlow's collectives.

The container toolkit sets TF_CONFIG = {"cluster": {"worker": ["algo-1:8890", ...]}, "task": {"type":
"worker", "index": i}}; without it (a plain run) the same layout is built from SM_HOSTS. The strategy
supplies the cluster and its all-reduce; the model's variables stay plain per-worker variables that
start equal (seeded init, then rank 0's values broadcast) and get identical averaged updates: the
same scheme, and the same shared loop (deepfm_sync), as the Horovod script. One replica per worker
(the first GPU when there is one).
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
    """Collectives over the strategy's workers (one replica each)."""

    def __init__(self, strategy, rank):
        import tensorflow as tf

        self.tf, self.strategy = tf, strategy
        self.rank, self.size = rank, strategy.num_replicas_in_sync
        self._sum = tf.function(lambda t: strategy.run(self._replica_sum, args=(t,)))

    def _replica_sum(self, tensor):
        # identity() places the value on this replica's device; an argument has none to reduce to.
        local = self.tf.identity(tensor)
        return self.tf.distribute.get_replica_context().all_reduce(self.tf.distribute.ReduceOp.SUM, local)

    def average_gradients(self, grads):
        present = [g for g in grads if g is not None]
        averaged = iter(self.tf.distribute.get_replica_context().all_reduce(self.tf.distribute.ReduceOp.MEAN,
                                                                            present))
        return [None if g is None else next(averaged) for g in grads]

    def _local(self, value):
        return self.strategy.experimental_local_results(value)[0]

    def all_have(self, flag):
        total = self._local(self._sum(self.tf.constant([1.0 if flag else 0.0])))
        return int(round(float(total.numpy()[0]))) == self.size

    def sum(self, tensor):
        return self._local(self._sum(tensor)).numpy()

    def broadcast(self, variables):
        """No broadcast in the strategy's API: sum rank 0's values with everyone else's zeros, all
        variables packed into one float64 vector (exact for float32 and for step counters)."""
        tf = self.tf
        packed = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in variables], axis=0)
        if self.rank != 0:
            packed = tf.zeros_like(packed)
        total = self._local(self._sum(packed))
        sizes = [int(tf.size(v)) for v in variables]
        for var, part in zip(variables, tf.split(total, sizes)):
            var.assign(tf.reshape(tf.cast(part, var.dtype), var.shape))

def main(argv):
    hp = deepfm_hparams.parse_or_exit(argv, prog="train_mirrored.py")
    env = rt.load_env()
    if "TF_CONFIG" not in os.environ and env.num_hosts > 1:
        os.environ["TF_CONFIG"] = json.dumps(tf_config_from_hosts(env.hosts, env.current_host))
    rt.set_thread_environment(hp, env)

    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[0], "GPU")
    compute_dtype = rt.configure_tensorflow(hp, env)  # thread pools: before the strategy starts the runtime
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any other TensorFlow op
    resolver = strategy.cluster_resolver
    rank = resolver.task_id if resolver is not None and resolver.task_type else 0
    collectives = MirroredCollectives(strategy, rank)
    # One process per host: workers are hosts, so the shard table sees hosts x 1.
    where = deepfm_sync.Placement(rank, collectives.size, collectives.size)
    learning_rate = hp.learning_rate * (collectives.size if hp.scale_lr else 1)

    from deepfm_model import build_trainer

    trainer = build_trainer(hp, compute_dtype=compute_dtype, learning_rate=learning_rate,
                            grad_transform=collectives.average_gradients)
    if rank == 0:
        rt.log(f"multi_worker_mirrored workers={collectives.size} learning_rate={learning_rate:g} "
               f"TF_CONFIG={os.environ.get('TF_CONFIG', '')}")
    train_step = tf.function(lambda batch: strategy.run(trainer.train_step, args=(batch,)))
    deepfm_sync.run(hp, env, trainer, collectives, where, train_step_fn=train_step)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
