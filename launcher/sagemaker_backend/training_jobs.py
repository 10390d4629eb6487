"""Training jobs: submit a built request (exactly the value the dry run shows), then describe, stop and list the
jobs (plain boto3)."""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from launcher.plans import recovery
from launcher.errors import DfmError
from launcher.plans.training_plan import Plan
from launcher.sagemaker_backend import aws, training_request, warm_start_source

Echo = Callable[[str], None]


def upload_source(upload: training_request.SourceUpload, session) -> None:
    """Pack and upload the source dir as the upload says, with the SDK's own packer and uploader (the same bytes
    and S3 arguments as `fit()`)."""
    from sagemaker.fw_utils import tar_and_upload_dir

    with source_dir_with_files(upload.directory, upload.files) as directory:
        tar_and_upload_dir(
            session=session,
            bucket=upload.bucket,
            s3_key_prefix=upload.key_prefix,
            script=upload.script,
            directory=directory,
        )


def upload_source_dir(plan: Plan, hyperparameters: Mapping[str, Any], session) -> None:
    """The source upload named by a request's (static) hyperparameters: the tuning submit's."""
    upload = training_request.source_upload(plan, hyperparameters)
    if upload is not None:
        upload_source(upload, session)


@contextlib.contextmanager
def source_dir_with_files(source_dir: str, files: Mapping[str, str]) -> Iterator[str]:
    """The folder to pack: a temporary copy of the source dir holding only what `source_files` lets in (the
    dry run's listing), with `files` added."""
    from launcher.sagemaker_backend.source_files import list_source

    with tempfile.TemporaryDirectory(prefix="dfm-source-") as tmp:
        copy = Path(tmp) / "source"
        copy.mkdir()
        for relative, _ in list_source(source_dir).files:
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(source_dir) / relative, copy / relative)
        for name, text in files.items():
            (copy / name).write_text(text, encoding="utf-8")
        yield str(copy)


def _hosts_of(arguments: Mapping[str, Any], groups: list | None) -> int:
    """The hosts a channel reaches: its instance groups' (InstanceGroupNames), or every host of the job."""
    resources = arguments["ResourceConfig"]
    if "InstanceCount" in resources:
        return resources["InstanceCount"]
    return sum(
        g["InstanceCount"] for g in resources["InstanceGroups"] if not groups or g["InstanceGroupName"] in groups
    )


def idle_hosts_on_s3(training: training_request.TrainingRequest, s3) -> list[str]:
    """ShardedByS3Key deals objects to hosts: with fewer objects than hosts, some hosts get no data."""
    arguments, found = training.create_training_job, []
    for channel in arguments.get("InputDataConfig", ()):
        source = channel["DataSource"].get("S3DataSource")
        if source is None or source.get("S3DataDistributionType") != "ShardedByS3Key":
            continue
        hosts = _hosts_of(arguments, source.get("InstanceGroupNames"))
        if hosts < 2:
            continue
        uri = source["S3Uri"]
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        with aws.aws_errors(f"listing {uri}", region=training.region):
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=hosts + 1)
        count = sum(1 for item in listed.get("Contents", []) if not item["Key"].endswith("/"))
        if count < hosts:
            found.append(
                f"channel {channel['ChannelName']}: {uri} holds {count} object(s) for {hosts} "
                f"hosts; with ShardedByS3Key {hosts - count} host(s) get no data"
            )
    return found


def submit(training: training_request.TrainingRequest, *, echo: Echo = print, warn: Echo = print) -> str:
    """Execute a built request (`training_request.build` refused an invalid job before anything is uploaded): warn of
    hosts the S3 data leaves idle, upload the source dir, create the training job with exactly these arguments.
    Following it to its end is `attempts.launch`'s (logs, stall watch, recovery)."""
    region = training.region
    session = aws.boto_session(region)
    problem = warm_start_source.source_problem(training.plan, session.client("s3"))
    if problem:
        raise DfmError(problem, 1)
    for line in idle_hosts_on_s3(training, session.client("s3")):
        warn(line)
    with aws.aws_errors("creating the training job", region=region):
        if training.upload is not None:
            upload_source(training.upload, session)
        session.client("sagemaker").create_training_job(**training.arguments())
    job_name = training.job_name
    echo(f"submitted {job_name}")
    echo(aws.console_url(job_name, region))
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
    others = [name for name in _attempts(sagemaker_client, description, region) if name != job_name]
    if others:  # dfm launch --wait resubmitted it (recover:), or this is a resubmission
        summary["attempts"] = sorted([job_name, *others], key=recovery.attempt_number)
    return summary


def _attempts(sagemaker_client, description: dict, region: str) -> list[str]:
    """The training jobs that are attempts of the same job: the first one, and those tagged with its name."""
    job_name = description["TrainingJobName"]
    with aws.aws_errors(f"listing the attempts of {job_name}", region=region):
        tags = sagemaker_client.list_tags(ResourceArn=description["TrainingJobArn"]).get("Tags", [])
        first = next((tag["Value"] for tag in tags if tag["Key"] == recovery.FIRST_ATTEMPT_TAG), job_name)
        found = sagemaker_client.get_paginator("search").paginate(
            Resource="TrainingJob",
            SearchExpression={
                "Filters": [{"Name": f"Tags.{recovery.FIRST_ATTEMPT_TAG}", "Operator": "Equals", "Value": first}]
            },
        )
        tagged = [result["TrainingJob"]["TrainingJobName"] for page in found for result in page["Results"]]
    return [first, *tagged] if tagged else []


def raise_for_outcome(summary: dict) -> None:
    """Exit 1 (with the reason) for a job of any kind that failed or was stopped."""
    if summary["status"] in ("Failed", "Stopped"):
        reason = f": {aws.one_line(summary['failure_reason'])}" if summary.get("failure_reason") else ""
        raise DfmError(f"job {summary['job_name']} {summary['status']}{reason}", 1)


def stop(job_name: str, region: str | None) -> dict:
    return aws.stop_job(job_name, region, "Training", "training", aws.console_url)


def list_jobs(region: str | None, name_contains: str | None = None, max_results: int = 20) -> list[dict]:
    """The newest training jobs first."""
    return aws.newest_jobs(region, "Training", "training", name_contains, max_results)
