"""A small catalogue of SageMaker training instances (size, price); the TensorFlow images are in `images`.

Prices are approximate on-demand SageMaker *training* list prices in us-east-1 (USD per instance-hour);
other regions differ by up to ~30%. They feed the dry run's cost estimate, never a bill.
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


def instance(name: str) -> InstanceType | None:
    return INSTANCES.get(name)
