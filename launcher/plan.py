"""Spec -> Plan: everything a job is, as one immutable value. Pure: no I/O, no SageMaker import.

The dry run, the SageMaker backend and the local backend all read the same Plan, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Channel:
    name: str  # SageMaker channel name: "train", "train-1", "eval", or the spec's name for EFS/FSx
    uri: str  # s3://... ; file://... or a local path; for EFS/FSx the directory path on the file system
    kind: str = "s3"  # "s3" | "file" | "efs" | "fsx"
    input_mode: str = "File"  # File | Pipe | FastFile
    distribution: str = "FullyReplicated"  # or "ShardedByS3Key" (S3 only)
    file_system_id: str | None = None  # EFS/FSx
    access_mode: str = "ro"  # EFS/FSx
    local_path: str | None = None  # where `--local` reads this channel from (spec `local:` or --channel)

    @property
    def is_training(self) -> bool:
        return self.name == "train" or self.name.startswith("train-")


@dataclass(frozen=True)
class Distribution:
    kind: str = "none"  # "none" | "parameter_server" | "horovod" | "multi_worker_mirrored"
    processes_per_host: int = 1
    mpi_options: str = ""


@dataclass(frozen=True)
class Plan:
    spec_path: str
    job_name: str  # base name + timestamp, <= 63 chars, SageMaker's pattern
    region: str
    role: str
    entry_point: str  # script file name, relative to source_dir
    source_dir: str  # absolute local folder shipped as the source dir
    instance_type: str
    instance_count: int
    distribution: Distribution
    input_mode: str  # the job's input mode: File | Pipe | FastFile
    channels: tuple[Channel, ...]
    hyperparameters: Mapping[str, Any]  # Python values, as the spec gives them (plus derived ones)
    argv: tuple[str, ...]  # the script's argv exactly as the container renders it
    environment: Mapping[str, str]
    estimator_kwargs: Mapping[str, Any]  # JSON-able kwargs for sagemaker.tensorflow.TensorFlow(...)
    framework_version: str | None = None
    py_version: str | None = None
    image_uri: str | None = None
    output_path: str | None = None
    checkpoint_s3_uri: str | None = None
    metric_definitions: tuple[Mapping[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    cost: Mapping[str, Any] | None = None  # {"instance_hourly_usd", "max_hours", "max_usd", "spot"}
    local: Mapping[str, Any] = field(default_factory=dict)  # `local:` section: run_dir, timeout_s, ...

    @property
    def training_channels(self) -> tuple[Channel, ...]:
        return tuple(c for c in self.channels if c.is_training)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_plan(spec: Any, *, job_name: str | None = None) -> Plan:
    """Turn a validated Spec into a Plan. `job_name` fixes the timestamped name (tests, resubmits)."""
    raise NotImplementedError("build_plan is written in issue 2")
