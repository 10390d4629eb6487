"""The SageMaker backend: AWS sessions and errors (`aws`), the request built from a Plan (`training_request.build`:
a frozen TrainingRequest the dry run prints), and the job commands (`training_jobs.submit(request)` executes exactly
it; `logs`). The SDK is imported only inside `sdk`'s functions; status, logs, stop and list use plain
boto3 clients and never pay for it.
"""

from launcher.sagemaker_backend.aws import MAX_ATTEMPTS, aws_errors, boto_session, client, console_url, resolve_region
from launcher.sagemaker_backend.training_jobs import describe, list_jobs, raise_for_outcome, stop, submit
from launcher.sagemaker_backend.logs import stream_logs
from launcher.sagemaker_backend.estimator_arguments import estimator_kwargs
from launcher.sagemaker_backend.training_request import TrainingRequest, build, dry_run

__all__ = [
    "MAX_ATTEMPTS",
    "aws_errors",
    "boto_session",
    "client",
    "console_url",
    "resolve_region",
    "describe",
    "list_jobs",
    "raise_for_outcome",
    "stop",
    "submit",
    "stream_logs",
    "dry_run",
    "estimator_kwargs",
    "build",
    "TrainingRequest",
]
