"""DeepFM with SageMaker's parameter-server distribution, or plainly on one host (no TF_CONFIG).

Roles, from the TF_CONFIG the SageMaker TensorFlow toolkit writes (`master` = first host, `ps` on
every host at 2223 started by the toolkit itself, `worker` = the other hosts at 2222):
- master -> renamed chief: ParameterServerStrategy + ClusterCoordinator; schedules the training steps,
  evaluates on `eval`, checkpoints and exports. It also starts one worker task of its own (a child
  process at a free port, appended to the cluster) so that the master host's share of the data is
  trained on too; DFM_PS_CHIEF_WORKER=0 turns that off.
- worker: serves a tf.distribute.Server and exits once the chief's port has gone away.
- ps (only when a launcher other than the toolkit starts it through this script): same, as a ps.

Under the strategy the dataset function is traced on the chief and runs on each worker: it reads the
worker's own host files through paths relative to the worker's working directory (its
SAGEMAKER_BASE_DIR) and its shard from a small file the worker writes there before serving.
"""

import json
import os
import socket
import subprocess
import sys
import time
import traceback

import deepfm_hparams
import deepfm_runtime as rt

SHARD_FILE = "dfm-worker-shard.txt"  # "<num_shards> <index> <task index>", in the worker's base dir
CHIEF_WORKER_ENV = "DFM_PS_CHIEF_WORKER"


def main(argv):
    hp = deepfm_hparams.parse_or_exit(argv, prog="train_ps.py")
    env = rt.load_env()
    rt.check_environment_or_exit(env, prog="train_ps.py")
    rt.set_thread_environment(hp, env)
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = tf_config.get("cluster", {})
    if not cluster or sum(len(v) for v in cluster.values()) <= 1:
        return train_single_host(hp, env)
    cluster, task_type, task_index = rename_master(cluster, tf_config["task"])
    if task_type in ("worker", "ps"):
        return serve_until_chief_done(hp, env, cluster, task_type, task_index)
    return train_chief(hp, env, cluster, argv)


def rename_master(cluster, task):
    """TF2's ParameterServerStrategy knows `chief`, not TF1's `master`."""
    cluster = {("chief" if job == "master" else job): list(addrs) for job, addrs in cluster.items()}
    task_type = "chief" if task["type"] == "master" else task["type"]
    return cluster, task_type, int(task["index"])


def training_input(hp, env, num_hosts, host_index):
    """(channels, input mode, num_shards, index) for the one worker of this host."""
    import deepfm_input

    channels = deepfm_input.training_channels(env.channels, 1, 0)
    shards = deepfm_input.shard_for(num_hosts, host_index, 1, 0, deepfm_input.is_multi_path(env.channels),
                                    rt.resolve_s3_shard(hp, env, channels))
    return channels, rt.input_mode(env, channels), shards[0], shards[1]


def train_single_host(hp, env):
    compute_dtype = rt.configure_tensorflow(hp, env)
    import tensorflow as tf
    import deepfm_input
    import deepfm_model

    channels, mode, num_shards, index = training_input(hp, env, 1, 0)
    rt.log(f"single host: channels={channels} mode={mode} shard={index}/{num_shards} optimizer={hp.optimizer}")
    trainer = deepfm_model.build_trainer(hp, compute_dtype=compute_dtype)
    keeper = rt.CheckpointKeeper(trainer, rt.checkpoint_dir(hp, env), hp.checkpoint_steps)
    step = keeper.restore_latest()
    cfg = deepfm_input.config_from_hparams(hp, mode, env.data_dir, env.config_dir, env.pipe_state_dir)
    dataset = deepfm_input.make_dataset(cfg, channels, num_shards, index, training=True, epochs=hp.epochs,
                                        skip_batches=step)
    train_step = tf.function(trainer.train_step)
    train_log = rt.TrainLog(trainer.train_metrics)
    if not (hp.max_steps and step >= hp.max_steps):
        for batch in dataset:
            train_step(batch)
            step += 1
            if step % hp.log_steps == 0:
                train_log.report(step)
            keeper.maybe_save(step)
            if hp.max_steps and step >= hp.max_steps:
                break
    train_log.report(step)
    keeper.maybe_save(step, force=True)
    finish(hp, env, trainer, step, tf.function(trainer.eval_step))
    return 0


def finish(hp, env, trainer, step, eval_step):
    """Evaluate on `eval` (when given) and export."""
    import deepfm_input

    if deepfm_input.EVAL_CHANNEL in env.channels:
        mode = env.input_mode(deepfm_input.EVAL_CHANNEL)
        cfg = deepfm_input.config_from_hparams(hp, mode, env.data_dir, env.config_dir, env.pipe_state_dir)
        rt.evaluate(trainer, deepfm_input.make_dataset(cfg, [deepfm_input.EVAL_CHANNEL], training=False),
                    step, hp.eval_steps, eval_step)
    if hp.export:
        rt.export_saved_model(trainer.model, hp, env.model_dir)


def chief_runs_worker():
    return os.environ.get(CHIEF_WORKER_ENV, "1").lower() not in ("0", "false", "no")


def training_hosts(env):
    """Hosts that run a worker task: all, or all but the master when its own worker is off."""
    return list(env.hosts) if chief_runs_worker() else list(env.hosts[1:])


def serve_until_chief_done(hp, env, cluster, task_type, task_index):
    rt.configure_tensorflow(hp, env)
    import tensorflow as tf

    if task_type == "worker":
        hosts = training_hosts(env)
        channels, mode, num_shards, index = training_input(hp, env, len(hosts), hosts.index(env.current_host))
        if mode.lower() == "pipe":
            import sagemaker_tensorflow  # noqa: F401  registers the PipeModeDataset op in this server
        os.makedirs(env.pipe_state_dir, exist_ok=True)
        with open(os.path.join(env.base_dir, SHARD_FILE), "w") as f:
            f.write(f"{num_shards} {index} {task_index}\n")
        os.chdir(env.base_dir)  # the chief's dataset function uses paths relative to this
        rt.log(f"worker {task_index} on {env.current_host}: channels={channels} mode={mode} "
               f"shard={index}/{num_shards}")
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=task_type, task_index=task_index,
                                  protocol="grpc", start=True)
    chief_host, chief_port = cluster["chief"][0].rsplit(":", 1)
    rt.log(f"{task_type} {task_index} serving {server.target}; waiting for the chief at {chief_host}:{chief_port}")
    seen = rt.wait_until_gone(chief_host, chief_port)
    rt.log(f"{task_type} {task_index}: chief {'finished' if seen else 'never appeared'}; exiting")
    rt.exit_now(0 if seen else 1)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start_chief_worker(cluster, argv):
    """The master host's own worker task: a child process at a free port, appended to `worker`."""
    chief_host = cluster["chief"][0].rsplit(":", 1)[0]
    cluster = dict(cluster, worker=list(cluster.get("worker", [])) + [f"{chief_host}:{free_port()}"])
    tf_config = {"cluster": cluster, "task": {"type": "worker", "index": len(cluster["worker"]) - 1}}
    child_env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + list(argv), env=child_env)
    return cluster, child


def wait_for_tasks(cluster, timeout=600.0):
    pending = [a for job, addrs in cluster.items() if job != "chief" for a in addrs]
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pending = [a for a in pending if not rt.port_open(*a.rsplit(":", 1))]
        if pending:
            time.sleep(0.5)
    if pending:
        raise RuntimeError(f"cluster tasks never came up: {pending}")


def train_chief(hp, env, cluster, argv):
    child = None
    try:
        if chief_runs_worker():
            cluster, child = start_chief_worker(cluster, argv)
        if not cluster.get("worker"):
            raise RuntimeError("no worker task: with DFM_PS_CHIEF_WORKER=0 a single host cannot train")
        wait_for_tasks(cluster)
        return train_with_coordinator(hp, env, cluster)
    finally:
        if child is not None:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def embedding_partitioner(hp, num_ps):
    """Split only the two embedding tables (rows = feature_size) across the ps tasks."""
    import tensorflow as tf

    by_size = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10,
                                                                          max_shards=num_ps)

    def partition(shape, dtype):
        if shape.rank and shape[0] == hp.feature_size:
            return by_size(shape, dtype)
        return [1] * max(shape.rank, 1)

    return partition


def train_with_coordinator(hp, env, cluster):
    rt.configure_tensorflow(hp, env)  # CPU chief: float32 (PS workers are CPU hosts)
    import tensorflow as tf
    import deepfm_input
    import deepfm_model

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=embedding_partitioner(hp, len(cluster["ps"])))
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    trainer = deepfm_model.build_trainer(hp, strategy=strategy)
    shards = len(deepfm_model.flat_variables([trainer.model.embeddings]))
    rt.log(f"chief: {len(cluster['worker'])} workers, {len(cluster['ps'])} ps; embeddings in {shards} shard(s)")
    keeper = rt.CheckpointKeeper(trainer, rt.checkpoint_dir(hp, env), hp.checkpoint_steps,
                                 io_device="/job:chief/replica:0/task:0/device:CPU:0")
    step = keeper.restore_latest()

    channels, mode = training_input(hp, env, 1, 0)[:2]  # each worker's shard comes from its SHARD_FILE
    cfg = deepfm_input.config_from_hparams(hp, mode, "input/data", env.config_dir, "pipe_state")
    skip = step // len(cluster["worker"])  # resume: each worker skips its share of the steps done

    def read_worker_shard_file():  # runs on a worker: [num_shards, index, task index]
        # decode_csv, not tf.strings.split: a split builds a ragged tensor whose shapes depend on the
        # content, and graph shape inference evaluates such small subgraphs while tracing, so the
        # ReadFile ran on the chief, in its cwd where the file is absent (NOT_FOUND warnings). With
        # decode_csv's static shape the file is read only on the worker that runs the function.
        fields = tf.io.decode_csv(tf.strings.strip(tf.io.read_file(SHARD_FILE)),
                                  [tf.constant(0, tf.int64)] * 3, field_delim=" ")
        return tf.stack(fields)

    def dataset_fn():
        shard = read_worker_shard_file()
        return deepfm_input.make_dataset(cfg, channels, shard[0], shard[1], training=True, epochs=hp.epochs,
                                         skip_batches=skip)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def worker_step(it):
        # A worker whose data is used up answers with its task index instead of raising
        # OutOfRangeError, which would cancel the closures of workers that still have data.
        batch = it.get_next_as_optional()
        if batch.has_value():
            strategy.run(trainer.train_step, args=(batch.get_value(),))
            return tf.constant(-1, tf.int64)
        return read_worker_shard_file()[2]

    train_log = rt.TrainLog(trainer.train_metrics)
    finished_workers = set()
    done = bool(hp.max_steps and step >= hp.max_steps)
    while not done:
        todo = min(hp.log_steps - step % hp.log_steps, hp.checkpoint_steps - step % hp.checkpoint_steps)
        if hp.max_steps:
            todo = min(todo, hp.max_steps - step)
        results = [coordinator.schedule(worker_step, args=(iterator,)) for _ in range(todo)]
        coordinator.join()
        previous, step = step, int(trainer.optimizer.iterations.numpy())
        if step - previous < todo:  # some closures found no data: note which workers are done
            finished_workers.update(int(r.fetch()) for r in results)
            finished_workers.discard(-1)
        exhausted = len(finished_workers) >= len(cluster["worker"])
        if exhausted:
            rt.log("training data exhausted on every worker")
        if step // hp.log_steps > previous // hp.log_steps:
            train_log.report(step)
        keeper.maybe_save(step)
        done = exhausted or bool(hp.max_steps and step >= hp.max_steps)
    train_log.report(step)
    keeper.maybe_save(step, force=True)
    finish(hp, env, trainer, step, tf.function(trainer.eval_step))
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except SystemExit as done:  # a bad flag: parse_or_exit already said which
        code = done.code
    except BaseException:  # noqa: B902  a failed chief must not hang on the coordinator's threads
        traceback.print_exc()
        code = 1
    rt.exit_now(code or 0)
