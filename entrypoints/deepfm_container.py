"""The SageMaker container as a script sees it: SAGEMAKER_BASE_DIR, the SM_* variables and
inputdataconfig.json, read into a `ContainerEnv`; and the start of every entry point (hyperparameters
and environment read, or a one-line exit before TensorFlow starts).

No TensorFlow import: the thread environment must be set before TensorFlow starts its thread pools.
"""

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field

import deepfm_hparams
import deepfm_summaries
import deepfm_warm_start


@dataclass(frozen=True)
class ContainerEnv:
    base_dir: str
    hosts: list
    current_host: str
    channels: list
    model_dir: str
    num_cpus: int
    input_data_config: dict = field(default_factory=dict)
    num_gpus: int = 0  # SM_NUM_GPUS: the host's GPUs, whatever this process is pinned to
    job_name: str = ""  # TRAINING_JOB_NAME: a tuning trial's own name (its hyperparameters name the tuning job)
    tuning_trial: bool = False  # a trial of a tuning job: hyperparameters.json holds _tuning_objective_metric

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
    config_path = os.path.join(
        env.get("SM_INPUT_CONFIG_DIR", os.path.join(base, "input", "config")), "inputdataconfig.json"
    )
    input_config = {}
    if os.path.exists(config_path):
        with open(config_path) as f:
            input_config = json.load(f)
    hyperparameters_path = os.path.join(os.path.dirname(config_path), "hyperparameters.json")
    hyperparameters = {}
    if os.path.exists(hyperparameters_path):
        with open(hyperparameters_path) as f:
            hyperparameters = json.load(f)
    hosts = json.loads(env.get("SM_HOSTS", '["algo-1"]'))
    current = env.get("SM_CURRENT_HOST", hosts[0])
    channels = json.loads(env["SM_CHANNELS"]) if "SM_CHANNELS" in env else sorted(input_config)
    return ContainerEnv(
        base_dir=base,
        hosts=hosts,
        current_host=current,
        channels=sorted(channels),
        model_dir=env.get("SM_MODEL_DIR", os.path.join(base, "model")),
        num_cpus=int(env.get("SM_NUM_CPUS") or os.cpu_count() or 1),
        input_data_config=input_config,
        num_gpus=int(env.get("SM_NUM_GPUS") or 0),
        job_name=env.get("TRAINING_JOB_NAME", ""),
        tuning_trial="_tuning_objective_metric" in hyperparameters,
    )


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
    return (
        f"channel(s) {', '.join(piped)} stream in Pipe mode, but this TensorFlow has no PipeModeDataset "
        "(package sagemaker-tensorflow, in SageMaker's TensorFlow images up to 2.14): use input mode "
        "File or FastFile, or an image of TensorFlow 2.14 or older"
    )


def start_or_exit(argv, prog, image_problem=None):
    """-> (hyperparameters, ContainerEnv), or exit before TensorFlow starts: 2 naming a bad flag, 1 with
    the reason when the job cannot run in this image (Pipe mode without PipeModeDataset, or what
    `image_problem()` reports). Failing at once beats a cluster whose other tasks wait for a worker
    that died on an import."""
    hp = deepfm_hparams.parse_or_exit(argv, prog=prog)
    deepfm_summaries.configure(hp.tensorboard_dir)
    env = load_env()
    deepfm_warm_start.check_source_or_exit(hp, env)
    problem = pipe_mode_problem(env) or (image_problem() if image_problem else None)
    if problem:
        print(f"{prog}: error: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(1)
    return hp, env
