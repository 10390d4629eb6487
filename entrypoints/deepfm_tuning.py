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


def configure_tensorflow(hp, env, float16_supported=True):
    """Thread pools and mixed precision; logs every knob once. -> compute dtype for the MLP.
    float16_supported=False: the caller's loop computes in float32 whatever mixed_precision says."""
    import tensorflow as tf

    intra = hp.intra_op_threads or env.num_cpus
    inter = hp.inter_op_threads or env.num_cpus
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as err:  # pools already started (e.g. a second call in one process)
        log(f"thread pools already set: {err}")
    gpus = tf.config.list_physical_devices("GPU")
    mixed = float16_supported and (hp.mixed_precision == "true" or (hp.mixed_precision == "auto" and bool(gpus)))
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    compute_dtype = tf.float16 if mixed else tf.float32
    log(f"tensorflow {tf.__version__} gpus={len(gpus)} vcpus={env.num_cpus}")
    log(f"tuning intra_op_threads={intra} inter_op_threads={inter} "
        f"KMP_AFFINITY={os.environ.get('KMP_AFFINITY', '')} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
        f"KMP_SETTINGS={os.environ.get('KMP_SETTINGS')} mixed_precision={'on' if mixed else 'off'} "
        f"shuffle_buffer={hp.shuffle_buffer} prefetch={hp.prefetch} cache={hp.cache}")
    return compute_dtype
