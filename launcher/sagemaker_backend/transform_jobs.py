"""Batch transform jobs on SageMaker: describe, stop, list and logs, in the shape `kinds` gives every job kind."""

from __future__ import annotations

from launcher.sagemaker_backend import aws, logs
from launcher.sagemaker_backend.training_jobs import _iso

LOG_GROUP = "/aws/sagemaker/TransformJobs"


def describe(name: str, region: str | None) -> dict:
    region = aws.resolve_region(region)
    with aws.aws_errors(f"describing {name}", job_name=name, region=region):
        found = aws.client("sagemaker", region).describe_transform_job(TransformJobName=name)
    resources = found.get("TransformResources", {})
    return {
        "job_name": found["TransformJobName"],
        "kind": "transform",
        "status": found["TransformJobStatus"],
        "failure_reason": found.get("FailureReason"),
        "model_name": found.get("ModelName"),
        "instance_type": resources.get("InstanceType"),
        "instance_count": resources.get("InstanceCount"),
        "input": found.get("TransformInput", {}).get("DataSource", {}).get("S3DataSource", {}).get("S3Uri"),
        "output": found.get("TransformOutput", {}).get("S3OutputPath"),
        "created": _iso(found.get("CreationTime")),
        "started": _iso(found.get("TransformStartTime")),
        "ended": _iso(found.get("TransformEndTime")),
        "arn": found.get("TransformJobArn"),
        "console_url": console_url(found["TransformJobName"], region),
    }


def stop(name: str, region: str | None) -> dict:
    return aws.stop_job(name, region, "Transform", "transform", console_url)


def list_jobs(region: str | None, name_contains: str | None = None, max_results: int = 20) -> list[dict]:
    """The newest transform jobs first."""
    return aws.newest_jobs(region, "Transform", "transform", name_contains, max_results)


def _state(sagemaker_client, name: str) -> logs.JobState:
    found = sagemaker_client.describe_transform_job(TransformJobName=name)
    status = found["TransformJobStatus"]
    return logs.JobState(status, f"-- {status}", found.get("TransformResources", {}).get("InstanceCount", 1) > 1)


LOGS = logs.LogSource(LOG_GROUP, _state)


def stream_logs(name: str, region: str | None, **options) -> str:
    """Print the job's log lines (every instance's, in time order); with follow, until it ends. -> its status."""
    return logs.stream_logs(name, region, source=LOGS, **options)


def console_url(name: str, region: str) -> str:
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/transform-jobs/{name}"
