"""Shared fixtures: simulated AWS (moto, in-process) and Plans built directly, without a spec.

Nothing from launcher/ (or moto, or the SDK) is imported at module level: the entry-point tests run
under each TensorFlow runtime's own pytest, which has TensorFlow but not dfm's dependencies."""

from __future__ import annotations

import socket

import pytest

REGION = "us-east-1"
BUCKET = "dfm-test-bucket"
ROLE = "arn:aws:iam::123456789012:role/dfm-training"
AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
           "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ROLE_ARN",
           "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
           "AWS_CONTAINER_CREDENTIALS_FULL_URI")


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


_DISTRIBUTION_KWARGS = {
    "none": None,
    "parameter_server": lambda d: {"parameter_server": {"enabled": True}},
    "horovod": lambda d: {"mpi": {"enabled": True, "processes_per_host": d.processes_per_host,
                                  "custom_mpi_options": d.mpi_options}},
    "multi_worker_mirrored": lambda d: {"multi_worker_mirrored_strategy": {"enabled": True}},
}


@pytest.fixture
def source_dir(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.py").write_text("print('training')\n")
    (folder / "helpers.py").write_text("X = 1\n")
    return folder


@pytest.fixture
def sample_plan(source_dir):
    """make(**overrides) -> Plan; estimator kwargs derived from the fields the way build_plan does."""
    from launcher.plan import Channel, Distribution, Plan

    def make(*, job_name="deepfm-ps-2026-11-21-20-00-00-000", distribution="parameter_server",
             processes_per_host=1, mpi_options="", instance_type="ml.c5.18xlarge", instance_count=2,
             input_mode="File", channels=None, hyperparameters=None, spot_max_wait=None, max_run=3600,
             vpc=None, tags=None, checkpoint=True, warm_pool_seconds=None, extra_kwargs=None,
             region=REGION, image_uri=None):
        dist = Distribution(kind=distribution, processes_per_host=processes_per_host, mpi_options=mpi_options)
        if channels is None:
            sharded = "ShardedByS3Key"
            channels = (Channel("train", f"s3://{BUCKET}/data/train/", input_mode=input_mode, distribution=sharded),
                        Channel("eval", f"s3://{BUCKET}/data/eval/", input_mode=input_mode))
        hps = {"batch_size": 1024, "epochs": 1, "deep_layers": [400, 400], "batch_norm": False}
        hps.update(hyperparameters or {})
        output = f"s3://{BUCKET}/deepfm/{job_name}/"
        checkpoint_uri = f"{output}checkpoints/" if checkpoint else None
        kwargs = {
            "entry_point": "train.py", "source_dir": str(source_dir), "role": ROLE,
            "instance_type": instance_type, "instance_count": instance_count, "volume_size": 50,
            "hyperparameters": hps, "output_path": f"{output}output/", "code_location": f"s3://{BUCKET}/deepfm/code",
            "max_run": max_run, "input_mode": input_mode, "base_job_name": "deepfm-ps",
            "environment": {"DFM_LOG": "1"}, "metric_definitions": [{"Name": "train:loss", "Regex": "loss=(\\S+)"}],
        }
        if image_uri:
            kwargs["image_uri"] = image_uri
        else:
            kwargs.update(framework_version="2.14", py_version="py310")
        if _DISTRIBUTION_KWARGS[distribution]:
            kwargs["distribution"] = _DISTRIBUTION_KWARGS[distribution](dist)
        if checkpoint_uri:
            kwargs.update(checkpoint_s3_uri=checkpoint_uri, checkpoint_local_path="/opt/ml/checkpoints")
        if spot_max_wait:
            kwargs.update(use_spot_instances=True, max_wait=spot_max_wait)
        if vpc:
            kwargs.update(subnets=vpc["subnets"], security_group_ids=vpc["security_group_ids"])
        if tags:
            kwargs["tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
        if warm_pool_seconds:
            kwargs["keep_alive_period_in_seconds"] = warm_pool_seconds
        kwargs.update(extra_kwargs or {})
        return Plan(
            spec_path="test.yaml", job_name=job_name, region=region, role=ROLE, entry_point="train.py",
            source_dir=str(source_dir), instance_type=instance_type, instance_count=instance_count,
            distribution=dist, input_mode=input_mode, channels=tuple(channels), hyperparameters=hps,
            argv=tuple(), environment=kwargs["environment"], estimator_kwargs=kwargs,
            framework_version=kwargs.get("framework_version"), py_version=kwargs.get("py_version"),
            image_uri=image_uri, output_path=kwargs["output_path"], checkpoint_s3_uri=checkpoint_uri,
        )

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

        def create(self, name: str, instance_count: int = 1) -> str:
            self.client.create_training_job(
                TrainingJobName=name, RoleArn=ROLE,
                AlgorithmSpecification={"TrainingImage": "img:1", "TrainingInputMode": "File"},
                OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/out/"},
                ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": instance_count,
                                "VolumeSizeInGB": 10},
                StoppingCondition={"MaxRuntimeInSeconds": 600})
            return name

        def set_state(self, name: str, status: str, reason: str | None = None) -> None:
            job = _moto_training_job(name)
            job.training_job_status = job.secondary_status = status
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
        client.put_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream,
                              logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)])

    return put
