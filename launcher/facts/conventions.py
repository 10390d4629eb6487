"""What SageMaker and its SDK do to a TensorFlow training job, in one place. Pure: nothing heavy imported.

Channel naming, the paths inside the container, the hyperparameters the SDK adds, the model_dir rule,
the metric regexes SageMaker scrapes, and how the container toolkit renders hyperparameters as argv.
The entry points keep their own copies of what they need (they never import the launcher); a test
pins those copies to these values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

# ------------------------------------------------------------------------------------------- channels
TRAIN_CHANNEL = "train"
EVAL_CHANNEL = "eval"
CHECKPOINT_CHANNEL = "checkpoints"  # the EFS/FSx channel that holds checkpoints (spec `checkpoints.file_system`)
WARM_START_CHANNEL = "warmstart"  # warm start from a checkpoint: File mode, FullyReplicated, every host
MODEL_CHANNEL = "model"  # warm start from a model artifact: the SDK's model_uri channel (model_channel_name)
MODEL_CONTENT_TYPE = "application/x-sagemaker-model"  # the content type the SDK gives the model channel
NUMBERED_TRAIN_CHANNEL = re.compile(rf"{TRAIN_CHANNEL}-\d+")
MAX_CHANNELS = 20


def training_channel_names(count: int) -> list[str]:
    """`train` for one path; `train`, `train-1`, ... `train-{N-1}` for N paths (multi-path)."""
    return [TRAIN_CHANNEL] + [f"{TRAIN_CHANNEL}-{i}" for i in range(1, count)]


@dataclass(frozen=True)
class ChannelSource:
    name: str  # SageMaker channel name
    field: str  # where the spec gives it, e.g. "data.train.1"
    source: Any  # an s3:// URI, or the spec's FileSystem
    training: bool


def channel_sources(spec: Any) -> list[ChannelSource]:
    """Every channel a spec makes, in request order: training paths, eval, named channels, EFS checkpoints."""
    many = isinstance(spec.data.train, list)
    names = training_channel_names(len(spec.train_sources))
    found = [
        ChannelSource(name, f"data.train.{i}" if many else "data.train", source, True)
        for i, (name, source) in enumerate(zip(names, spec.train_sources))
    ]
    if spec.data.eval is not None:
        found.append(ChannelSource(EVAL_CHANNEL, "data.eval", spec.data.eval, False))
    found += [
        ChannelSource(name, f"data.channels.{name}", source, False) for name, source in spec.data.channels.items()
    ]
    config = spec.checkpoint_config
    if config is not None and config.file_system is not None:
        found.append(ChannelSource(CHECKPOINT_CHANNEL, "checkpoints.file_system", config.file_system, False))
    return found


# ------------------------------------------------------------------------------------------------ job names
MAX_JOB_NAME = 63  # training, tuning (32), processing job names: [a-zA-Z0-9](-*[a-zA-Z0-9])*


def fit_job_name(base: str, suffix: str, width: int = MAX_JOB_NAME) -> str:
    """`base + suffix`, the base cut (and any '-' it then ends in dropped) so that the whole is at most `width`."""
    return base[: max(width - len(suffix), 1)].rstrip("-") + suffix


# -------------------------------------------------------------------------------------- container paths
CONTAINER_BASE_DIR = "/opt/ml"  # SAGEMAKER_BASE_DIR inside the SageMaker container
CONTAINER_DATA_DIR = f"{CONTAINER_BASE_DIR}/input/data"  # channel folders, or Pipe FIFOs <channel>_<epoch>
CONTAINER_CONFIG_DIR = f"{CONTAINER_BASE_DIR}/input/config"  # hyperparameters.json, inputdataconfig.json, ...
CONTAINER_MODEL_DIR = f"{CONTAINER_BASE_DIR}/model"  # SM_MODEL_DIR, uploaded as model.tar.gz
# TensorBoardOutputConfig.LocalPath's default: SageMaker syncs this folder to its S3OutputPath while the job runs.
TENSORBOARD_LOCAL_PATH = f"{CONTAINER_BASE_DIR}/output/tensorboard"
CONTAINER_CHECKPOINT_DIR = f"{CONTAINER_BASE_DIR}/checkpoints"  # the SDK's default checkpoint_local_path
CONTAINER_PIPE_STATE_DIR = f"{CONTAINER_BASE_DIR}/pipe_state"  # PipeModeDataset's per-channel counters


def container_channel_dir(channel: str) -> str:
    return f"{CONTAINER_DATA_DIR}/{channel}"


# ------------------------------------------------------------------------------ the SDK's hyperparameters
# The SDK adds these to every TensorFlow job's hyperparameters, and these per distribution; they count
# towards the API's limit of 100.
SDK_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "sagemaker_region",
    "model_dir",
)
SDK_DISTRIBUTION_HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "none": (),
    "parameter_server": ("sagemaker_parameter_server_enabled",),
    "multi_worker_mirrored": ("sagemaker_multi_worker_mirrored_strategy_enabled",),
    "horovod": ("sagemaker_mpi_enabled", "sagemaker_mpi_num_of_processes_per_host", "sagemaker_mpi_custom_mpi_options"),
}


def sdk_distribution(kind: str, processes_per_host: int = 1, mpi_options: str = "") -> dict[str, Any] | None:
    """The SDK v2 `distribution` argument for a spec's distribution kind."""
    if kind == "parameter_server":
        return {"parameter_server": {"enabled": True}}
    if kind == "multi_worker_mirrored":
        return {"multi_worker_mirrored_strategy": {"enabled": True}}
    if kind == "horovod":
        mpi: dict[str, Any] = {"enabled": True, "processes_per_host": processes_per_host}
        return {"mpi": {**mpi, "custom_mpi_options": mpi_options} if mpi_options else mpi}
    return None


def model_dir(output_path: str, job_name: str, *, distribution: str, bundled: bool) -> str:
    """The --model_dir a job's script receives.

    The SDK passes MPI jobs the container folder and others `<output>/<job>/model`; for an s3:// value the
    toolkit calls S3 GetBucketLocation before the script starts. The bundled scripts save to SM_MODEL_DIR
    anyway, so dfm gives them the container folder; a user's script keeps the SDK's default.
    """
    if distribution == "horovod" or bundled:
        return CONTAINER_MODEL_DIR
    return f"{output_path.rstrip('/')}/{job_name}/model"


# ------------------------------------------------------------------------------------------ metric lines
METRIC_LINE_PREFIX = "[dfm]"
_FLOAT = r"([-+]?(?:[0-9]*\.)?[0-9]+(?:[eE][-+]?[0-9]+)?)"
# SageMaker scrapes these from the job's log; `--local` reads the same lines for its progress line.
METRIC_DEFINITIONS: tuple[dict[str, str], ...] = (
    {"Name": "train:loss", "Regex": r"\[dfm\] train step=\d+ loss=" + _FLOAT},
    {"Name": "train:auc", "Regex": r"\[dfm\] train step=\d+ loss=\S+ auc=" + _FLOAT},
    {"Name": "train:examples_per_sec", "Regex": r"\[dfm\] train step=\d+ .*examples_per_sec=" + _FLOAT},
    {"Name": "train:step", "Regex": r"\[dfm\] train step=(\d+)"},
    {"Name": "eval:loss", "Regex": r"\[dfm\] eval step=\d+ loss=" + _FLOAT},
    {"Name": "eval:auc", "Regex": r"\[dfm\] eval step=\d+ loss=\S+ auc=" + _FLOAT},
    # the logistic-regression baseline the bundled scripts train beside the model (hyperparameter `baseline`)
    {"Name": "eval:baseline_auc", "Regex": r"\[dfm\] eval step=\d+ .*baseline_auc=" + _FLOAT},
)


# ------------------------------------------------------------------------------------------------- argv
def _render_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    if value is None:
        return ""
    return str(value)


def render_argv(hyperparameters: Mapping[str, Any]) -> list[str]:
    """The script's argv as SageMaker delivers it.

    The SDK JSON-encodes each value into the CreateTrainingJob request; the container toolkit
    (sagemaker-training `environment` + `mapping.to_cmd_args`) JSON-decodes them, drops `sagemaker_*`
    keys, sorts the names and renders `--name str(value)` (`-n` for one-letter names, mappings as
    `k=v,k2=v2`, null as an empty string). So `False` arrives as "False" and a list as "[400, 400]".
    """
    decoded = {str(k): json.loads(json.dumps(v)) for k, v in hyperparameters.items()}
    argv: list[str] = []
    for name in sorted(decoded):
        if name.startswith("sagemaker_"):
            continue
        argv += [f"--{name}" if len(name) > 1 else f"-{name}", _render_value(decoded[name])]
    return argv
