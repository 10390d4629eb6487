"""What the launcher knows of the bundled entry points: their names, distributions, hyperparameters, source dir.

The other side of this contract is `entrypoints/`: hyperparameters are read from its `deepfm_hparams`.
What SageMaker does to every job (channels, container paths, metric regexes, argv) is in
`launcher.facts.conventions`.
Nothing heavy is imported here.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "BUNDLED_ENTRY_POINTS",
    "BundledEntryPoint",
    "DERIVED_HYPERPARAMETERS",
    "bundled_cluster",
    "bundled_features",
    "bundled_hparams",
    "bundled_source_dir",
    "features_delivery",
    "features_hyperparameter",
    "FEATURES_FILE",
]


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


# Hyperparameters dfm sets for the bundled scripts from other parts of the spec. Set by hand, a value would
# be overwritten, or would send the script down a layout the job does not have: refused. name -> its source.
DERIVED_HYPERPARAMETERS: dict[str, str] = {
    "model_dir": "set by the SDK for every job (to checkpoint on EFS use checkpoints.file_system)",
    "checkpoint_dir": "set by dfm from checkpoints (file_system: the mounted channel; s3: checkpoints.local_path)",
    "ps_group": "set by dfm from distribution.parameter_server.ps",
    "ps_per_host": "set by dfm from distribution.parameter_server.ps.per_host",
    "features": "set by dfm from the features: section",
    "tensorboard_dir": "set by dfm from tensorboard: (the container folder SageMaker syncs to S3)",
    "warm_start": "set by dfm from warm_start.restore (empty: no warm start)",
    "warm_start_steps": "set by dfm from warm_start.steps",
    "warm_start_source": "set by dfm from warm_start.from (named in the script's first log line)",
}


def _load_bundled(filename: str, module_name: str) -> ModuleType:
    path = Path(bundled_source_dir()) / filename
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def bundled_features() -> ModuleType:
    """The bundled scripts' `deepfm_features` (validate, spec_from_dict, build_layout): the launcher checks
    a `features:` section with the very checks the scripts apply. Pure Python."""
    return _load_bundled("deepfm_features.py", "dfm_bundled_features")


FEATURES_FILE = "dfm_features.json"


def features_hyperparameter(features: dict) -> str:
    """The section as compact JSON, as the bundled scripts read it."""
    return json.dumps(features, separators=(",", ":"))


def features_delivery(features: dict, max_value: int) -> tuple[str, dict[str, str]]:
    """(the `features` hyperparameter, files to add to the source dir). A section whose JSON-encoded
    value (as the SDK sends it) exceeds SageMaker's `max_value` characters travels as FEATURES_FILE in the
    source dir, and the hyperparameter names it (`@dfm_features.json`, read beside the scripts)."""
    text = features_hyperparameter(features)
    if len(json.dumps(text)) <= max_value:
        return text, {}
    return f"{bundled_hparams().FEATURES_FILE_PREFIX}{FEATURES_FILE}", {FEATURES_FILE: text}


@functools.cache
def bundled_cluster() -> ModuleType:
    """The bundled scripts' `hetero_cluster` (build_cluster, ADDRESSES_ENV): the layout of a ps-group job as
    the script builds it. Standard library only."""
    return _load_bundled("hetero_cluster.py", "dfm_bundled_cluster")


@functools.cache
def bundled_precision() -> ModuleType:
    """The bundled scripts' `deepfm_precision` (BFLOAT16_FLAGS, cpu_bfloat16_flag): which CPU flags mean
    bfloat16 instructions, as the scripts' `auto` reads them. Standard library only."""
    return _load_bundled("deepfm_precision.py", "dfm_bundled_precision")


@functools.cache
def bundled_shards() -> ModuleType:
    """The bundled scripts' shard table (`deepfm_shards.shard_for`), which `dfm data prepare` lays its files out
    for. Pure Python."""
    return _load_bundled("deepfm_shards.py", "dfm_bundled_shards")


@functools.cache
def bundled_hparams() -> ModuleType:
    """The bundled scripts' own `deepfm_hparams` module (DEFAULTS, CHOICES, TRUE_WORDS, FALSE_WORDS).

    Read from the source dir itself rather than mirrored here, so the rules check spec hyperparameters
    against exactly what the scripts will parse. It is pure Python (argparse, json): no TensorFlow.
    """
    return _load_bundled("deepfm_hparams.py", "dfm_bundled_hparams")


def bundled_source_dir() -> str:
    """The folder shipped as SageMaker's source dir for bundled entry points.

    Installed wheel: the data package `launcher/_bundled`. Checkout (editable or not): `entrypoints/`
    next to the `launcher/` package. An editable install maps `launcher._bundled` to the latter too.
    """
    import launcher

    marker = BUNDLED_ENTRY_POINTS["deepfm-ps"].script
    package_dir = Path(launcher.__file__).resolve().parent  # the package's, wherever in it this module lives
    for candidate in (package_dir / "_bundled", package_dir.parent / "entrypoints"):
        if (candidate / marker).is_file():
            return str(candidate)
    spec = importlib.util.find_spec("launcher._bundled")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / marker).is_file():
            return str(Path(location).resolve())
    from launcher.errors import DfmError

    raise DfmError(f"the bundled entry points ({marker}) are missing from this installation; reinstall dfm", 1)
