"""The SageMaker SDK v2, imported here only, inside functions, and quietly; its sessions (no STS call, no SDK
config files); the TensorFlow estimator built offline from a Plan, with the source upload replaced by the location
it would upload to: the training and the tuning request both start from it."""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import logging
import os
import sys
from typing import Any, Iterator
from urllib.parse import urlparse

import boto3

from launcher.errors import DfmError
from launcher.facts.conventions import MODEL_CHANNEL
from launcher.plans.training_plan import Channel, Plan
from launcher.plans.warm_start import MODEL
from launcher.sagemaker_backend import aws
from launcher.sagemaker_backend.estimator_arguments import ESTIMATOR_CLASS, estimator_kwargs, jsonable

FILE_SYSTEM_TYPES = {"efs": "EFS", "fsx": "FSxLustre"}


@functools.lru_cache(maxsize=None)
def sdk():
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
    sagemaker = sdk()
    # No SDK defaults: the SDK's own override variables pointed at an empty file. (A config dict would do
    # the same, but the SDK validates it against its JSON schema on each of its ~20 lookups: seconds in all.)
    with _environ(SAGEMAKER_ADMIN_CONFIG_OVERRIDE=os.devnull, SAGEMAKER_USER_CONFIG_OVERRIDE=os.devnull):
        return sagemaker.Session(boto_session=aws.boto_session(region), default_bucket=bucket)


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
    estimator_class = sdk().tensorflow.TensorFlow
    kwargs = jsonable(kwargs)  # a copy: the SDK updates its hyperparameters dict in place
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
    sagemaker = sdk()
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


def _model_channel(plan: Plan, channel: Channel) -> bool:
    """The warm start's model channel: the estimator's model_uri makes it (content type and all), not an input."""
    return plan.warm_start is not None and plan.warm_start.kind == MODEL and channel.name == MODEL_CHANNEL


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
    sdk()
    from sagemaker.fw_utils import UploadedCode

    session = sagemaker_session(plan)
    kwargs = estimator_kwargs(plan)
    job = estimator(kwargs, session)
    inputs = {channel.name: _channel_input(channel) for channel in plan.channels if not _model_channel(plan, channel)}

    def stage_without_upload():
        source_dir = job.source_dir
        if source_dir and source_dir.lower().startswith("s3://"):  # a tarball already there: no upload either
            return UploadedCode(s3_prefix=source_dir, script_name=job.entry_point)
        script = job.entry_point if source_dir else os.path.basename(job.entry_point)
        return UploadedCode(s3_prefix=_would_be_source_uri(job), script_name=script)

    job._stage_user_code_in_s3 = stage_without_upload
    return session, kwargs, job, inputs
