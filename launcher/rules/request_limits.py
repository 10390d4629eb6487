"""The spec's values as they will appear in the CreateTrainingJob request, checked against the service model.

`dfm validate` cannot build the request (that needs the SageMaker SDK), so this module says which spec
field becomes which request value, transformed as the SDK transforms it (hyperparameters JSON-encoded,
the entry point and an S3 source dir turned into sagemaker_* hyperparameters, ...), and checks each with
`service_model.value_problems`, so every refusal points at the spec line that causes it. The dry run
also walks the real request the SDK built (`service_model.walk`).

The job name has its own rule (`rules.check_job_name`), which knows about the timestamp dfm appends.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, NamedTuple

from launcher.facts import contract
from launcher.facts import conventions
from launcher.facts import service_model
from launcher.spec import FileSystem, Spec, did_you_mean

LONG_VALUE_FIX = "pass big values as a file in a channel"
# A stand-in of the same length as the suffix dfm appends to the job name.
TIMESTAMPED = "-0000-00-00-00-00-00-000"


class Entry(NamedTuple):
    request_path: str  # dotted, in the request's shapes: `member` for list items, `key`/`value` in maps
    value: Any
    field: str  # the spec field that sets it
    fix: str = ""


def _channel_entries(spec: Spec) -> Iterator[Entry]:
    channel = "InputDataConfig.member"
    for found in conventions.channel_sources(spec):
        name, source, field = found.name, found.source, found.field
        yield Entry(f"{channel}.ChannelName", name, field)
        if isinstance(source, FileSystem):
            data = f"{channel}.DataSource.FileSystemDataSource"
            yield Entry(f"{data}.FileSystemId", source.file_system_id, f"{field}.file_system_id")
            yield Entry(f"{data}.DirectoryPath", source.directory_path, f"{field}.directory_path")
        else:
            yield Entry(f"{channel}.DataSource.S3DataSource.S3Uri", source, field)


def _checkpoint_entries(spec: Spec) -> Iterator[Entry]:
    config = spec.checkpoint_config
    if config is None or config.file_system is not None:
        return
    if config.s3 == "auto":
        uri = f"{spec.output.rstrip('/')}/{spec.name}{TIMESTAMPED}/checkpoints"
        yield Entry(
            "CheckpointConfig.S3Uri",
            uri,
            "output",
            "checkpoints go to <output>/<job name>/checkpoints: use a shorter output",
        )
    else:
        yield Entry("CheckpointConfig.S3Uri", config.s3, "checkpoints")
    yield Entry("CheckpointConfig.LocalPath", config.local_path, "checkpoints.local_path")


def _hyperparameter_entries(spec: Spec) -> Iterator[Entry]:
    for key, value in spec.hyperparameters.items():
        field = f"hyperparameters.{key}"
        yield Entry("HyperParameters.key", str(key), field)
        yield Entry("HyperParameters.value", json.dumps(value), field, f"the value once JSON-encoded; {LONG_VALUE_FIX}")
    # What the SDK adds from other fields, encoded the same way.
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        yield Entry("HyperParameters.value", json.dumps(spec.entry_point), "entry_point")
    if spec.source_dir is not None and spec.source_dir.startswith("s3://"):
        yield Entry("HyperParameters.value", json.dumps(spec.source_dir), "source_dir")
    if spec.distribution_kind == "horovod" and spec.distribution.horovod.mpi_options:
        yield Entry(
            "HyperParameters.value",
            json.dumps(spec.distribution.horovod.mpi_options),
            "distribution.horovod.mpi_options",
        )


def _operations_entries(spec: Spec) -> Iterator[Entry]:
    if spec.retry is not None:
        yield Entry("RetryStrategy.MaximumRetryAttempts", spec.retry.max_attempts, "retry.max_attempts")
    if isinstance(spec.tensorboard, str) and spec.tensorboard != "auto":
        yield Entry("TensorBoardOutputConfig.S3OutputPath", spec.tensorboard, "tensorboard")
    if spec.mlflow is not None:
        yield Entry("MlflowConfig.MlflowResourceArn", spec.mlflow.tracking_server_arn, "mlflow.tracking_server_arn")
        if spec.mlflow.experiment:
            yield Entry("MlflowConfig.MlflowExperimentName", spec.mlflow.experiment, "mlflow.experiment")
        if spec.mlflow.run:
            yield Entry("MlflowConfig.MlflowRunName", spec.mlflow.run, "mlflow.run")
    if spec.recover is not None:
        for index, instance_type in enumerate(spec.recover.instance_types):
            yield Entry("ResourceConfig.InstanceType", instance_type, f"recover.instance_types.{index}")


def entries(spec: Spec) -> Iterator[Entry]:
    """Every request value the spec sets, with the field that sets it."""
    yield Entry("RoleArn", spec.role, "role")
    if spec.image_uri is not None:
        yield Entry("AlgorithmSpecification.TrainingImage", spec.image_uri, "image_uri")
    yield Entry("AlgorithmSpecification.TrainingInputMode", spec.data.mode, "data.mode")
    yield Entry("ResourceConfig.InstanceType", spec.instance.type, "instance.type")
    yield Entry("ResourceConfig.InstanceCount", spec.instance.count, "instance.count")
    yield Entry("ResourceConfig.VolumeSizeInGB", spec.instance.volume_gb, "instance.volume_gb")
    if spec.warm_pool_seconds:
        yield Entry("ResourceConfig.KeepAlivePeriodInSeconds", spec.warm_pool_seconds, "warm_pool_seconds")
    yield Entry("StoppingCondition.MaxRuntimeInSeconds", spec.max_run, "max_run")
    if spec.spot is not None:
        yield Entry("StoppingCondition.MaxWaitTimeInSeconds", spec.spot.max_wait, "spot.max_wait")
    yield Entry("OutputDataConfig.S3OutputPath", spec.output, "output")
    yield from _checkpoint_entries(spec)
    yield from _channel_entries(spec)
    yield from _hyperparameter_entries(spec)
    if spec.environment:
        yield Entry("Environment", dict(spec.environment), "environment")
    for name, value in spec.environment.items():
        yield Entry("Environment.key", name, f"environment.{name}")
        yield Entry(
            "Environment.value",
            str(value),
            f"environment.{name}",
            "pass long values in a file (a channel, or the source dir)",
        )
    if spec.tags:
        yield Entry("Tags", [{"Key": k, "Value": v} for k, v in spec.tags.items()], "tags")
    for key, value in spec.tags.items():
        yield Entry("Tags.member.Key", key, f"tags.{key}")
        yield Entry("Tags.member.Value", value, f"tags.{key}")
    yield from _operations_entries(spec)
    if spec.vpc is not None:
        for index, subnet in enumerate(spec.vpc.subnets):
            yield Entry("VpcConfig.Subnets.member", subnet, f"vpc.subnets.{index}")
        for index, group in enumerate(spec.vpc.security_group_ids):
            yield Entry("VpcConfig.SecurityGroupIds.member", group, f"vpc.security_group_ids.{index}")


def problems(spec: Spec) -> list[tuple[str, str]]:
    """(spec field, message with the fix) for each value SageMaker would refuse."""
    found = []
    for entry in entries(spec):
        name = service_model.shape_at(entry.request_path)
        where = entry.request_path.replace(".member", "").replace(".key", " name").replace(".value", " value")
        for problem in service_model.value_problems(name, entry.value):
            if problem == "enum":
                hint = did_you_mean(str(entry.value), service_model.enum(name))
                found.append((entry.field, service_model.enum_message(name, entry.value, where, hint)))
                continue
            fix = entry.fix or ("use only what that pattern allows" if problem.startswith("does not match") else "")
            found.append((entry.field, f"{problem} (CreateTrainingJob {where})" + (f": {fix}" if fix else "")))
    return found
