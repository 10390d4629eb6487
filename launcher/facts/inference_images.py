"""The SageMaker TensorFlow *inference* images (TensorFlow Serving behind SageMaker's front), read as data from the
SDK v2's own image config (`sagemaker/image_uri_config/tensorflow.json`, scope `inference`), found without
importing the SDK: which TensorFlow versions have one, and the image's URI per region. The training images are in
`images`; a training job's model is served by the inference image of its training image's TensorFlow version."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

SCOPE = "inference"


@functools.lru_cache(maxsize=1)
def _config() -> dict[str, Any]:
    spec = importlib.util.find_spec("sagemaker")
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / "image_uri_config" / "tensorflow.json"
        if path.is_file():
            return json.loads(path.read_text())[SCOPE]
    raise FileNotFoundError("the SageMaker SDK v2's image config was not found: install sagemaker")


def versions() -> dict[str, str]:
    """`2.14` -> `2.14.1`: every TensorFlow version with an inference image (the SDK's aliases)."""
    return dict(_config()["version_aliases"])


def _short(version: str) -> str:
    return ".".join(version.split(".")[:2])


def inference_version(version: str) -> str | None:
    """The full version of the inference image serving TensorFlow `version` (`2.14` or `2.14.1`); None if none."""
    known = _config()["versions"]
    if version in known:
        return version
    full = versions().get(_short(version))
    return full if full in known else None


def newest() -> str:
    return max(versions().values(), key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))


def image_uri(version: str, region: str, device: str = "cpu") -> str | None:
    """The image's URI in `region` (`<account>.dkr.ecr.<region>.<domain>/tensorflow-inference:<version>-<device>`);
    None where the version or region has none."""
    full = inference_version(version)
    entry = _config()["versions"].get(full or "")
    account = (entry or {}).get("registries", {}).get(region)
    if entry is None or account is None or device not in _config().get("processors", ["cpu", "gpu"]):
        return None
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{entry['repository']}:{full}-{device}"
