"""Tuning of the process: OpenMP/KMP environment, TensorFlow thread pools, which GPU a process sees,
GPU memory growth and mixed precision. Every knob is logged once.

TensorFlow is imported inside the functions that need it: `set_thread_environment` must run before
TensorFlow starts its thread pools.
"""

import argparse
import os

from deepfm_log import log


def per_process_threads(hp, cpus, processes):
    """Thread pools left at 0 (= all vCPUs) get the host's vCPUs split over its processes."""
    share = max(1, cpus // max(1, processes))
    values = dict(vars(hp))
    for name in ("intra_op_threads", "inter_op_threads", "omp_num_threads"):
        values[name] = values[name] or share
    return argparse.Namespace(**values)


def set_thread_environment(hp, env):
    """KMP_AFFINITY / OMP_NUM_THREADS / KMP_SETTINGS: call before TensorFlow is imported. -> what was set."""
    values = {"OMP_NUM_THREADS": str(hp.omp_num_threads or env.num_cpus),
              "KMP_SETTINGS": "1" if hp.kmp_settings else "0"}
    if hp.kmp_affinity:  # empty: leave the OpenMP default
        values["KMP_AFFINITY"] = hp.kmp_affinity
    os.environ.update(values)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return values


def pin_gpu(local_rank):
    """One GPU per process (the one of this local rank), when the host has any."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")


def configure_tensorflow(hp, env):
    """Thread pools and the compute dtype (deepfm_precision); logs every knob once. -> compute dtype for the
    MLP. Every task of a job decides alike: the steps' devices come from SM_NUM_GPUS (a parameter-server chief
    hides its GPUs but traces the steps its GPU workers run)."""
    import tensorflow as tf
    from deepfm_model import steps_run_on_gpus
    from deepfm_precision import choose, cpu_bfloat16_flag

    intra = hp.intra_op_threads or env.num_cpus
    inter = hp.inter_op_threads or env.num_cpus
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as err:  # pools already started (e.g. a second call in one process)
        log(f"thread pools already set: {err}")
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    dtype, why = choose(hp.mixed_precision, steps_run_on_gpus(), cpu_bfloat16_flag())
    log(f"tensorflow {tf.__version__} gpus={len(gpus)} vcpus={env.num_cpus}")
    log(f"precision: the MLP computes in {dtype} ({why}); variables, tables and optimizer slots stay float32")
    log(f"tuning intra_op_threads={intra} inter_op_threads={inter} "
        f"KMP_AFFINITY={os.environ.get('KMP_AFFINITY', '')} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
        f"KMP_SETTINGS={os.environ.get('KMP_SETTINGS')} mixed_precision={'off' if dtype == 'float32' else dtype} "
        f"shuffle_buffer={hp.shuffle_buffer} prefetch={hp.prefetch} cache={hp.cache}")
    return tf.as_dtype(dtype)
