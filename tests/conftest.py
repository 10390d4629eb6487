"""Shared fixtures: simulated AWS (moto, in-process) and Plans compiled from small specs.

Nothing from launcher/ (or moto, or the SDK) is imported at module level: the entry-point tests run
under each TensorFlow runtime's own pytest, which has TensorFlow but not dfm's dependencies."""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from launcher.plans.training_plan import Plan

# make test runs TensorFlow tests side by side on two cores: an Open MPI rank waiting for a message spins unless told
# to yield, and the Horovod tests' spinning ranks took the cores from every other test (a 35 s test took 117 s).
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")

REGION = "us-east-1"
BUCKET = "dfm-test-bucket"
ROLE = "arn:aws:iam::123456789012:role/dfm-training"
AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def no_aws_env(monkeypatch, tmp_path):
    """No credentials, region or profile from the environment or ~/.aws, and no metadata service."""
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws(no_aws_env, monkeypatch):
    """Fake credentials and region, every AWS call answered in-process by moto."""
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket to anywhere fails the test."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise AssertionError(f"network call attempted: {args[1:] if len(args) > 1 else args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


@pytest.fixture
def source_dir(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.py").write_text("print('training')\n")
    (folder / "helpers.py").write_text("X = 1\n")
    return folder


JOB = "deepfm-ps-2026-11-21-20-00-00-000"
# The tests' one base spec (spec_helpers.BASE) as a user's script (source_dir: src) on a two-host parameter
# server, with S3 channels and checkpoints.
SAMPLE_CHANGES = {
    "name": "deepfm-ps",
    "role": ROLE,
    "entry_point": "train.py",
    "instance": {"type": "ml.c5.18xlarge", "count": 2, "volume_gb": 50},
    "distribution": "parameter_server",
    "data": {"train": f"s3://{BUCKET}/data/train/", "eval": f"s3://{BUCKET}/data/eval/", "s3_shard": True},
    "output": f"s3://{BUCKET}/deepfm/",
    "max_run": 3600,
    "hyperparameters": {"batch_size": 1024, "epochs": 1, "deep_layers": [400, 400], "batch_norm": False},
    "environment": {"DFM_LOG": "1"},
}


@pytest.fixture
def sample_plan(source_dir):
    """make(changes, job_name=JOB, **beyond) -> the Plan `dfm launch` compiles from SAMPLE_CHANGES on BASE, deep-merged
    with `changes`. `beyond` replaces Plan fields afterwards: values no valid spec can give, for the
    checks the backend makes on its own."""
    from launcher.compile import compile_spec
    from spec_helpers import BASE, merged

    def make(changes: dict | None = None, *, job_name: str = JOB, **beyond) -> Plan:
        sample = merged(BASE, {**SAMPLE_CHANGES, "source_dir": str(source_dir)})
        compiled = compile_spec(merged(sample, changes or {}), job_name=job_name, env={})
        assert compiled.ok, compiled.errors
        return dataclasses.replace(compiled.plan, **beyond) if beyond else compiled.plan

    return make


def _moto_training_job(name: str, region: str = REGION):
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[DEFAULT_ACCOUNT_ID][region].training_jobs[name]


@pytest.fixture
def moto_jobs(aws):
    """Create training jobs in moto and set their state (moto creates every job as Completed)."""
    import boto3

    class MotoJobs:
        client = boto3.client("sagemaker", region_name=REGION)

        def create(self, name: str, instance_count: int = 1, groups: list[dict] | None = None) -> str:
            """groups: ResourceConfig.InstanceGroups (a heterogeneous job) instead of instance_count."""
            resources = (
                {"InstanceGroups": groups}
                if groups
                else {"InstanceType": "ml.c5.xlarge", "InstanceCount": instance_count}
            )
            self.client.create_training_job(
                TrainingJobName=name,
                RoleArn=ROLE,
                AlgorithmSpecification={"TrainingImage": "img:1", "TrainingInputMode": "File"},
                OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/out/"},
                ResourceConfig={**resources, "VolumeSizeInGB": 10},
                StoppingCondition={"MaxRuntimeInSeconds": 600},
            )
            return name

        def set_state(self, name: str, status: str, reason: str | None = None, secondary: str | None = None) -> None:
            """secondary: SageMaker's SecondaryStatus (default: the status itself)."""
            job = _moto_training_job(name)
            job.training_job_status, job.secondary_status = status, secondary or status
            if reason:
                job.failure_reason = reason

    return MotoJobs()


@pytest.fixture
def moto_logs(aws):
    """put(job, host, *messages, timestamp=None): write CloudWatch lines the way SageMaker names streams."""
    import time

    import boto3

    client = boto3.client("logs", region_name=REGION)
    client.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    streams = set()

    def put(job: str, host: str, *messages: str, timestamp: int | None = None) -> None:
        stream = f"{job}/{host}-1763755200"
        if stream not in streams:
            client.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream)
            streams.add(stream)
        now = timestamp or int(time.time() * 1000)
        client.put_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs",
            logStreamName=stream,
            logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)],
        )

    return put


def pytest_collection_modifyitems(config, items):
    """A test that needs what only some runtimes have (Horovod, PipeModeDataset) belongs to the version matrix:
    it is marked `runtimes` here, so no such test can be left out of `make test-matrix` by a forgotten mark."""
    import inspect

    for item in items:
        function = getattr(item, "function", None)
        try:
            source = inspect.getsource(inspect.unwrap(function)) if function is not None else ""
        except (OSError, TypeError):
            source = ""
        if item.get_closest_marker("horovod") or "es.require(" in source:
            item.add_marker(pytest.mark.runtimes)
