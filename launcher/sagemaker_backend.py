"""Plan -> sagemaker.tensorflow.TensorFlow -> CreateTrainingJob; and the jobs it made (status, logs, stop, list).

The only module that imports the SageMaker SDK, and only inside functions: `status`, `logs`, `stop` and
`list` use plain boto3 clients and never pay for the SDK import. Every client is created from a boto3
session whose botocore default client config carries the retry policy, so the SDK's own clients (S3
upload, CreateTrainingJob) retry the same way as ours.

Estimator kwargs expected in `plan.estimator_kwargs` (passed to `TensorFlow(...)` as they are): entry_point,
source_dir, role, instance_type, instance_count, volume_size, framework_version + py_version or image_uri,
distribution (SDK v2 form: {"parameter_server": {"enabled": True}}, {"mpi": {"enabled": True,
"processes_per_host": N, "custom_mpi_options": "..."}}, {"multi_worker_mirrored_strategy": {"enabled":
True}}), hyperparameters, output_path, code_location, checkpoint_s3_uri, checkpoint_local_path,
use_spot_instances, max_wait, max_run, subnets, security_group_ids, keep_alive_period_in_seconds,
environment, tags, metric_definitions, input_mode, base_job_name. Any keyword the SDK does not name is
refused: the SDK would swallow it silently.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import gc
import inspect
import json
import logging
import os
import re
import sys
import time
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import boto3
import botocore.session
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError as BotoConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from launcher.errors import DfmError
from launcher.plan import Channel, Plan

ESTIMATOR_CLASS = "sagemaker.tensorflow.TensorFlow"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TERMINAL_STATUSES = ("Completed", "Failed", "Stopped")
MAX_ATTEMPTS = 8  # in all, first try included: botocore "standard" retries throttling and transient errors, with backoff
FILE_SYSTEM_TYPES = {"efs": "EFS", "fsx": "FSxLustre"}
# The SDK config submit() gives the session just before fit(): it opts out of the telemetry request fit()
# would otherwise send.
SDK_CONFIG = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}

Echo = Callable[[str], None]


# ---------------------------------------------------------------------------------------------------
# sessions, clients, errors


def client_config() -> Config:
    return Config(retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}, connect_timeout=10, read_timeout=60)


def resolve_region(region: str | None) -> str:
    """`--region`, else AWS_REGION / AWS_DEFAULT_REGION / the profile's region."""
    region = region or botocore.session.get_session().get_config_variable("region")
    if not region:
        raise DfmError("no AWS region: pass --region, or set AWS_REGION (or region in ~/.aws/config)", 2)
    return region


@functools.lru_cache(maxsize=None)
def _shared_loader():
    # Sessions come and go (one per command, several per test run); the parsed API models can stay.
    return botocore.session.get_session().get_component("data_loader")


def boto_session(region: str | None) -> boto3.Session:
    core = botocore.session.get_session()
    core.register_component("data_loader", _shared_loader())
    core.set_default_client_config(client_config())
    return boto3.Session(botocore_session=core, region_name=resolve_region(region))


def client(service: str, region: str | None):
    return boto_session(region).client(service)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


THROTTLING_CODES = {"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
                    "SlowDown"}
CREDENTIAL_CODES = {"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                    "SignatureDoesNotMatch", "InvalidAccessKeyId"}


def _client_error_message(err: ClientError, action: str, job_name: str | None, region: str | None) -> str:
    error = err.response.get("Error", {})
    code, message = error.get("Code", "Unknown"), _one_line(error.get("Message", ""))
    if code in THROTTLING_CODES:
        return f"AWS throttled {action} even after {MAX_ATTEMPTS} attempts: try again in a minute"
    if code in CREDENTIAL_CODES:
        return f"AWS refused the credentials ({code}): refresh them (aws sso login, or new keys) and retry"
    if code in {"AccessDenied", "AccessDeniedException"}:
        return (f"AWS denied {action}: {message} (grant these credentials the sagemaker/s3/logs permissions, "
                "and iam:PassRole on the job's role)")
    not_found = code in {"ResourceNotFound", "ResourceNotFoundException", "NoSuchBucket"} or (
        code == "ValidationException" and re.search(r"could not find|does not exist|not found", message, re.I))
    if not_found and job_name:
        return f"no training job named {job_name} in {region}: check the name and --region"
    if not_found:
        return f"{action}: not found: {message}"
    return f"AWS refused {action} ({code}): {message}"


@contextlib.contextmanager
def aws_errors(action: str, *, job_name: str | None = None, region: str | None = None) -> Iterator[None]:
    """Turn botocore failures into one-line DfmErrors with a fix hint."""
    try:
        yield
    except (NoCredentialsError, PartialCredentialsError) as err:
        raise DfmError(f"no usable AWS credentials for {action} ({_one_line(err)}): set AWS_PROFILE or "
                       "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`", 2) from err
    except NoRegionError as err:
        raise DfmError("no AWS region: pass --region, or set AWS_REGION", 2) from err
    except BotoConnectionError as err:
        raise DfmError(f"cannot reach AWS for {action} ({_one_line(err)}): check the network, proxy "
                       "and region", 1) from err
    except ClientError as err:
        raise DfmError(_client_error_message(err, action, job_name, region), 1) from err
    except S3UploadFailedError as err:  # boto3's transfer manager wraps the S3 ClientError
        raise DfmError(f"{action}: uploading the source dir failed: {_one_line(err)}", 1) from err
    except BotoCoreError as err:
        raise DfmError(f"{action} failed: {_one_line(err)}", 1) from err


def console_url(job_name: str, region: str) -> str:
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{job_name}"


# ---------------------------------------------------------------------------------------------------
# Plan -> estimator, inputs, request (the SageMaker SDK)


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


def _bucket_of(plan: Plan) -> str:
    """The session's default bucket: the job's output bucket (build_plan also uploads the code there)."""
    if plan.output_path and str(plan.output_path).startswith("s3://"):
        return urlparse(str(plan.output_path)).netloc
    raise DfmError("the plan has no s3:// output location: set `output` in the spec", 2)


def sagemaker_session(plan: Plan):
    """A SageMaker session that never calls STS (default bucket given) nor reads SDK config files."""
    sagemaker = _sdk()
    # No SDK defaults: the SDK's own override variables pointed at an empty file. A config dict would do
    # the same, but the SDK validates it against its JSON schema three times here and on each of its ~20
    # later lookups (seconds in all). SDK_CONFIG holds nothing but the telemetry opt-out, which only fit()
    # reads: submit() sets it just before calling fit().
    with _environ(SAGEMAKER_ADMIN_CONFIG_OVERRIDE=os.devnull, SAGEMAKER_USER_CONFIG_OVERRIDE=os.devnull):
        return sagemaker.Session(boto_session=boto_session(plan.region), default_bucket=_bucket_of(plan))


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


def _jsonable(mapping) -> dict:
    try:
        return json.loads(json.dumps(dict(mapping)))
    except (TypeError, ValueError) as err:
        raise DfmError(f"the plan's estimator kwargs are not JSON-able: {_one_line(err)}", 2) from err


def _estimator_parameters(estimator_class) -> set[str]:
    names: set[str] = set()
    for cls in estimator_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None:
            names |= {p.name for p in inspect.signature(init).parameters.values()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return names - {"self"}


def estimator_from_plan(plan: Plan, session):
    sagemaker = _sdk()
    estimator_class = sagemaker.tensorflow.TensorFlow
    kwargs = _jsonable(plan.estimator_kwargs)  # a copy: the SDK updates its hyperparameters dict in place
    unknown = sorted(set(kwargs) - _estimator_parameters(estimator_class) - {"sagemaker_session"})
    if unknown:
        raise DfmError(f"estimator kwargs unknown to {ESTIMATOR_CLASS}: {', '.join(unknown)}", 2)
    # The estimator makes one more client with boto3.client() (its TensorBoardApp): lend it our session,
    # whose loader has the sagemaker API model parsed already, instead of a new default one.
    default_session, boto3.DEFAULT_SESSION = boto3.DEFAULT_SESSION, session.boto_session
    try:
        return estimator_class(sagemaker_session=session, **kwargs)
    except (ValueError, TypeError) as err:
        raise DfmError(f"the SageMaker SDK refused the estimator: {_one_line(err)}", 2) from err
    finally:
        boto3.DEFAULT_SESSION = default_session


def _channel_input(channel: Channel):
    sagemaker = _sdk()
    if channel.kind == "s3":
        return sagemaker.inputs.TrainingInput(s3_data=channel.uri, distribution=channel.distribution,
                                              input_mode=channel.input_mode)
    if channel.kind in FILE_SYSTEM_TYPES:
        if not channel.file_system_id:
            raise DfmError(f"channel {channel.name}: {channel.kind} needs a file_system_id", 2)
        # No per-channel input mode exists for file systems: the job's input mode applies.
        return sagemaker.inputs.FileSystemInput(
            file_system_id=channel.file_system_id, file_system_type=FILE_SYSTEM_TYPES[channel.kind],
            directory_path=channel.uri, file_system_access_mode=channel.access_mode)
    raise DfmError(f"channel {channel.name}: {channel.uri} is a local path; SageMaker reads s3://, EFS or "
                   "FSx (or run it with --local)", 2)


def inputs_from_plan(plan: Plan) -> dict:
    return {channel.name: _channel_input(channel) for channel in plan.channels}


def _would_be_source_uri(estimator) -> str:
    """Where the SDK would upload sourcedir.tar.gz, computed the way it does, without uploading."""
    from sagemaker.s3 import parse_s3_url

    if estimator.code_location:
        bucket, prefix = parse_s3_url(estimator.code_location)
    else:
        bucket, prefix = parse_s3_url(estimator.output_path)[0], ""
    return f"s3://{bucket}/{estimator._assign_s3_prefix(prefix)}/sourcedir.tar.gz"


def _offline_request(plan: Plan) -> tuple[Any, dict, dict, dict]:
    sagemaker = _sdk()
    from sagemaker.fw_utils import UploadedCode

    session = sagemaker_session(plan)
    estimator = estimator_from_plan(plan, session)
    inputs = inputs_from_plan(plan)

    def stage_without_upload():
        source_dir = estimator.source_dir
        if source_dir and source_dir.lower().startswith("s3://"):  # a tarball already there: no upload either
            return UploadedCode(s3_prefix=source_dir, script_name=estimator.entry_point)
        script = estimator.entry_point if source_dir else os.path.basename(estimator.entry_point)
        return UploadedCode(s3_prefix=_would_be_source_uri(estimator), script_name=script)

    estimator._stage_user_code_in_s3 = stage_without_upload
    try:
        estimator._prepare_for_training(job_name=plan.job_name)
        args = sagemaker.estimator._TrainingJob.get_train_args(estimator, inputs, None)
    except ValueError as err:
        raise DfmError(f"the SageMaker SDK refused the job: {_one_line(err)}", 2) from err
    request = session.get_train_request(**args)
    _validate_request(session.sagemaker_client, request)
    return estimator, inputs, args, request


def _validate_request(sagemaker_client, request: dict) -> None:
    from botocore.validate import ParamValidator

    shape = sagemaker_client.meta.service_model.operation_model("CreateTrainingJob").input_shape
    from launcher import service_model

    report = ParamValidator().validate(request, shape)
    if report.has_errors():
        raise DfmError(f"the CreateTrainingJob request would be refused: {_one_line(report.generate_report())}", 2)
    # The validator checks types and minimums; the service also refuses enums, maximums and patterns.
    refused = [f"{path}: {message}" for path, message in service_model.walk(request)]
    if refused:
        raise DfmError(f"the CreateTrainingJob request would be refused: {_one_line('; '.join(refused))}", 2)


def dry_run(plan: Plan) -> dict:
    """What a submit would send, built by the real SDK with zero network calls."""
    _, inputs, args, request = _offline_request(plan)
    return {
        "estimator": {"class": ESTIMATOR_CLASS, "kwargs": _jsonable(plan.estimator_kwargs)},
        "inputs": {name: dict(channel_input.config) for name, channel_input in inputs.items()},
        "request": request,
        "image_uri": args["image_uri"],
    }


def submit(plan: Plan, *, wait: bool, echo: Echo = print) -> str:
    """Upload the source dir, create the training job; with `wait`, stream its logs to the end."""
    _offline_request(plan)  # refuse an invalid job before uploading anything
    session = sagemaker_session(plan)
    estimator = estimator_from_plan(plan, session)
    inputs = inputs_from_plan(plan)
    session.sagemaker_config = SDK_CONFIG
    with aws_errors("creating the training job", region=plan.region):
        estimator.fit(inputs, wait=False, job_name=plan.job_name)
    job_name = estimator.latest_training_job.name
    echo(f"submitted {job_name}")
    echo(console_url(job_name, plan.region))
    if wait:
        raise_for_final_status(job_name, plan.region, stream_logs(job_name, plan.region, follow=True, echo=echo))
    return job_name


# ---------------------------------------------------------------------------------------------------
# jobs: describe, logs, stop, list (boto3 only)


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def _summary(description: dict, region: str) -> dict:
    resources = description.get("ResourceConfig", {})
    transitions = description.get("SecondaryStatusTransitions") or []
    return {
        "job_name": description["TrainingJobName"],
        "status": description["TrainingJobStatus"],
        "secondary_status": description.get("SecondaryStatus"),
        "status_message": transitions[-1].get("StatusMessage") if transitions else None,
        "failure_reason": description.get("FailureReason"),
        "instance_type": resources.get("InstanceType"),
        "instance_count": resources.get("InstanceCount"),
        "created": _iso(description.get("CreationTime")),
        "started": _iso(description.get("TrainingStartTime")),
        "ended": _iso(description.get("TrainingEndTime")),
        "billable_seconds": description.get("BillableTimeInSeconds"),
        "spot": description.get("EnableManagedSpotTraining", False),
        "model_artifacts": description.get("ModelArtifacts", {}).get("S3ModelArtifacts"),
        "arn": description.get("TrainingJobArn"),
        "console_url": console_url(description["TrainingJobName"], region),
    }


def describe(job_name: str, region: str | None) -> dict:
    region = resolve_region(region)
    sagemaker_client = client("sagemaker", region)
    with aws_errors(f"describing {job_name}", job_name=job_name, region=region):
        description = sagemaker_client.describe_training_job(TrainingJobName=job_name)
    return _summary(description, region)


def raise_for_outcome(summary: dict) -> None:
    if summary["status"] in ("Failed", "Stopped"):
        reason = f": {_one_line(summary['failure_reason'])}" if summary.get("failure_reason") else ""
        raise DfmError(f"job {summary['job_name']} {summary['status']}{reason}", 1)


def raise_for_final_status(job_name: str, region: str | None, status: str) -> None:
    """After following a job's logs to `status`: exit 1 if it failed or stopped, with the failure reason
    from a describe (made only then)."""
    failed = status in ("Failed", "Stopped")
    raise_for_outcome(describe(job_name, region) if failed else {"job_name": job_name, "status": status})


def _host_of(stream_name: str) -> str:
    # Streams are named <job>/<host>-<epoch seconds>, e.g. deepfm-ps-.../algo-2-1700000000
    host = stream_name.split("/", 1)[-1]
    return re.sub(r"-\d{9,}$", "", host)


class _LogCursor:
    """Reads a job's CloudWatch events once each, across all of its instances' streams."""

    def __init__(self, logs_client, job_name: str):
        self.logs, self.job_name = logs_client, job_name
        self.start_ms, self.ids_at_start = 0, set()

    def _streams(self) -> list[str]:
        names = []
        pages = self.logs.get_paginator("describe_log_streams").paginate(
            logGroupName=LOG_GROUP, logStreamNamePrefix=f"{self.job_name}/")
        for page in pages:
            names += [stream["logStreamName"] for stream in page["logStreams"]]
        return names

    def new_events(self) -> list[dict]:
        try:
            streams = self._streams()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []  # no instance has written a line yet
            raise
        events = []
        for first in range(0, len(streams), 100):  # FilterLogEvents takes at most 100 stream names
            pages = self.logs.get_paginator("filter_log_events").paginate(
                logGroupName=LOG_GROUP, logStreamNames=streams[first:first + 100], startTime=self.start_ms)
            for page in pages:
                events += page["events"]
        fresh = [e for e in events if e["eventId"] not in self.ids_at_start]
        fresh.sort(key=lambda e: (e["timestamp"], e.get("ingestionTime", 0)))
        if fresh:
            last = fresh[-1]["timestamp"]
            previous = self.ids_at_start if last == self.start_ms else set()
            self.start_ms = last
            self.ids_at_start = previous | {e["eventId"] for e in fresh if e["timestamp"] == last}
        return fresh


def _render_event(event: dict, multi_host: bool, as_json: bool) -> str:
    host = _host_of(event["logStreamName"])
    message = event["message"].rstrip("\n")
    if as_json:
        return json.dumps({"timestamp": event["timestamp"], "host": host, "message": message})
    return f"[{host}] {message}" if multi_host else message


def _progress_line(description: dict) -> str:
    secondary = description.get("SecondaryStatus") or description["TrainingJobStatus"]
    transitions = description.get("SecondaryStatusTransitions") or []
    message = transitions[-1].get("StatusMessage") if transitions and transitions[-1].get("Status") == secondary else None
    return f"-- {secondary}" + (f": {_one_line(message)}" if message else "")


def stream_logs(job_name: str, region: str | None, follow: bool = False, echo: Echo = print, *,
                poll_seconds: float = 10.0, as_json: bool = False) -> str:
    """Print the job's log lines; with `follow`, keep polling until the job ends. Returns its status.

    Following in text, a `-- <state>` line marks each change of SageMaker's secondary status (starting,
    downloading, training, uploading...): minutes pass before an instance writes its first line.
    """
    region = resolve_region(region)
    session = boto_session(region)
    sagemaker_client, logs_client = session.client("sagemaker"), session.client("logs")
    cursor = _LogCursor(logs_client, job_name)
    was_running, last_progress = False, None
    with aws_errors(f"reading the logs of {job_name}", job_name=job_name, region=region):
        while True:
            description = sagemaker_client.describe_training_job(TrainingJobName=job_name)
            status = description["TrainingJobStatus"]
            multi_host = description.get("ResourceConfig", {}).get("InstanceCount", 1) > 1
            progress = _progress_line(description)
            if follow and not as_json and progress != last_progress:
                echo(progress)
                last_progress = progress
            for event in cursor.new_events():
                echo(_render_event(event, multi_host, as_json))
            if not follow:
                return status
            if status in TERMINAL_STATUSES:
                if was_running:  # lines written just before the end reach CloudWatch a little later
                    time.sleep(poll_seconds)
                    for event in cursor.new_events():
                        echo(_render_event(event, multi_host, as_json))
                return status
            was_running = True
            time.sleep(poll_seconds)


def stop(job_name: str, region: str | None) -> dict:
    region = resolve_region(region)
    sagemaker_client = client("sagemaker", region)
    with aws_errors(f"stopping {job_name}", job_name=job_name, region=region):
        sagemaker_client.stop_training_job(TrainingJobName=job_name)
    return {"job_name": job_name, "status": "Stopping", "console_url": console_url(job_name, region)}


def list_jobs(region: str | None, name_contains: str | None = None, max_results: int = 20) -> list[dict]:
    """The newest training jobs first."""
    region = resolve_region(region)
    sagemaker_client = client("sagemaker", region)
    query: dict[str, Any] = {"SortBy": "CreationTime", "SortOrder": "Descending",
                             "PaginationConfig": {"MaxItems": max_results, "PageSize": min(max_results, 100)}}
    if name_contains:
        query["NameContains"] = name_contains
    jobs = []
    with aws_errors("listing training jobs", region=region):
        for page in sagemaker_client.get_paginator("list_training_jobs").paginate(**query):
            jobs += [{"job_name": job["TrainingJobName"], "status": job["TrainingJobStatus"],
                      "created": _iso(job.get("CreationTime")), "ended": _iso(job.get("TrainingEndTime"))}
                     for job in page["TrainingJobSummaries"]]
    return jobs[:max_results]
