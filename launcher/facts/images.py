"""What each SageMaker TensorFlow training image holds: a plain table, read by the rules and the plan.

Read from the Deep Learning Containers sources (Dockerfiles, core_packages.json, release notes) in 2026-11:
Horovod ships only up to TF 2.12; PipeModeDataset (`sagemaker-tensorflow`) only up to 2.14; 2.15, 2.17 and
2.20 have no training image; 2.21 exists (Amazon Linux 2023, Python 3.12) but SDK v2 does not know it, so
dfm writes its URI itself. Every image has Open MPI and mpi4py. End of support is the DLC "end of patch"
date (one year after GA); a test keeps this table consistent with the installed SDK's image config.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

LAST_HOROVOD_TF = "2.12"
DLC_REPOSITORY = "tensorflow-training"


@dataclass(frozen=True)
class TrainingImage:
    version: str  # the full TensorFlow version in the image
    python: str  # e.g. py310
    horovod: str | None  # Horovod version, None when the image has none
    pipe_mode: str | None  # sagemaker-tensorflow (PipeModeDataset) version, None when absent
    mpi: str  # the MPI the image ships (mpirun is what the toolkit starts for distribution: horovod)
    sdk_v2: bool  # SDK v2's image config knows it; otherwise dfm passes the image URI itself
    end_of_support: str  # ISO date: DLC end of patch
    # For images SDK v2 lacks: the DLC tag per device, as published ({version} filled in).
    tags: tuple[tuple[str, str], ...] = ()

    @property
    def short(self) -> str:
        return ".".join(self.version.split(".")[:2])


IMAGES: dict[str, TrainingImage] = {
    image.short: image
    for image in (
        TrainingImage("2.9.2", "py39", "0.24.2", "2.9", "Open MPI 4.1", True, "2023-05-17"),
        TrainingImage("2.10.1", "py39", "0.25.0", "2.10", "Open MPI 4.1", True, "2023-09-06"),
        TrainingImage("2.11.0", "py39", "0.26.1", "2.11", "Open MPI 4.1", True, "2023-11-22"),
        TrainingImage("2.12.0", "py310", "0.27.0", "2.12.0.1.18.1", "Open MPI 4.1.5", True, "2024-03-23"),
        TrainingImage("2.13.0", "py310", None, "2.13", "Open MPI 4.1", True, "2024-07-18"),
        TrainingImage("2.14.1", "py310", None, "2.14.0.1.20.0", "Open MPI 4.1", True, "2024-10-27"),
        TrainingImage("2.16.2", "py310", None, None, "Open MPI 4.1", True, "2025-07-15"),
        TrainingImage("2.18.0", "py310", None, None, "Open MPI 4.1", True, "2026-01-24"),
        TrainingImage("2.19.0", "py312", None, None, "Open MPI 4.1", True, "2026-03-11"),
        TrainingImage(
            "2.21.0",
            "py312",
            None,
            None,
            "Open MPI 4.1.8",
            False,
            "2027-07-10",
            tags=(
                ("cpu", "{version}-cpu-py312-amzn2023-sagemaker"),
                ("gpu", "{version}-gpu-py312-cu129-amzn2023-sagemaker"),
            ),
        ),
    )
}
# TensorFlow releases with no SageMaker training image at all.
NO_IMAGE = ("2.15", "2.17", "2.20")
# The SDK's image config entry whose registries (account per region) dfm reuses for the images it lacks.
REGISTRY_SOURCE_VERSION = "2.19.0"


def short_version(version: str) -> str:
    """`2.14.1` or `2.14` -> `2.14`."""
    return ".".join(version.split(".")[:2])


def find(version: str) -> TrainingImage | None:
    """The image for `2.14` or `2.14.1`; None if no SageMaker TensorFlow training image has that version."""
    image = IMAGES.get(short_version(version))
    if image is None or version not in (image.short, image.version):
        return None
    return image


def newest() -> TrainingImage:
    return max(IMAGES.values(), key=lambda image: version_tuple(image.version))


def version_tuple(version: str) -> tuple[int, ...]:
    """`2.14.1` -> (2, 14, 1); non-numeric parts end the tuple."""
    parts: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


@functools.cache
def sdk_image_config() -> dict:
    """The installed SDK's `image_uri_config/tensorflow.json` training scope, read as data (no SDK import)."""
    spec = importlib.util.find_spec("sagemaker")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "image_uri_config" / "tensorflow.json"
        if path.is_file():
            return json.loads(path.read_text())["training"]
    return {}


def image_uri(image: TrainingImage, region: str, device: str) -> str | None:
    """The DLC URI of an image SDK v2 lacks, in `region`; None where the DLC registry has no account."""
    account = sdk_image_config().get("versions", {}).get(REGISTRY_SOURCE_VERSION, {}).get("registries", {}).get(region)
    tag = dict(image.tags).get(device)
    if account is None or tag is None:
        return None
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{DLC_REPOSITORY}:{tag.format(version=image.version)}"
