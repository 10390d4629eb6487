"""DeepFM with Horovod (SageMaker `distribution={"mpi": ...}`): one process per GPU, or several per
CPU host, each training a full copy on its own shard, gradients averaged every step.

Seed 001's six steps: hvd.init(); pin the GPU to the local rank; scale the learning rate by the number
of workers (`scale_lr`); average gradients with hvd.allreduce (IndexedSlices of the embedding tables are
all-gathered, so sparse updates stay sparse); broadcast rank 0's variables after init or restore;
checkpoints, metric lines and export on rank 0 only. The loop itself is deepfm_sync.run.

Horovod's Keras DistributedOptimizer and callbacks are not used: with Keras 3 they silently stop
averaging; explicit allreduce and broadcast work on every TensorFlow version.
"""

import importlib.util
import json
import os
import sys

import deepfm_hparams
import deepfm_runtime as rt
import deepfm_sync


def _launcher_size(environ):
    """Total ranks as mpirun (Open MPI) or horovodrun (gloo) tell them, before Horovod starts."""
    for name in ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"):
        if environ.get(name):
            return int(environ[name])
    return 1


class HorovodCollectives:
    def __init__(self, hvd):
        import tensorflow as tf

        self.hvd, self.tf = hvd, tf
        self.rank, self.size = hvd.rank(), hvd.size()

    def average_gradients(self, grads):
        hvd = self.hvd
        return [None if g is None else hvd.allreduce(g, op=hvd.Average, name=f"grad_{i}")
                for i, g in enumerate(grads)]

    def all_have(self, flag):
        have = self.hvd.allreduce(self.tf.constant([1 if flag else 0], self.tf.int32), op=self.hvd.Min,
                                  name="all_have_batch")
        return int(have.numpy()[0]) == 1

    def sum(self, tensor):
        return self.hvd.allreduce(tensor, op=self.hvd.Sum, name="metrics_sum").numpy()

    def broadcast(self, variables):
        self.hvd.broadcast_variables(variables, root_rank=0)


def main(argv):
    hp = deepfm_hparams.parse_or_exit(argv, prog="train_horovod.py")
    env = rt.load_env()
    rt.check_environment_or_exit(env, prog="train_horovod.py")
    if importlib.util.find_spec("horovod") is None:
        print("train_horovod.py: error: this TensorFlow has no Horovod (SageMaker's TensorFlow images ship it "
              "up to 2.12): use a TF 2.12 image, or distribution multi_worker_mirrored (train_mirrored.py)",
              file=sys.stderr, flush=True)
        return 1
    ranks_per_host = max(1, _launcher_size(os.environ) // env.num_hosts)
    hp = deepfm_sync.per_process_threads(hp, env.num_cpus, ranks_per_host)
    rt.set_thread_environment(hp, env)  # before TensorFlow starts

    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()  # 1
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:  # 2: one GPU per process
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    compute_dtype = rt.configure_tensorflow(hp, env)
    where = deepfm_sync.Placement(hvd.rank(), hvd.size(), env.num_hosts)
    learning_rate = hp.learning_rate * (hvd.size() if hp.scale_lr else 1)  # 3
    collectives = HorovodCollectives(hvd)

    from deepfm_model import build_trainer

    trainer = build_trainer(hp, compute_dtype=compute_dtype, learning_rate=learning_rate,
                            grad_transform=collectives.average_gradients)  # 4
    if where.rank == 0:
        rt.log(f"horovod size={hvd.size()} hosts={env.num_hosts} local_size={hvd.local_size()} "
               f"learning_rate={learning_rate:g} (scale_lr={hp.scale_lr}) "
               f"hyperparameters={json.dumps(vars(hp), sort_keys=True, default=str)}")
    deepfm_sync.run(hp, env, trainer, collectives, where)  # 5 (broadcast) and 6 (rank 0 saves) inside
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
