"""What the entry points need from their surroundings: the SageMaker container environment, tuning
knobs, checkpoints (resume after a spot interruption), SavedModel export and metric log lines.

TensorFlow is imported inside the functions that need it: `set_thread_environment` must run before
TensorFlow starts its thread pools, so importing this module must not start TensorFlow.
"""

import importlib.util
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field

LOG_PREFIX = "[dfm]"


def log(message):
    print(f"{LOG_PREFIX} {message}", flush=True)


# ---- metric log lines (the launcher's METRIC_DEFINITIONS regexes are tested against these) ----

def format_metric(kind, step, loss, auc, examples_per_sec=None):
    """`[dfm] train step=<int> loss=<float> auc=<float> examples_per_sec=<float>` or
    `[dfm] eval step=<int> loss=<float> auc=<float>`."""
    if kind not in ("train", "eval"):
        raise ValueError(f"metric kind {kind!r} is not train or eval")
    line = f"{LOG_PREFIX} {kind} step={int(step)} loss={float(loss):.6f} auc={float(auc):.6f}"
    if kind == "train":
        line += f" examples_per_sec={float(examples_per_sec or 0.0):.1f}"
    return line


def format_exported(path):
    return f"{LOG_PREFIX} exported {path}"


# ---- the container environment ----

@dataclass(frozen=True)
class ContainerEnv:
    base_dir: str
    hosts: list
    current_host: str
    channels: list
    model_dir: str
    num_cpus: int
    input_data_config: dict = field(default_factory=dict)

    @property
    def num_hosts(self):
        return len(self.hosts)

    @property
    def data_dir(self):
        return os.path.join(self.base_dir, "input", "data")

    @property
    def config_dir(self):
        return os.path.join(self.base_dir, "input", "config")

    @property
    def pipe_state_dir(self):
        return os.path.join(self.base_dir, "pipe_state")

    def input_mode(self, channel):
        """File | FastFile | Pipe, as inputdataconfig.json says (File when it says nothing)."""
        return self.input_data_config.get(channel, {}).get("TrainingInputMode", "File")

    def s3_sharded(self, channel):
        return self.input_data_config.get(channel, {}).get("S3DistributionType") == "ShardedByS3Key"


def load_env(environ=None):
    """Read SAGEMAKER_BASE_DIR, SM_* and inputdataconfig.json the way the container provides them."""
    env = os.environ if environ is None else environ
    base = env.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    config_path = os.path.join(env.get("SM_INPUT_CONFIG_DIR", os.path.join(base, "input", "config")),
                               "inputdataconfig.json")
    input_config = {}
    if os.path.exists(config_path):
        with open(config_path) as f:
            input_config = json.load(f)
    hosts = json.loads(env.get("SM_HOSTS", '["algo-1"]'))
    current = env.get("SM_CURRENT_HOST", hosts[0])
    channels = json.loads(env["SM_CHANNELS"]) if "SM_CHANNELS" in env else sorted(input_config)
    return ContainerEnv(
        base_dir=base, hosts=hosts, current_host=current, channels=sorted(channels),
        model_dir=env.get("SM_MODEL_DIR", os.path.join(base, "model")),
        num_cpus=int(env.get("SM_NUM_CPUS") or os.cpu_count() or 1), input_data_config=input_config)


def resolve_s3_shard(hp, env, channels):
    """hyperparameter s3_shard: true/false force; auto = what inputdataconfig.json says."""
    if hp.s3_shard != "auto":
        return hp.s3_shard == "true"
    return all(env.s3_sharded(c) for c in channels)


def input_mode(env, channels):
    modes = {env.input_mode(c) for c in channels}
    if len(modes) > 1:
        raise ValueError(f"channels {channels} mix input modes {sorted(modes)}")
    return modes.pop()


PIPE_MODE_PACKAGE = "sagemaker_tensorflow"  # PipeModeDataset; in SageMaker's TensorFlow images up to 2.14


def pipe_mode_problem(env, find_spec=importlib.util.find_spec):
    """-> why this environment cannot read its Pipe-mode channels (no PipeModeDataset), or None."""
    piped = [c for c in env.channels if env.input_mode(c).lower() == "pipe"]
    if not piped or find_spec(PIPE_MODE_PACKAGE) is not None:
        return None
    return (f"channel(s) {', '.join(piped)} stream in Pipe mode, but this TensorFlow has no PipeModeDataset "
            "(package sagemaker-tensorflow, in SageMaker's TensorFlow images up to 2.14): use input mode "
            "File or FastFile, or an image of TensorFlow 2.14 or older")


def check_environment_or_exit(env, prog):
    """Exit 1 with the reason, before TensorFlow starts, when the job cannot run in this image:
    failing at once beats a cluster whose other tasks wait for a worker that died on an import."""
    problem = pipe_mode_problem(env)
    if problem:
        print(f"{prog}: error: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(1)


# ---- tuning knobs ----

def set_thread_environment(hp, env):
    """KMP_AFFINITY / OMP_NUM_THREADS / KMP_SETTINGS: call before TensorFlow is imported. -> what was set."""
    values = {"OMP_NUM_THREADS": str(hp.omp_num_threads or env.num_cpus),
              "KMP_SETTINGS": "1" if hp.kmp_settings else "0"}
    if hp.kmp_affinity:  # empty: leave the OpenMP default
        values["KMP_AFFINITY"] = hp.kmp_affinity
    os.environ.update(values)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return values


def configure_tensorflow(hp, env):
    """Thread pools and mixed precision; logs every knob once. -> compute dtype for the MLP."""
    import tensorflow as tf

    intra = hp.intra_op_threads or env.num_cpus
    inter = hp.inter_op_threads or env.num_cpus
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as err:  # pools already started (e.g. a second call in one process)
        log(f"thread pools already set: {err}")
    gpus = tf.config.list_physical_devices("GPU")
    mixed = hp.mixed_precision == "true" or (hp.mixed_precision == "auto" and bool(gpus))
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    compute_dtype = tf.float16 if mixed else tf.float32
    log(f"tensorflow {tf.__version__} gpus={len(gpus)} vcpus={env.num_cpus}")
    log(f"tuning intra_op_threads={intra} inter_op_threads={inter} "
        f"KMP_AFFINITY={os.environ.get('KMP_AFFINITY', '')} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
        f"KMP_SETTINGS={os.environ.get('KMP_SETTINGS')} mixed_precision={'on' if mixed else 'off'} "
        f"shuffle_buffer={hp.shuffle_buffer} prefetch={hp.prefetch} cache={hp.cache}")
    return compute_dtype


# ---- checkpoints ----

def checkpoint_dir(hp, env):
    """checkpoint_dir hyperparameter; else model_dir when it is a local/EFS path (not S3, not the
    model output dir); else $SAGEMAKER_BASE_DIR/checkpoints (synced to checkpoint_s3_uri)."""
    if hp.checkpoint_dir:
        return hp.checkpoint_dir
    model_dir = hp.model_dir
    if model_dir and "://" not in model_dir and os.path.abspath(model_dir) != os.path.abspath(env.model_dir):
        return model_dir
    return os.path.join(env.base_dir, "checkpoints")


class CheckpointKeeper:
    """tf.train.CheckpointManager around the trainer's model, optimizer (its `iterations` is the
    global step) and loss scale. io_device: under PS the chief writes every shard itself, so the
    directory need not be shared with the ps hosts."""

    def __init__(self, trainer, directory, every_steps, io_device=None, max_to_keep=3):
        import tensorflow as tf

        objects = {"model": trainer.model, "optimizer": trainer.optimizer}
        if trainer.loss_scale is not None:
            objects["loss_scale"] = trainer.loss_scale
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=max_to_keep)
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.every_steps, self.directory = every_steps, directory
        self.step_variable = trainer.optimizer.iterations
        self.last_saved = None

    def restore_latest(self):
        """-> the restored global step (0 when there is no checkpoint)."""
        latest = self.manager.latest_checkpoint
        if latest is None:
            log(f"no checkpoint in {self.directory}: starting at step 0")
            return 0
        self.checkpoint.restore(latest, options=self.options).assert_existing_objects_matched()
        step = int(self.step_variable.numpy())
        self.last_saved = step
        log(f"restored {latest}: continuing at step {step}")
        return step

    def maybe_save(self, step, force=False):
        """Save when `every_steps` were crossed since the last save (or force); -> path or None."""
        last = self.last_saved or 0
        due = step // self.every_steps > last // self.every_steps
        if step == self.last_saved or not (force or due):
            return None
        path = self.manager.save(checkpoint_number=step, options=self.options)
        self.last_saved = step
        log(f"checkpoint step={step} {path}")
        return path


# ---- export ----

def export_saved_model(model, hp, model_dir, version=None):
    """Copy the trained values into a plain, unpartitioned model and save it to
    `<model_dir>/<version>/` with a `serving_default` signature: feat_ids int64[None, field_size],
    feat_vals float32[None, field_size] -> probabilities float32[None]."""
    import tensorflow as tf
    from deepfm_model import build_model, full_value

    with tf.distribute.get_strategy().scope(), tf.device("/cpu:0"):
        local = build_model(hp)
    for dst, src in zip(local.all_variables, model.all_variables):
        dst.assign(full_value(src))

    class Serving(tf.Module):
        def __init__(self, deepfm):
            super().__init__()
            self.deepfm = deepfm

        @tf.function(input_signature=[tf.TensorSpec([None, hp.field_size], tf.int64, name="feat_ids"),
                                      tf.TensorSpec([None, hp.field_size], tf.float32, name="feat_vals")])
        def serve(self, feat_ids, feat_vals):
            return {"probabilities": self.deepfm.predict(feat_ids, feat_vals)}

    module = Serving(local)
    version = str(version if version is not None else int(time.time()))
    path = os.path.join(model_dir, version)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    print(format_exported(path), flush=True)
    return path


# ---- small process helpers shared by the distributed scripts ----

def port_open(host, port, timeout=1.0):
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as probe:
            # With nobody listening, the kernel may connect a loopback socket to itself when the port
            # is in the ephemeral range (free ports picked locally are).
            return probe.getsockname() != probe.getpeername()
    except OSError:
        return False


def wait_until_gone(host, port, appear_timeout=1800.0, poll=1.0):
    """Block until host:port has been reachable and then is not (the chief has finished); give up if it
    never appears within appear_timeout. -> True when it was seen going away."""
    start, seen = time.monotonic(), False
    while True:
        up = port_open(host, port)
        if up:
            seen = True
        elif seen:
            return True
        elif time.monotonic() - start > appear_timeout:
            return False
        time.sleep(poll)


def exit_now(code=0):
    """Leave without waiting on TensorFlow's server threads (server.join() never returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ---- metric windows and evaluation, shared by the training loops ----

class TrainLog:
    """Prints one train line per window from the trainer's streaming metrics, then resets them.
    examples_per_sec counts the examples the metrics saw since the previous line."""

    def __init__(self, metrics):
        self.metrics = metrics
        self.started = time.monotonic()

    def report(self, step):
        loss, auc, examples = self.metrics.result()
        now = time.monotonic()
        rate = examples / max(now - self.started, 1e-9)
        if examples:
            print(format_metric("train", step, loss, auc, rate), flush=True)
        self.metrics.reset()
        self.started = now
        return loss, auc


def evaluate(trainer, dataset, step, max_batches=0, step_fn=None):
    """Run the eval metrics over `dataset` (max_batches 0 = all), print the eval line; -> (loss, auc)."""
    import tensorflow as tf

    trainer.eval_metrics.reset()
    step_fn = step_fn or tf.function(trainer.eval_step)
    for i, batch in enumerate(dataset):
        if max_batches and i >= max_batches:
            break
        step_fn(batch)
    loss, auc, examples = trainer.eval_metrics.result()
    if examples:
        print(format_metric("eval", step, loss, auc), flush=True)
    else:
        log("eval channel is empty: no eval line")
    return loss, auc
