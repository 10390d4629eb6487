"""Plan -> the training request: a frozen value holding what a submit uploads and the CreateTrainingJob arguments,
built offline by the SageMaker SDK v2 and checked before anything is sent.

`estimator_arguments` derives the arguments of `sagemaker.tensorflow.TensorFlow(...)` from the Plan; the SDK's
offline estimator (`sdk.offline_estimator`) then builds the request the way `fit()` would, with the source upload
replaced by the location it would upload to, and the request is checked against botocore's validator and the
service model. `--dry-run` prints that value (`TrainingRequest.document`), `training_jobs.submit` executes exactly
it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from launcher.errors import DfmError
from launcher.facts import conventions
from launcher.plans.training_plan import Plan
from launcher.sagemaker_backend import aws, sdk, warm_start_source
from launcher.sagemaker_backend.estimator_arguments import ESTIMATOR_CLASS, jsonable
from launcher.sagemaker_backend.source_files import list_source

SOURCE_ARCHIVE = "sourcedir.tar.gz"


def freeze(value: Any) -> Any:
    """A JSON value made read-only all the way down (dicts -> mappingproxy, lists -> tuples)."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """The plain JSON value (dicts and lists) of a frozen one: what boto3 sends and json prints."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


@dataclass(frozen=True)
class SourceUpload:
    """The source dir as `fit()` ships it: packed by the SDK's own `tar_and_upload_dir` into
    s3://<bucket>/<key_prefix>/sourcedir.tar.gz, the location the request's `sagemaker_submit_directory` names."""

    directory: str  # the folder packed
    script: str  # the entry point, relative to it
    bucket: str
    key_prefix: str
    files: Mapping[str, str] = field(default_factory=dict)  # added at the archive's root: name -> text

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key_prefix}/{SOURCE_ARCHIVE}"


@dataclass(frozen=True)
class TrainingRequest:
    """Everything a training submit does, as one immutable value: `upload` (None: the source dir is an s3://
    tarball already) then CreateTrainingJob with `create_training_job`. Built from a Plan by `build`; the dry
    run prints `document()`, `training_jobs.submit` executes exactly this value and never goes back to the plan."""

    plan: Plan  # what it was built from, for the dry run's account of hosts, channels and cost
    estimator_kwargs: Mapping[str, Any]  # as given to TensorFlow(...), frozen
    inputs: Mapping[str, Mapping]  # channel name -> the SDK's channel config, frozen
    create_training_job: Mapping[str, Any]  # the CreateTrainingJob arguments, exactly as sent, frozen
    upload: SourceUpload | None

    @property
    def job_name(self) -> str:
        return self.create_training_job["TrainingJobName"]

    @property
    def region(self) -> str:
        return self.plan.region

    @property
    def image_uri(self) -> str:
        return self.create_training_job["AlgorithmSpecification"]["TrainingImage"]

    def arguments(self) -> dict[str, Any]:
        """The CreateTrainingJob arguments as plain dicts and lists, for boto3."""
        return thaw(self.create_training_job)

    def document(self) -> dict:
        """The dry run's document: the request, with the plan's channels, hosts, cost and warnings beside it."""
        from launcher.plans import tasks

        plan = self.plan
        document = {
            "job_name": self.job_name,
            "estimator": {"class": ESTIMATOR_CLASS, "kwargs": thaw(self.estimator_kwargs)},
            "inputs": thaw(self.inputs),
            "channels": [dataclasses.asdict(channel) for channel in plan.channels],
            "entry_point": plan.entry_point,
            "argv": list(plan.argv),
            "image_uri": self.image_uri,
            "instance_groups": tasks.describe(plan),
            "request": self.arguments(),
            "uploads": [self.upload.uri] if self.upload is not None else [],  # as the processing dry run lists them
            "cost": dict(plan.cost or {}),
            "watch": jsonable(
                {
                    "recovery": dataclasses.asdict(plan.operations.recovery) if plan.operations.recovery else None,
                    "stall_timeout_s": plan.operations.stall_timeout_s,
                }
            ),
            "warnings": list(plan.warnings),
        }
        if plan.warm_start is not None:
            document["warm_start"] = warm_start_document(plan)
        if plan.source_files:  # shipped in the source dir beside the scripts
            document["source_files"] = {name: f"{len(text)} characters" for name, text in plan.source_files.items()}
        if self.upload is not None:  # what goes into the tarball, as the submit packs it
            listing = list_source(self.upload.directory)
            document["source"] = listing.document()
            if listing.warning():
                document["warnings"].append(listing.warning())
        return document


def warm_start_document(plan: Plan) -> dict:
    """The warm start as the dry run and the summary name it: the source as given, what it resolved to, the channel."""
    start = plan.warm_start
    channel = conventions.WARM_START_CHANNEL if start.kind == "checkpoint" else conventions.MODEL_CHANNEL
    return {
        "from": start.source,
        "kind": start.kind,
        "uri": start.uri,
        "channel": channel if start.kind else None,
        "restore": start.restore,
        "steps": start.steps,
        # a job name is resolved with DescribeTrainingJob, the one call a dry run makes then
        "read_with": None if start.source.startswith("s3://") else "DescribeTrainingJob",
    }


def source_upload(plan: Plan, hyperparameters: Mapping[str, str]) -> SourceUpload | None:
    """What a submit uploads for `plan`, to where the request's `sagemaker_submit_directory` (JSON-encoded, as
    in the request's hyperparameters) says it is; None for an s3:// source dir, which is there already."""
    if plan.source_dir.startswith("s3://"):
        return None
    uri = json.loads(hyperparameters["sagemaker_submit_directory"])
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not uri.startswith("s3://") or not key.endswith(f"/{SOURCE_ARCHIVE}"):
        raise DfmError(f"the request names {uri} as the source dir, not an s3:// {SOURCE_ARCHIVE}", 2)
    return SourceUpload(
        plan.source_dir, plan.entry_point, bucket, key[: -len(SOURCE_ARCHIVE) - 1], freeze(dict(plan.source_files))
    )


def build(plan: Plan) -> TrainingRequest:
    """The request a submit sends, built by the real SDK with zero network calls (but DescribeTrainingJob when the
    warm start names a job); exit 2 if it would be refused."""
    plan = warm_start_source.resolve(plan)
    sagemaker = sdk.sdk()
    session, kwargs, job, inputs = sdk.offline_estimator(plan)
    try:
        job._prepare_for_training(job_name=plan.job_name)
        args = sagemaker.estimator._TrainingJob.get_train_args(job, inputs, None)
    except ValueError as err:
        raise DfmError(f"the SageMaker SDK refused the job: {aws.one_line(err)}", 2) from err
    request = session.get_train_request(**args)
    if plan.operations.mlflow:  # CreateTrainingJob's MlflowConfig, which SDK v2's estimator does not take
        request["MlflowConfig"] = dict(plan.operations.mlflow)
    validate(session.sagemaker_client, request)
    return TrainingRequest(
        plan,
        freeze(kwargs),
        freeze({name: dict(value.config) for name, value in inputs.items()}),
        freeze(jsonable(request)),
        source_upload(plan, request["HyperParameters"]),
    )


def validate(sagemaker_client, request: dict, operation: str = "CreateTrainingJob") -> None:
    from botocore.validate import ParamValidator

    from launcher.facts import service_model

    shape = sagemaker_client.meta.service_model.operation_model(operation).input_shape
    report = ParamValidator().validate(request, shape)
    if report.has_errors():
        raise DfmError(f"the {operation} request would be refused: {aws.one_line(report.generate_report())}", 2)
    # The validator checks types and minimums; the service also refuses enums, maximums and patterns.
    refused = [f"{path}: {message}" for path, message in service_model.walk(request, f"{operation}Request")]
    if refused:
        raise DfmError(f"the {operation} request would be refused: {aws.one_line('; '.join(refused))}", 2)


def dry_run(plan: Plan) -> dict:
    """The dry run's document of `plan`: `build(plan).document()`."""
    return build(plan).document()
