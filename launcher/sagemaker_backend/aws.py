"""AWS sessions and errors: boto3 sessions whose clients all retry the same way, and botocore failures turned
into one-line DfmErrors with a fix hint and an exit code (2: the user's setup; 1: AWS refused or failed)."""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Iterator

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

MAX_ATTEMPTS = (
    8  # in all, first try included: botocore "standard" retries throttling and transient errors, with backoff
)
THROTTLING_CODES = {"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded", "SlowDown"}
CREDENTIAL_CODES = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
}


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
    """A boto3 session whose every client (the SDK's too) carries the retry policy of client_config()."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _shared_loader())
    core.set_default_client_config(client_config())
    return boto3.Session(botocore_session=core, region_name=resolve_region(region))


def client(service: str, region: str | None):
    return boto_session(region).client(service)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def console_url(job_name: str, region: str) -> str:
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{job_name}"


class JobNotFound(DfmError):
    """SageMaker has no job of that name (of the kind asked about)."""


def not_found(err: ClientError) -> bool:
    """Whether AWS answered that the thing asked about does not exist."""
    return _not_found(err)


def _not_found(err: ClientError) -> bool:
    error = err.response.get("Error", {})
    code, message = error.get("Code", "Unknown"), one_line(error.get("Message", ""))
    return code in {"ResourceNotFound", "ResourceNotFoundException", "NoSuchBucket"} or bool(
        code == "ValidationException" and re.search(r"could not find|does not exist|not found", message, re.I)
    )


def _client_error_message(err: ClientError, action: str, job_name: str | None, region: str | None) -> str:
    error = err.response.get("Error", {})
    code, message = error.get("Code", "Unknown"), one_line(error.get("Message", ""))
    if code in THROTTLING_CODES:
        return f"AWS throttled {action} even after {MAX_ATTEMPTS} attempts: try again in a minute"
    if code in CREDENTIAL_CODES:
        return f"AWS refused the credentials ({code}): refresh them (aws sso login, or new keys) and retry"
    if code in {"AccessDenied", "AccessDeniedException"}:
        return (
            f"AWS denied {action}: {message} (grant these credentials the sagemaker/s3/logs permissions, "
            "and iam:PassRole on the job's role)"
        )
    not_found = _not_found(err)
    if not_found:
        return f"{action}: not found ({code}): {message}"
    return f"AWS refused {action} ({code}): {message}"


@contextlib.contextmanager
def aws_errors(action: str, *, job_name: str | None = None, region: str | None = None) -> Iterator[None]:
    """Turn botocore failures into one-line DfmErrors with a fix hint."""
    try:
        yield
    except (NoCredentialsError, PartialCredentialsError) as err:
        raise DfmError(
            f"no usable AWS credentials for {action} ({one_line(err)}): set AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`",
            2,
        ) from err
    except NoRegionError as err:
        raise DfmError("no AWS region: pass --region, or set AWS_REGION", 2) from err
    except BotoConnectionError as err:
        raise DfmError(
            f"cannot reach AWS for {action} ({one_line(err)}): check the network, proxy and region", 1
        ) from err
    except ClientError as err:
        if job_name and _not_found(err):
            raise JobNotFound(f"no job named {job_name} in {region}: check the name and --region", 1) from err
        raise DfmError(_client_error_message(err, action, job_name, region), 1) from err
    except S3UploadFailedError as err:  # boto3's transfer manager wraps the S3 ClientError
        raise DfmError(f"{action}: uploading the source dir failed: {one_line(err)}", 1) from err
    except BotoCoreError as err:
        raise DfmError(f"{action} failed: {one_line(err)}", 1) from err


def instance_groups(resource_config: dict) -> list[dict]:
    """[{group, instance_type, instance_count}] of a DescribeTrainingJob ResourceConfig: its InstanceGroups,
    or the one group of identical hosts (a heterogeneous job has no InstanceType/InstanceCount)."""
    groups = resource_config.get("InstanceGroups") or []
    if groups:
        return [
            {
                "group": g.get("InstanceGroupName"),
                "instance_type": g.get("InstanceType"),
                "instance_count": g.get("InstanceCount", 0),
            }
            for g in groups
        ]
    return [
        {
            "group": None,
            "instance_type": resource_config.get("InstanceType"),
            "instance_count": resource_config.get("InstanceCount", 1),
        }
    ]


def newest(
    region: str | None, operation: str, summaries: str, name_contains: str | None, max_results: int
) -> list[dict]:
    """The summaries of a List*Jobs operation (e.g. list_training_jobs, "TrainingJobSummaries"), newest first."""
    region = resolve_region(region)
    query: dict = {
        "SortBy": "CreationTime",
        "SortOrder": "Descending",
        "PaginationConfig": {"MaxItems": max_results, "PageSize": min(max_results, 100)},
    }
    if name_contains:
        query["NameContains"] = name_contains
    found: list[dict] = []
    with aws_errors(f"listing jobs ({operation})", region=region):
        for page in client("sagemaker", region).get_paginator(operation).paginate(**query):
            found += page[summaries]
    return found[:max_results]


def _snake(noun: str) -> str:
    """An API noun as boto3's method names spell it: HyperParameterTuning -> hyper_parameter_tuning."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", noun).lower()


def stop_job(name: str, region: str | None, noun: str, kind: str, console) -> dict:
    """Stop<noun>Job on the job `name` (`noun` as newest_jobs's) -> the `dfm stop` row; `console(name, region)` is
    the job's console page."""
    region = resolve_region(region)
    with aws_errors(f"stopping {name}", job_name=name, region=region):
        getattr(client("sagemaker", region), f"stop_{_snake(noun)}_job")(**{f"{noun}JobName": name})
    return {"job_name": name, "kind": kind, "status": "Stopping", "console_url": console(name, region)}


def newest_jobs(
    region: str | None, noun: str, kind: str, name_contains: str | None, max_results: int, **extra: str
) -> list[dict]:
    """A List*Jobs operation's jobs, newest first, as `dfm list` rows. `noun` prefixes the API's names
    (Training -> list_training_jobs, TrainingJobSummaries, TrainingJobName, TrainingJobStatus, TrainingEndTime);
    `extra` maps more row keys to summary keys."""
    operation = "list_" + _snake(noun) + "_jobs"

    def iso(value):
        return value.isoformat() if hasattr(value, "isoformat") else value

    return [
        {
            "job_name": job[f"{noun}JobName"],
            "kind": kind,
            "status": job[f"{noun}JobStatus"],
            **{key: job.get(member) for key, member in extra.items()},
            "created": iso(job.get("CreationTime")),
            "ended": iso(job.get(f"{noun}EndTime")),
        }
        for job in newest(region, operation, f"{noun}JobSummaries", name_contains, max_results)
    ]
