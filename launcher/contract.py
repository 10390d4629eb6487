"""What the launcher knows of the bundled entry points: names, channels, metric lines, argv rendering.

The other side of this contract is `entrypoints/`: hyperparameters are read from its `deepfm_hparams`,
and tests check that the metric lines of `deepfm_log` match the regexes here. Nothing heavy is imported here.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping


@dataclass(frozen=True)
class BundledEntryPoint:
    script: str  # file in entrypoints/
    distributions: tuple[str, ...]  # spec `distribution` values the script supports


BUNDLED_ENTRY_POINTS: dict[str, BundledEntryPoint] = {
    # train_ps.py also runs on one host without TF_CONFIG, hence "none".
    "deepfm-ps": BundledEntryPoint("train_ps.py", ("parameter_server", "none")),
    "deepfm-horovod": BundledEntryPoint("train_horovod.py", ("horovod",)),
    "deepfm-mirrored": BundledEntryPoint("train_mirrored.py", ("multi_worker_mirrored",)),
}

TRAIN_CHANNEL = "train"
EVAL_CHANNEL = "eval"
CHECKPOINT_CHANNEL = "checkpoints"  # the EFS/FSx channel that holds checkpoints (spec `checkpoints.file_system`)
CONTAINER_BASE_DIR = "/opt/ml"  # SAGEMAKER_BASE_DIR inside the SageMaker container


def training_channel_names(count: int) -> list[str]:
    """`train` for one path; `train`, `train-1`, ... `train-{N-1}` for N paths (multi-path)."""
    return [TRAIN_CHANNEL] + [f"{TRAIN_CHANNEL}-{i}" for i in range(1, count)]


def container_channel_dir(channel: str) -> str:
    return f"{CONTAINER_BASE_DIR}/input/data/{channel}"


@functools.cache
def bundled_hparams() -> ModuleType:
    """The bundled scripts' own `deepfm_hparams` module (DEFAULTS, CHOICES, TRUE_WORDS, FALSE_WORDS).

    Read from the source dir itself rather than mirrored here, so the rules check spec hyperparameters
    against exactly what the scripts will parse. It is pure Python (argparse, json): no TensorFlow.
    """
    path = Path(bundled_source_dir()) / "deepfm_hparams.py"
    spec = importlib.util.spec_from_file_location("dfm_bundled_hparams", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FLOAT = r"([-+]?(?:[0-9]*\.)?[0-9]+(?:[eE][-+]?[0-9]+)?)"
# SageMaker scrapes these from the job's log; `--local` reads the same lines for its progress line.
METRIC_DEFINITIONS: tuple[dict[str, str], ...] = (
    {"Name": "train:loss", "Regex": r"\[dfm\] train step=\d+ loss=" + _FLOAT},
    {"Name": "train:auc", "Regex": r"\[dfm\] train step=\d+ loss=\S+ auc=" + _FLOAT},
    {"Name": "train:examples_per_sec", "Regex": r"\[dfm\] train step=\d+ .*examples_per_sec=" + _FLOAT},
    {"Name": "train:step", "Regex": r"\[dfm\] train step=(\d+)"},
    {"Name": "eval:loss", "Regex": r"\[dfm\] eval step=\d+ loss=" + _FLOAT},
    {"Name": "eval:auc", "Regex": r"\[dfm\] eval step=\d+ loss=\S+ auc=" + _FLOAT},
)


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


def bundled_source_dir() -> str:
    """The folder shipped as SageMaker's source dir for bundled entry points.

    Installed wheel: the data package `launcher/_bundled`. Checkout (editable or not): `entrypoints/`
    next to the `launcher/` package. An editable install maps `launcher._bundled` to the latter too.
    """
    marker = BUNDLED_ENTRY_POINTS["deepfm-ps"].script
    package_dir = Path(__file__).resolve().parent
    for candidate in (package_dir / "_bundled", package_dir.parent / "entrypoints"):
        if (candidate / marker).is_file():
            return str(candidate)
    spec = importlib.util.find_spec("launcher._bundled")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / marker).is_file():
            return str(Path(location).resolve())
    from launcher.errors import DfmError

    raise DfmError(f"the bundled entry points ({marker}) are missing from this installation; reinstall dfm", 1)
