"""Tuning of the process: OpenMP/KMP environment, TensorFlow thread pools, which GPU a process sees,
GPU memory growth and mixed precision. Every knob is logged once.

TensorFlow is imported inside the functions that need it: `set_thread_environment` must run before
TensorFlow starts its thread pools.
"""

import argparse
import os

from deepfm_log import log


# The processes a host runs, as the parent process tells the ones it starts (comma-separated roles):
# a chief's own worker tasks belong to the chief's host, not to a worker host.
HOST_ROLES_ENV = "DFM_HOST_ROLES"
THREAD_KNOBS = ("intra_op_threads", "inter_op_threads", "omp_num_threads", "data_threads")


def per_process_threads(hp, cpus, processes, roles=None):
    """Thread pools left at 0 get the host's vCPUs split over the processes it runs (at least 1 each):
    TensorFlow's intra-op and inter-op pools, OpenMP, tf.data's private pool. Explicit values win.
    roles: what those processes are (for the log), e.g. ["ps server", "chief", "worker"]."""
    processes = max(1, processes)
    share = max(1, cpus // processes)
    values = dict(vars(hp))
    for name in THREAD_KNOBS:
        values[name] = values.get(name) or share
    what = f": {describe_roles(roles)}" if roles else ""
    values["thread_budget"] = f"{cpus} vCPUs / {processes} process{'es' if processes > 1 else ''} on this host{what}"
    return argparse.Namespace(**values)


def describe_roles(roles):
    counts = {}
    for role in roles:
        counts[role] = counts.get(role, 0) + 1
    return ", ".join(role if n == 1 else f"{n} {role}s" for role, n in counts.items())


# A tf.distribute.Server serves remote calls on its process's inter-op ("Compute") pool, and a handler holds a
# thread of it while the work it waits for needs another: with one thread the first step never finishes.
# TensorFlow sizes that pool from the process's CPU affinity, so a server confined to one core would get one.
SERVER_MIN_INTER_OP_THREADS = 2


def server_inter_op_threads(environ=None, cpus=None):
    """The inter-op pool size to give this process's tf.distribute.Server: 0 (TensorFlow's default: the
    cores this process may run on, or TF_NUM_INTEROP_THREADS) unless that default is below
    SERVER_MIN_INTER_OP_THREADS. cpus: how many cores this process may run on (default: its affinity)."""
    environ = os.environ if environ is None else environ
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        default = int(environ.get("TF_NUM_INTEROP_THREADS") or 0) or cpus
    except ValueError:
        default = cpus
    return SERVER_MIN_INTER_OP_THREADS if default < SERVER_MIN_INTER_OP_THREADS else 0


def server_config():
    """The session config for this process's tf.distribute.Server (None: TensorFlow's defaults)."""
    threads = server_inter_op_threads()
    if not threads:
        return None
    import tensorflow as tf

    log(f"server inter_op_threads={threads} (TensorFlow's default, from this process's cores, would be fewer)")
    return tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)


def roles_from_environment(environ=None):
    text = (os.environ if environ is None else environ).get(HOST_ROLES_ENV, "")
    return [role for role in text.split(",") if role] or None


def set_thread_environment(hp, env):
    """KMP_AFFINITY / OMP_NUM_THREADS / KMP_SETTINGS: call before TensorFlow is imported. -> what was set."""
    values = {
        "OMP_NUM_THREADS": str(hp.omp_num_threads or env.num_cpus),
        "KMP_SETTINGS": "1" if hp.kmp_settings else "0",
    }
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
    budget = getattr(hp, "thread_budget", None)
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
    log(
        f"tuning intra_op_threads={intra} inter_op_threads={inter} data_threads={hp.data_threads or 'default'} "
        f"KMP_AFFINITY={os.environ.get('KMP_AFFINITY', '')} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
        f"KMP_SETTINGS={os.environ.get('KMP_SETTINGS')} mixed_precision={'off' if dtype == 'float32' else dtype} "
        f"shuffle_buffer={hp.shuffle_buffer} prefetch={hp.prefetch} cache={hp.cache}"
        + (f" ({budget})" if budget else "")
    )
    return tf.as_dtype(dtype)
