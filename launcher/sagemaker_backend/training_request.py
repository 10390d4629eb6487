"""Plan -> the training request: a frozen value holding what a submit uploads and the CreateTrainingJob arguments,
built offline by the SageMaker SDK v2 and checked before anything is sent.

`estimator_kwargs` derives the arguments of `sagemaker.tensorflow.TensorFlow(...)` from the Plan (pure); the
SDK then builds the request the way `fit()` would, with the source upload replaced by the location it would
upload to, and the request is checked against botocore's validator and the service model. `--dry-run` prints
that value (`TrainingRequest.document`), `training_jobs.submit` executes exactly it. The SDK is imported here only,
inside functions, and quietly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping
from urllib.parse import urlparse

import boto3

from launcher.facts import conventions
from launcher.errors import DfmError
from launcher.plans.training_plan import Channel, Plan
from launcher.sagemaker_backend import aws
from launcher.sagemaker_backend.source_files import list_source

ESTIMATOR_CLASS = "sagemaker.tensorflow.TensorFlow"
SOURCE_ARCHIVE = "sourcedir.tar.gz"
FILE_SYSTEM_TYPES = {"efs": "EFS", "fsx": "FSxLustre"}
DISABLED_SDK_EXTRAS = {
    # SageMaker Debugger/Profiler hooks are on by default in TF images; dfm's scripts do not use them and
    # they add a Debugger rule job and hook overhead. Off keeps the request to what the spec says.
    "disable_profiler": True,
    "debugger_hook_config": False,
}


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
            "watch": _jsonable(
                {
                    "recovery": dataclasses.asdict(plan.operations.recovery) if plan.operations.recovery else None,
                    "stall_timeout_s": plan.operations.stall_timeout_s,
                }
            ),
            "warnings": list(plan.warnings),
        }
        if plan.source_files:  # shipped in the source dir beside the scripts
            document["source_files"] = {name: f"{len(text)} characters" for name, text in plan.source_files.items()}
        if self.upload is not None:  # what goes into the tarball, as the submit packs it
            listing = list_source(self.upload.directory)
            document["source"] = listing.document()
            if listing.warning():
                document["warnings"].append(listing.warning())
        return document


def _host_kwargs(groups) -> dict[str, Any]:
    """One group of identical hosts goes as instance_type/instance_count (ResourceConfig.InstanceType/Count, the
    form every SageMaker feature takes); several as instance_groups (the SDK refuses both at once)."""
    if len(groups) == 1:
        return {"instance_type": groups[0].instance_type, "instance_count": groups[0].count}
    return {"instance_groups": [group.sdk_kwargs() for group in groups]}


def estimator_kwargs(plan: Plan) -> dict[str, Any]:
    """The keyword arguments of `sagemaker.tensorflow.TensorFlow(...)` for this plan (JSON-able)."""
    kwargs: dict[str, Any] = {
        "entry_point": plan.entry_point,
        "source_dir": plan.source_dir,
        "role": plan.role,
        "volume_size": plan.volume_gb,
        "max_run": plan.max_run,
        "input_mode": plan.input_mode,
        "output_path": plan.output_path,
        "code_location": plan.output_path,
        # The SDK adds model_dir itself: its own default, or the value given below.
        "hyperparameters": {k: v for k, v in plan.hyperparameters.items() if k != "model_dir"},
        **DISABLED_SDK_EXTRAS,
    }
    kwargs.update(_host_kwargs(plan.instance_groups))
    if plan.bundled:  # a user's script keeps the SDK's own default (which conventions.model_dir predicts)
        kwargs["model_dir"] = plan.hyperparameters["model_dir"]
    if plan.image_uri is not None:
        kwargs["image_uri"] = plan.image_uri
    if plan.framework_version is not None:
        kwargs["framework_version"] = plan.framework_version
    if plan.py_version is not None:
        kwargs["py_version"] = plan.py_version
    distribution = conventions.sdk_distribution(
        plan.toolkit_distribution, plan.distribution.processes_per_host, plan.distribution.mpi_options
    )
    if distribution is not None:
        kwargs["distribution"] = distribution
    if plan.checkpoint_s3_uri is not None:
        kwargs["checkpoint_s3_uri"] = plan.checkpoint_s3_uri
        kwargs["checkpoint_local_path"] = plan.checkpoint_local_path
    if plan.spot_max_wait is not None:
        kwargs["use_spot_instances"] = True
        kwargs["max_wait"] = plan.spot_max_wait
    if plan.vpc is not None:
        kwargs["subnets"] = list(plan.vpc.subnets)
        kwargs["security_group_ids"] = list(plan.vpc.security_group_ids)
    if plan.warm_pool_seconds:
        kwargs["keep_alive_period_in_seconds"] = plan.warm_pool_seconds
    if plan.environment:
        kwargs["environment"] = dict(plan.environment)
    if plan.tags:
        kwargs["tags"] = [{"Key": k, "Value": v} for k, v in plan.tags.items()]
    kwargs.update(_operations_kwargs(plan))
    if plan.bundled:  # the bundled scripts write the lines these scrape
        kwargs["metric_definitions"] = [dict(m) for m in conventions.METRIC_DEFINITIONS]
    return _jsonable(kwargs)


def _operations_kwargs(plan: Plan) -> dict[str, Any]:
    """SageMaker's retry on internal errors and the TensorBoard folder it syncs (MLflow has no SDK v2 argument:
    `build` adds it to the request)."""
    kwargs: dict[str, Any] = {}
    if plan.operations.retry_attempts is not None:
        kwargs["max_retry_attempts"] = plan.operations.retry_attempts
    if plan.operations.tensorboard_s3_uri is not None:
        kwargs["tensorboard_output_config"] = {
            "s3_output_path": plan.operations.tensorboard_s3_uri,
            "container_local_output_path": conventions.TENSORBOARD_LOCAL_PATH,
        }
    return kwargs


# ---------------------------------------------------------------------------------------------- the SDK
@functools.lru_cache(maxsize=None)
def _sdk():
    """Import the SDK quietly: its config logger writes INFO lines to stdout (breaking JSON output), its
    import warns about v2's deprecation and replaces sys.excepthook."""
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    config_logger = logging.getLogger("sagemaker.config")
    if not config_logger.handlers:
        config_logger.addHandler(logging.NullHandler())
    config_logger.setLevel(logging.WARNING)
    hook = sys.excepthook
    try:
        import sagemaker
        import sagemaker.estimator
        import sagemaker.inputs
        import sagemaker.tensorflow
    finally:
        sys.excepthook = hook
    # The SDK's modules (~250k objects) live as long as the process: keep them out of the later full
    # collections, the ones at exit included, which would each walk them again (0.15-0.2 s apiece).
    gc.freeze()
    return sagemaker


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _bucket_of(plan: Plan) -> str:
    """The session's default bucket: the job's output bucket (the source dir is uploaded there too)."""
    if plan.output_path.startswith("s3://"):
        return urlparse(plan.output_path).netloc
    raise DfmError("the plan has no s3:// output location: set `output` in the spec", 2)


def sagemaker_session(plan: Plan):
    """A SageMaker session that never calls STS (default bucket given) nor reads SDK config files."""
    return session_for(plan.region, _bucket_of(plan))


def session_for(region: str | None, bucket: str):
    """The session of sagemaker_session, for a region and default bucket (jobs that have no Plan)."""
    sagemaker = _sdk()
    # No SDK defaults: the SDK's own override variables pointed at an empty file. (A config dict would do
    # the same, but the SDK validates it against its JSON schema on each of its ~20 lookups: seconds in all.)
    with _environ(SAGEMAKER_ADMIN_CONFIG_OVERRIDE=os.devnull, SAGEMAKER_USER_CONFIG_OVERRIDE=os.devnull):
        return sagemaker.Session(boto_session=aws.boto_session(region), default_bucket=bucket)


def _jsonable(mapping) -> dict:
    try:
        return json.loads(json.dumps(dict(mapping)))
    except (TypeError, ValueError) as err:
        raise DfmError(f"the estimator kwargs are not JSON-able: {aws.one_line(err)}", 2) from err


def _estimator_parameters(estimator_class) -> set[str]:
    names: set[str] = set()
    for cls in estimator_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None:
            names |= {
                p.name
                for p in inspect.signature(init).parameters.values()
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            }
    return names - {"self"}


def estimator(kwargs: dict[str, Any], session):
    """TensorFlow(**kwargs); a keyword the SDK does not name is refused (the SDK would swallow it)."""
    estimator_class = _sdk().tensorflow.TensorFlow
    kwargs = _jsonable(kwargs)  # a copy: the SDK updates its hyperparameters dict in place
    unknown = sorted(set(kwargs) - _estimator_parameters(estimator_class) - {"sagemaker_session"})
    if unknown:
        raise DfmError(f"estimator kwargs unknown to {ESTIMATOR_CLASS}: {', '.join(unknown)}", 2)
    if "instance_groups" in kwargs:
        from sagemaker.instance_group import InstanceGroup

        kwargs["instance_groups"] = [InstanceGroup(**group) for group in kwargs["instance_groups"]]
    if "tensorboard_output_config" in kwargs:
        from sagemaker.debugger import TensorBoardOutputConfig

        kwargs["tensorboard_output_config"] = TensorBoardOutputConfig(**kwargs["tensorboard_output_config"])
    # The estimator makes one more client with boto3.client() (its TensorBoardApp): lend it our session,
    # whose loader has the sagemaker API model parsed already, instead of a new default one.
    default_session, boto3.DEFAULT_SESSION = boto3.DEFAULT_SESSION, session.boto_session
    try:
        return estimator_class(sagemaker_session=session, **kwargs)
    except (ValueError, TypeError) as err:
        raise DfmError(f"the SageMaker SDK refused the estimator: {aws.one_line(err)}", 2) from err
    finally:
        boto3.DEFAULT_SESSION = default_session


def _channel_input(channel: Channel):
    sagemaker = _sdk()
    if channel.kind == "s3":
        groups = list(channel.instance_groups) if channel.instance_groups else None
        return sagemaker.inputs.TrainingInput(
            s3_data=channel.uri,
            distribution=channel.distribution,
            input_mode=channel.input_mode,
            instance_groups=groups,
        )
    if channel.kind in FILE_SYSTEM_TYPES:
        if not channel.file_system_id:
            raise DfmError(f"channel {channel.name}: {channel.kind} needs a file_system_id", 2)
        # No per-channel input mode exists for file systems: the job's input mode applies.
        return sagemaker.inputs.FileSystemInput(
            file_system_id=channel.file_system_id,
            file_system_type=FILE_SYSTEM_TYPES[channel.kind],
            directory_path=channel.uri,
            file_system_access_mode=channel.access_mode,
        )
    raise DfmError(
        f"channel {channel.name}: {channel.uri} is a local path; SageMaker reads s3://, EFS or "
        "FSx (or run it with --local)",
        2,
    )


def _would_be_source_uri(estimator) -> str:
    """Where the SDK would upload sourcedir.tar.gz, computed the way it does, without uploading."""
    from sagemaker.s3 import parse_s3_url

    if estimator.code_location:
        bucket, prefix = parse_s3_url(estimator.code_location)
    else:
        bucket, prefix = parse_s3_url(estimator.output_path)[0], ""
    return f"s3://{bucket}/{estimator._assign_s3_prefix(prefix)}/sourcedir.tar.gz"


def offline_estimator(plan: Plan):
    """(session, estimator kwargs, the SDK's estimator, channel inputs) for this plan, the estimator's source
    upload replaced by the location it would upload to: the training and the tuning request start here."""
    _sdk()
    from sagemaker.fw_utils import UploadedCode

    session = sagemaker_session(plan)
    kwargs = estimator_kwargs(plan)
    job = estimator(kwargs, session)
    inputs = {channel.name: _channel_input(channel) for channel in plan.channels}

    def stage_without_upload():
        source_dir = job.source_dir
        if source_dir and source_dir.lower().startswith("s3://"):  # a tarball already there: no upload either
            return UploadedCode(s3_prefix=source_dir, script_name=job.entry_point)
        script = job.entry_point if source_dir else os.path.basename(job.entry_point)
        return UploadedCode(s3_prefix=_would_be_source_uri(job), script_name=script)

    job._stage_user_code_in_s3 = stage_without_upload
    return session, kwargs, job, inputs


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
    """The request a submit sends, built by the real SDK with zero network calls; exit 2 if it would be refused."""
    sagemaker = _sdk()
    session, kwargs, job, inputs = offline_estimator(plan)
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
        freeze(_jsonable(request)),
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
