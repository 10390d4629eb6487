"""The parameter-server worker's shard file: what a worker writes before it serves (`write_worker_shard`) and
what the functions the chief traces read back on the worker (`read_worker_shard_file`), its fields by name.

Under ParameterServerStrategy the dataset and closure functions are traced on the chief and run on each worker;
they find the worker's share through this small file in the worker's working directory (its SAGEMAKER_BASE_DIR).
"""

import os

from deepfm_worker_input import Placement, training_input, worker_eval_shard

SHARD_FILE = "dfm-worker-shard.txt"
# its fields, in order: the training shard (count, index), the task, whether the host holds `eval`, the eval shard
FIELDS = NUM_SHARDS, SHARD_INDEX, TASK, HAS_EVAL, EVAL_SHARDS, EVAL_INDEX = range(6)


def write_worker_shard(hp, env, hosts, task_index, local_rank=0, workers_per_host=1, workdir=None):
    """On a worker, before it serves: its share of the data (task `local_rank` of `workers_per_host` on its
    host) in SHARD_FILE of its working directory (default: the base dir). -> (channels, mode, shards)."""
    from ps_gpu_workers import placement

    workdir = workdir or env.base_dir
    where = Placement(*placement(hosts, env.current_host, local_rank, workers_per_host))
    channels, mode, _, _, shards = training_input(hp, env, where)
    has_eval, eval_shards, eval_index = worker_eval_shard(env, where)
    os.makedirs(os.path.join(workdir, "pipe_state"), exist_ok=True)
    with open(os.path.join(workdir, SHARD_FILE), "w") as f:
        f.write(f"{shards[0]} {shards[1]} {task_index} {int(has_eval)} {eval_shards} {eval_index}\n")
    return channels, mode, shards


def read_worker_shard_file():
    """In a function that runs on a worker: SHARD_FILE's fields as an int64 vector.

    decode_csv, not tf.strings.split: a split builds a ragged tensor whose shapes depend on the content,
    and graph shape inference evaluates such small subgraphs while tracing, so the ReadFile ran on the
    chief, in its cwd where the file is absent (NOT_FOUND warnings). With decode_csv's static shape the
    file is read only on the worker that runs the function."""
    import tensorflow as tf

    fields = tf.io.decode_csv(
        tf.strings.strip(tf.io.read_file(SHARD_FILE)), [tf.constant(0, tf.int64)] * len(FIELDS), field_delim=" "
    )
    return tf.stack(fields)
