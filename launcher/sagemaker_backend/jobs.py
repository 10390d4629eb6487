"""Job commands: submit the request the dry run shows, then describe, stop and list the jobs (plain boto3)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from launcher import recovery
from launcher.errors import DfmError
from launcher.plan import Plan
from launcher.sagemaker_backend import aws, request
from launcher.sagemaker_backend.logs import stream_logs

SOURCE_ARCHIVE = "sourcedir.tar.gz"

Echo = Callable[[str], None]


def _upload_source_dir(plan: Plan, built: request.JobRequest, session) -> None:
    upload_source_dir(plan, built.request["HyperParameters"], session)


def upload_source_dir(plan: Plan, hyperparameters: dict, session) -> None:
    """Upload the source dir's tarball to where the request's (static) hyperparameters say it is, with the SDK's
    own packer and uploader (the same bytes and S3 arguments as `fit()`); an s3:// source dir is already there."""
    if plan.source_dir.startswith("s3://"):
        return
    from sagemaker.fw_utils import tar_and_upload_dir

    uri = json.loads(hyperparameters["sagemaker_submit_directory"])
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not key.endswith(f"/{SOURCE_ARCHIVE}"):
        raise DfmError(f"the request names {uri} as the source dir, not a {SOURCE_ARCHIVE}", 1)
    with source_dir_with_files(plan) as directory:
        tar_and_upload_dir(session=session, bucket=bucket, s3_key_prefix=key[: -len(SOURCE_ARCHIVE) - 1],
                           script=plan.entry_point, directory=directory)


@contextlib.contextmanager
def source_dir_with_files(plan: Plan) -> Iterator[str]:
    """The folder to pack: the source dir itself, or a temporary copy of it with plan.source_files added."""
    if not plan.source_files:
        yield plan.source_dir
        return
    with tempfile.TemporaryDirectory(prefix="dfm-source-") as tmp:
        copy = Path(tmp) / "source"
        shutil.copytree(plan.source_dir, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name, text in plan.source_files.items():
            (copy / name).write_text(text, encoding="utf-8")
        yield str(copy)


def idle_hosts_on_s3(plan: Plan, s3) -> list[str]:
    """ShardedByS3Key deals objects to hosts: with fewer objects than hosts, some hosts get no data."""
    if plan.instance_count < 2:
        return []
    found = []
    for channel in plan.channels:
        if channel.kind != "s3" or channel.distribution != "ShardedByS3Key":
            continue
        bucket, _, prefix = channel.uri[len("s3://"):].partition("/")
        with aws.aws_errors(f"listing {channel.uri}", region=plan.region):
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=plan.instance_count + 1)
        count = sum(1 for item in listed.get("Contents", []) if not item["Key"].endswith("/"))
        if count < plan.instance_count:
            found.append(f"channel {channel.name}: {channel.uri} holds {count} object(s) for {plan.instance_count} "
                         f"hosts; with ShardedByS3Key {plan.instance_count - count} host(s) get no data")
    return found


def submit(plan: Plan, *, wait: bool, echo: Echo = print, warn: Echo = print) -> str:
    """Build the request (refusing an invalid job before uploading anything), warn of hosts the S3 data leaves
    idle, upload the source dir, create the training job with exactly that request; with `wait`, stream its
    logs to the end."""
    built = request.build(plan)
    session = aws.boto_session(plan.region)
    for line in idle_hosts_on_s3(plan, session.client("s3")):
        warn(line)
    with aws.aws_errors("creating the training job", region=plan.region):
        _upload_source_dir(plan, built, session)
        session.client("sagemaker").create_training_job(**built.request)
    job_name = built.request["TrainingJobName"]
    echo(f"submitted {job_name}")
    echo(aws.console_url(job_name, plan.region))
    if wait:
        raise_for_final_status(job_name, plan.region, stream_logs(job_name, plan.region, follow=True, echo=echo))
    return job_name


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def _summary(description: dict, region: str) -> dict:
    resources = description.get("ResourceConfig", {})
    transitions = description.get("SecondaryStatusTransitions") or []
    return {
        "job_name": description["TrainingJobName"],
        "kind": "training",
        "status": description["TrainingJobStatus"],
        "secondary_status": description.get("SecondaryStatus"),
        "status_message": transitions[-1].get("StatusMessage") if transitions else None,
        "failure_reason": description.get("FailureReason"),
        "instance_type": resources.get("InstanceType"),
        "instance_count": resources.get("InstanceCount"),
        "instance_groups": aws.instance_groups(resources),
        "created": _iso(description.get("CreationTime")),
        "started": _iso(description.get("TrainingStartTime")),
        "ended": _iso(description.get("TrainingEndTime")),
        "billable_seconds": description.get("BillableTimeInSeconds"),
        "spot": description.get("EnableManagedSpotTraining", False),
        "model_artifacts": description.get("ModelArtifacts", {}).get("S3ModelArtifacts"),
        "arn": description.get("TrainingJobArn"),
        "console_url": aws.console_url(description["TrainingJobName"], region),
    }


def describe(job_name: str, region: str | None) -> dict:
    region = aws.resolve_region(region)
    sagemaker_client = aws.client("sagemaker", region)
    with aws.aws_errors(f"describing {job_name}", job_name=job_name, region=region):
        description = sagemaker_client.describe_training_job(TrainingJobName=job_name)
    summary = _summary(description, region)
    others = [name for name in _attempts(sagemaker_client, job_name, region) if name != job_name]
    if others:  # dfm launch --wait resubmitted it (recover:), or this is a resubmission
        summary["attempts"] = sorted([job_name, *others], key=recovery.attempt_number)
    return summary


def _attempts(sagemaker_client, job_name: str, region: str) -> list[str]:
    """The training jobs that are attempts of the same job: the first one's name, alone or with `-r<N>`."""
    first = recovery.first_attempt(job_name)
    with aws.aws_errors(f"listing the attempts of {job_name}", region=region):
        pages = sagemaker_client.get_paginator("list_training_jobs").paginate(NameContains=first)
        names = [job["TrainingJobName"] for page in pages for job in page["TrainingJobSummaries"]]
    return [name for name in names if recovery.first_attempt(name) == first]


def raise_for_outcome(summary: dict) -> None:
    """Exit 1 (with the reason) for a job of any kind that failed or was stopped."""
    if summary["status"] in ("Failed", "Stopped"):
        reason = f": {aws.one_line(summary['failure_reason'])}" if summary.get("failure_reason") else ""
        raise DfmError(f"job {summary['job_name']} {summary['status']}{reason}", 1)


def raise_for_final_status(job_name: str, region: str | None, status: str) -> None:
    """After following a job's logs to `status`: exit 1 if it failed or stopped, with the failure reason
    from a describe (made only then)."""
    failed = status in ("Failed", "Stopped")
    raise_for_outcome(describe(job_name, region) if failed else {"job_name": job_name, "status": status})


def stop(job_name: str, region: str | None) -> dict:
    region = aws.resolve_region(region)
    sagemaker_client = aws.client("sagemaker", region)
    with aws.aws_errors(f"stopping {job_name}", job_name=job_name, region=region):
        sagemaker_client.stop_training_job(TrainingJobName=job_name)
    return {"job_name": job_name, "status": "Stopping", "console_url": aws.console_url(job_name, region)}


def list_jobs(region: str | None, name_contains: str | None = None, max_results: int = 20) -> list[dict]:
    """The newest training jobs first."""
    return [{"job_name": job["TrainingJobName"], "kind": "training", "status": job["TrainingJobStatus"],
             "created": _iso(job.get("CreationTime")), "ended": _iso(job.get("TrainingEndTime"))}
            for job in aws.newest(region, "list_training_jobs", "TrainingJobSummaries", name_contains, max_results)]
