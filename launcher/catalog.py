"""A small catalogue: SageMaker training instances (size, price) and the TensorFlow images SDK v2 knows.

Prices are approximate on-demand SageMaker *training* list prices in us-east-1 (USD per instance-hour);
other regions differ by up to ~30%. They feed the dry run's cost estimate, never a bill.
Framework versions mirror sagemaker 2.257's `image_uri_config/tensorflow.json` (training scope);
tests check them against the installed SDK.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu: str = ""
    usd_per_hour: float = 0.0


INSTANCES: dict[str, InstanceType] = {
    "ml.m5.large": InstanceType(2, 8, usd_per_hour=0.115),
    "ml.m5.xlarge": InstanceType(4, 16, usd_per_hour=0.23),
    "ml.m5.2xlarge": InstanceType(8, 32, usd_per_hour=0.461),
    "ml.m5.4xlarge": InstanceType(16, 64, usd_per_hour=0.922),
    "ml.m5.12xlarge": InstanceType(48, 192, usd_per_hour=2.765),
    "ml.m5.24xlarge": InstanceType(96, 384, usd_per_hour=5.53),
    "ml.c5.xlarge": InstanceType(4, 8, usd_per_hour=0.204),
    "ml.c5.2xlarge": InstanceType(8, 16, usd_per_hour=0.408),
    "ml.c5.4xlarge": InstanceType(16, 32, usd_per_hour=0.816),
    "ml.c5.9xlarge": InstanceType(36, 72, usd_per_hour=1.836),
    "ml.c5.18xlarge": InstanceType(72, 144, usd_per_hour=3.672),
    "ml.p3.2xlarge": InstanceType(8, 61, 1, "V100", 3.825),
    "ml.p3.8xlarge": InstanceType(32, 244, 4, "V100", 14.688),
    "ml.p3.16xlarge": InstanceType(64, 488, 8, "V100", 28.152),
    "ml.g4dn.xlarge": InstanceType(4, 16, 1, "T4", 0.736),
    "ml.g4dn.12xlarge": InstanceType(48, 192, 4, "T4", 4.89),
    "ml.g5.xlarge": InstanceType(4, 16, 1, "A10G", 1.408),
    "ml.g5.2xlarge": InstanceType(8, 32, 1, "A10G", 1.515),
    "ml.g5.4xlarge": InstanceType(16, 64, 1, "A10G", 2.03),
    "ml.g5.12xlarge": InstanceType(48, 192, 4, "A10G", 7.09),
    "ml.g5.48xlarge": InstanceType(192, 768, 8, "A10G", 20.36),
    "ml.p4d.24xlarge": InstanceType(96, 1152, 8, "A100", 37.688),
}

# TensorFlow training images: full version -> the Python versions SDK v2 has images for.
TF_VERSIONS: dict[str, tuple[str, ...]] = {
    "2.9.2": ("py39",),
    "2.10.1": ("py39",),
    "2.11.0": ("py39",),
    "2.12.0": ("py310",),
    "2.13.0": ("py310",),
    "2.14.1": ("py310",),
    "2.16.2": ("py310",),
    "2.18.0": ("py310",),
    "2.19.0": ("py312",),
}
# What the SDK accepts as a short version (`framework_version="2.14"`).
TF_ALIASES: dict[str, str] = {".".join(v.split(".")[:2]): v for v in TF_VERSIONS}

PIPE_MODE_MAX_TF = (2, 15)  # PipeModeDataset (sagemaker-tensorflow) has no build for TF >= 2.16
MIRRORED_MIN_TF = (2, 9)  # the SDK's multi_worker_mirrored_strategy distribution needs TF >= 2.9


def instance(name: str) -> InstanceType | None:
    return INSTANCES.get(name)


def resolve_tf_version(version: str) -> str | None:
    """`2.14` or `2.14.1` -> `2.14.1`; None if the SDK has no image for it."""
    if version in TF_VERSIONS:
        return version
    return TF_ALIASES.get(version)


def version_tuple(version: str) -> tuple[int, ...]:
    """`2.14.1` -> (2, 14, 1); non-numeric parts end the tuple."""
    parts: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)
