"""DeepFM with Horovod (SageMaker `distribution={"mpi": ...}`): one process per GPU, or several per
CPU host, each training a full copy on its own shard, gradients averaged every step.

The six steps a Horovod script takes: hvd.init(); pin the GPU to the local rank; scale the learning
rate by the number of workers (`scale_lr`); average gradients with hvd.allreduce (IndexedSlices of the
embedding tables are all-gathered, so sparse updates stay sparse); broadcast rank 0's variables after
init or restore; checkpoints, metric lines and export on rank 0 only. The run itself is deepfm_sync.run
(the one training loop, deepfm_loop, with the synchronous steps).

Horovod's Keras DistributedOptimizer and callbacks are not used: with Keras 3 they silently stop
averaging; explicit allreduce and broadcast work on every TensorFlow version.
"""

import importlib.util
import json
import os
import sys

import deepfm_sync
from deepfm_container import start_or_exit

from deepfm_log import log, log_peak_memory
from deepfm_tuning import configure_tensorflow, per_process_threads, pin_gpu, set_thread_environment
from deepfm_worker_input import Placement

PROG = "train_horovod.py"


def _launcher_size(environ):
    """Total ranks as mpirun (Open MPI) or horovodrun (gloo) tell them, before Horovod starts."""
    for name in ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"):
        if environ.get(name):
            return int(environ[name])
    return 1


def horovod_problem():
    if importlib.util.find_spec("horovod") is None:
        return (
            "this TensorFlow has no Horovod (SageMaker's TensorFlow images ship it up to 2.12): use a "
            "TF 2.12 image, or distribution multi_worker_mirrored (train_mirrored.py)"
        )
    return None


def main(argv):
    hp, env = start_or_exit(argv, PROG, image_problem=horovod_problem)
    ranks_per_host = max(1, _launcher_size(os.environ) // env.num_hosts)
    hp = per_process_threads(hp, env.num_cpus, ranks_per_host, ["Horovod rank"] * ranks_per_host)
    set_thread_environment(hp, env)  # before TensorFlow starts

    import horovod.tensorflow as hvd
    from deepfm_collectives import HorovodCollectives

    hvd.init()  # 1
    pin_gpu(hvd.local_rank())  # 2
    compute_dtype = configure_tensorflow(hp, env)
    where = Placement(hvd.rank(), hvd.size(), env.num_hosts)
    collectives = HorovodCollectives(hvd)
    trainer, learning_rate = deepfm_sync.build_sync_trainer(hp, collectives, compute_dtype)  # 3 and 4
    if where.rank == 0:
        log(
            f"horovod size={hvd.size()} hosts={env.num_hosts} local_size={hvd.local_size()} "
            f"learning_rate={learning_rate:g} (scale_lr={hp.scale_lr}) "
            f"sparse_allreduce={deepfm_sync.sparse_allreduce(hp, collectives)} "
            f"hyperparameters={json.dumps(vars(hp), sort_keys=True, default=str)}"
        )
    deepfm_sync.run(hp, env, trainer, collectives, where)  # 5 (broadcast) and 6 (rank 0 saves) inside
    log_peak_memory(f"rank {where.rank}", env.current_host)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
