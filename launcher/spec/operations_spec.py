"""The spec's operations sections: how a job survives (`retry:`, `recover:`, `stall_timeout`) and how it is
watched (`tensorboard:`, `mlflow:`). Pydantic only; the rules and the plan give them their meaning."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field, Tag

from launcher.spec.value_types import InstanceTypeName, S3OrAuto, _by_shape, _pattern, _Strict


class Retry(_Strict):
    """SageMaker's own retry of a job that failed with an internal error (RetryStrategy)."""

    max_attempts: int = Field(
        description="RetryStrategy.MaximumRetryAttempts: reruns after the first run of a job "
        "that failed with an internal server error; N means up to N+1 runs"
    )


class Recover(_Strict):
    """dfm's resubmission of a job that lost its capacity, while `dfm launch --wait` watches it."""

    max_restarts: int = Field(3, ge=1, le=100, description="resubmissions at most, after the first attempt")
    backoff_s: float = Field(60, ge=0, le=3600, description="wait before the first resubmission; doubled after each")
    instance_types: list[InstanceTypeName] = Field(
        default_factory=list,
        max_length=10,
        description="types to move to, in order, after a capacity failure (empty: stay on instance.type)",
    )


TensorBoard = Annotated[
    Union[Annotated[bool, Tag("~bool")], Annotated[S3OrAuto, Tag("~text")]],
    _by_shape("true, false, auto or an S3 URI for the TensorBoard event files"),
]

MlflowArn = Annotated[
    str,
    _pattern(
        r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:mlflow-[a-z\-]+/\S+",
        "mlflow_arn",
        "a SageMaker MLflow tracking server ARN like "
        "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/name",
    ),
]


class Mlflow(_Strict):
    """SageMaker's managed MLflow (CreateTrainingJob MlflowConfig): metrics logged on SageMaker's side only."""

    tracking_server_arn: MlflowArn = Field(description="MlflowResourceArn: the tracking server (or MLflow app) ARN")
    experiment: str | None = Field(None, min_length=1, description="MlflowExperimentName")
    run: str | None = Field(None, min_length=1, description="MlflowRunName")
