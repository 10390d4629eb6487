"""The SageMaker backend: Plan -> real SDK estimator -> CreateTrainingJob, against moto and botocore's Stubber."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from conftest import _moto_training_job
from launcher import sagemaker_backend as sb
from launcher.facts import conventions
from launcher.plans import hosts
from launcher.errors import DfmError
from launcher.plans.training_plan import Channel
from launcher.sagemaker_backend import attempts, aws as sm_aws, sdk as sm_sdk, training_request as sm_request

REGION, BUCKET = "us-east-1", "dfm-test-bucket"  # as in conftest.py


def hook_sessions(monkeypatch, event: str, handler) -> None:
    """Register a botocore event handler on every session the backend creates."""
    real = sm_aws.boto_session

    def hooked(region):
        session = real(region)
        session.events.register(event, handler)
        return session

    monkeypatch.setattr(sm_aws, "boto_session", hooked)


def capture_create_requests(monkeypatch) -> list[dict]:
    sent: list[dict] = []
    hook_sessions(
        monkeypatch,
        "provide-client-params.sagemaker.CreateTrainingJob",
        lambda params, **_: sent.append(json.loads(json.dumps(params))),
    )
    return sent


SPOT_VPC_TAGS_WARM = {
    "spot": {"max_wait": 7200},
    "checkpoints": "auto",
    "vpc": {"subnets": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]},
    "tags": {"team": "ads"},
}


# --- dry run ---------------------------------------------------------------------------------------


def test_dry_run_builds_the_whole_request_offline(sample_plan, no_aws_env, no_network, capsys):
    plan = sample_plan({**SPOT_VPC_TAGS_WARM, "spot": {"max_wait": 7200}})
    hook = sys.excepthook
    result = sb.dry_run(plan)

    assert no_network == [] and sys.excepthook is hook
    assert capsys.readouterr().out == ""  # the SDK's config INFO lines must not reach stdout
    json.dumps(result)
    request = result["request"]
    assert result["estimator"]["class"] == "sagemaker.tensorflow.TensorFlow"
    assert "sagemaker_program" not in result["estimator"]["kwargs"]["hyperparameters"]  # plan not mutated
    assert "sagemaker_program" not in plan.hyperparameters
    assert result["image_uri"] == request["AlgorithmSpecification"]["TrainingImage"]
    assert "tensorflow-training:2.14-cpu-py310" in result["image_uri"]
    hps = request["HyperParameters"]
    assert json.loads(hps["sagemaker_submit_directory"]) == (
        f"s3://{BUCKET}/deepfm/{plan.job_name}/source/sourcedir.tar.gz"
    )
    assert json.loads(hps["sagemaker_program"]) == "train.py"
    assert hps["sagemaker_parameter_server_enabled"] == "true"
    assert hps["deep_layers"] == "[400, 400]" and hps["batch_norm"] == "false"
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    assert channels["train"]["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert channels["eval"]["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "FullyReplicated"
    assert result["inputs"]["train"] == {k: v for k, v in channels["train"].items() if k != "ChannelName"}
    assert request["ResourceConfig"] == {"InstanceType": "ml.c5.18xlarge", "InstanceCount": 2, "VolumeSizeInGB": 50}
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
    assert request["EnableManagedSpotTraining"] is True
    assert (
        request["CheckpointConfig"]["S3Uri"]
        == plan.checkpoint_s3_uri
        == f"s3://{BUCKET}/deepfm/{plan.job_name}/checkpoints"
    )
    assert request["VpcConfig"] == {
        "Subnets": ["subnet-0123456789abcdef0"],
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
    }
    assert {"Key": "team", "Value": "ads"} in request["Tags"]
    assert request["Environment"] == {"DFM_LOG": "1"}
    assert request["RoleArn"] == plan.role and request["TrainingJobName"] == plan.job_name


def test_warm_pool_reaches_the_resource_config(sample_plan, no_aws_env, no_network):
    request = sb.dry_run(sample_plan({"warm_pool_seconds": 600}))["request"]
    assert request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 600


def test_dry_run_ignores_sdk_defaults_files_and_restores_globals(
    sample_plan, no_aws_env, no_network, tmp_path, monkeypatch
):
    """A user's SageMaker SDK defaults must not slip into the job; the env and boto3's default session,
    lent to the SDK while it builds, come back as they were."""
    user_config = tmp_path / "config.yaml"
    user_config.write_text(
        "SchemaVersion: '1.0'\nSageMaker:\n  TrainingJob:\n"
        "    Environment: {FROM_SDK_DEFAULTS: '1'}\n    EnableNetworkIsolation: true\n"
    )
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(user_config))
    monkeypatch.delenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", raising=False)
    default_session = boto3.DEFAULT_SESSION

    request = sb.dry_run(sample_plan())["request"]

    assert request["Environment"] == {"DFM_LOG": "1"} and "EnableNetworkIsolation" not in request
    assert os.environ["SAGEMAKER_USER_CONFIG_OVERRIDE"] == str(user_config)
    assert "SAGEMAKER_ADMIN_CONFIG_OVERRIDE" not in os.environ
    assert boto3.DEFAULT_SESSION is default_session


def test_dry_run_horovod_pipe_one_channel_per_worker(sample_plan, no_aws_env, no_network):
    plan = sample_plan(
        {
            "framework": {"version": "2.12"},
            "instance": {"type": "ml.p3.8xlarge", "count": 1},
            "distribution": {"horovod": {"processes_per_host": 4, "mpi_options": "-x NCCL_DEBUG=INFO"}},
            "data": {
                "mode": "Pipe",
                "train": [f"s3://{BUCKET}/train/part-{i}/" for i in range(4)],
                "eval": f"s3://{BUCKET}/eval/",
                "s3_shard": False,
            },
        }
    )
    request = sb.dry_run(plan)["request"]

    hps = request["HyperParameters"]
    assert hps["sagemaker_mpi_enabled"] == "true"
    assert hps["sagemaker_mpi_num_of_processes_per_host"] == "4"
    assert json.loads(hps["sagemaker_mpi_custom_mpi_options"]) == "-x NCCL_DEBUG=INFO"
    assert "sagemaker_parameter_server_enabled" not in hps
    assert json.loads(hps["model_dir"]) == "/opt/ml/model"  # the SDK's choice for MPI jobs
    assert request["AlgorithmSpecification"]["TrainingInputMode"] == "Pipe"
    assert "gpu" in request["AlgorithmSpecification"]["TrainingImage"]
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["train", "train-1", "train-2", "train-3", "eval"]
    assert {c["InputMode"] for c in request["InputDataConfig"]} == {"Pipe"}


@pytest.mark.parametrize(
    "distribution",
    [
        "parameter_server",
        "multi_worker_mirrored",
        "none",
        {"horovod": {"processes_per_host": 2, "mpi_options": "-x A=1"}},
        {"horovod": {"processes_per_host": 2}},
    ],
)
def test_the_sdk_adds_exactly_the_hyperparameters_conventions_names(sample_plan, no_aws_env, no_network, distribution):
    plan = sample_plan(
        {
            "distribution": distribution,
            "instance": {"count": 1},
            "framework": {"version": "2.12" if "horovod" in distribution else "2.14"},
        }
    )
    sent = set(sb.dry_run(plan)["request"]["HyperParameters"])
    added = sent - (set(plan.hyperparameters) - {"model_dir"})
    expected = conventions.SDK_HYPERPARAMETERS + conventions.SDK_DISTRIBUTION_HYPERPARAMETERS[plan.distribution.kind]
    assert added == set(expected) and len(expected) == len(set(expected))


def test_file_system_and_fast_file_channels(sample_plan, no_aws_env, no_network):
    plan = sample_plan(
        {
            "data": {
                "mode": "FastFile",
                "eval": None,
                "channels": {
                    "features": {
                        "file_system_id": "fs-0fedcba9876543210",
                        "type": "FSxLustre",
                        "directory_path": "/fsx/features",
                    }
                },
            },
            "checkpoints": {
                "file_system": {"file_system_id": "fs-0123456789abcdef0", "directory_path": "/dfm/checkpoints"}
            },
            "vpc": SPOT_VPC_TAGS_WARM["vpc"],
        }
    )
    inputs = sb.dry_run(plan)["inputs"]

    assert inputs["train"]["InputMode"] == "FastFile"
    assert inputs["checkpoints"]["DataSource"]["FileSystemDataSource"] == {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemType": "EFS",
        "DirectoryPath": "/dfm/checkpoints",
        "FileSystemAccessMode": "rw",
    }
    assert "InputMode" not in inputs["checkpoints"]  # no per-channel mode for file systems: the job's applies
    assert inputs["features"]["DataSource"]["FileSystemDataSource"]["FileSystemType"] == "FSxLustre"


# Values no valid spec gives (the rules refuse them first): the backend still refuses them on its own.
@pytest.mark.parametrize(
    "beyond, words",
    [
        ({"channels": (Channel("train", "/home/me/data", kind="file"),)}, "local path"),
        ({"framework_version": "1.0"}, "SDK refused"),
        ({"max_run": 0}, "MaxRuntimeInSeconds"),
        ({"region": ""}, "no AWS region"),
        # beyond botocore's validator: the service model's maximums, enums and patterns, on the request the SDK built
        ({"environment": {"BIG": "x" * 600}}, "Environment.BIG: 600 characters, SageMaker allows at most 512"),
        ({"instance_groups": hosts.one_group("ml.c5.bogus", 1)}, "ResourceConfig.InstanceType"),
        ({"hyperparameters": {"k": "x" * 2600, "model_dir": "/opt/ml/model"}}, "HyperParameters.k: 2602 characters"),
        ({"tags": {"team": "a;b"}}, "Tags.0.Value: does not match"),
    ],
)
def test_invalid_plans_are_refused_offline_with_exit_2(sample_plan, no_aws_env, no_network, beyond, words):
    with pytest.raises(DfmError) as caught:
        sb.dry_run(sample_plan(**beyond))
    assert caught.value.exit_code == 2 and words in caught.value.message
    assert "\n" not in caught.value.message


def test_estimator_kwargs_the_sdk_does_not_name_are_refused(sample_plan, no_aws_env, no_network):
    plan = sample_plan()
    kwargs = {**sb.estimator_kwargs(plan), "instance_typ": "ml.c5.xlarge"}
    with pytest.raises(DfmError) as caught:
        sm_sdk.estimator(kwargs, sm_sdk.sagemaker_session(plan))
    assert caught.value.exit_code == 2 and "instance_typ" in caught.value.message


def test_sdk_clients_use_the_configured_retries(sample_plan, no_aws_env, no_network):
    session = sm_sdk.sagemaker_session(sample_plan())
    for client in (session.sagemaker_client, session.s3_client, session.s3_resource.meta.client):
        assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": sb.MAX_ATTEMPTS}


def test_throttling_is_retried_by_botocore(no_aws_env, monkeypatch):
    """Standard retries: throttled twice, then answered; or throttled until MAX_ATTEMPTS is spent."""
    from botocore.awsrequest import AWSResponse
    from urllib3 import HTTPResponse

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda seconds: None)
    attempts, throttled_for = [], []

    def answer(request, **_):
        attempts.append(request.url)
        if len(attempts) <= throttled_for[0]:
            body = b'{"__type": "ThrottlingException", "message": "Rate exceeded"}'
            return AWSResponse(request.url, 400, {}, HTTPResponse(body=io.BytesIO(body), preload_content=False))
        return AWSResponse(
            request.url, 200, {}, HTTPResponse(body=io.BytesIO(b'{"TrainingJobSummaries": []}'), preload_content=False)
        )

    hook_sessions(monkeypatch, "before-send.sagemaker", answer)
    throttled_for.append(2)
    assert sb.list_jobs(REGION) == [] and len(attempts) == 3

    attempts.clear()
    throttled_for[0] = 100
    with pytest.raises(DfmError) as caught:
        sb.list_jobs(REGION)
    assert len(attempts) == sb.MAX_ATTEMPTS
    assert caught.value.exit_code == 1 and "throttled" in caught.value.message


# --- submit (moto) ---------------------------------------------------------------------------------


def test_submit_sends_exactly_the_dry_runs_request_and_uploads_the_source(aws, sample_plan, monkeypatch):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    sent = capture_create_requests(monkeypatch)
    telemetry: list = []
    monkeypatch.setattr(
        "sagemaker.telemetry.telemetry_logging._send_telemetry_request", lambda *args, **kwargs: telemetry.append(args)
    )
    plan = sample_plan(SPOT_VPC_TAGS_WARM)
    echoed: list[str] = []

    assert sb.submit(sb.build(plan), echo=echoed.append) == plan.job_name

    assert echoed == [
        f"submitted {plan.job_name}",
        f"https://{REGION}.console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{plan.job_name}",
    ]
    assert len(sent) == 1 and telemetry == []
    assert sent[0] == sb.dry_run(plan)["request"]  # the dry run shows exactly what is sent
    received = _moto_training_job(plan.job_name)  # what the simulated service stored
    assert received.hyper_parameters == sent[0]["HyperParameters"]
    assert received.input_data_config == sent[0]["InputDataConfig"]
    uri = json.loads(sent[0]["HyperParameters"]["sagemaker_submit_directory"])
    assert uri == f"s3://{BUCKET}/deepfm/{plan.job_name}/source/sourcedir.tar.gz"
    archive = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=uri.split("/", 3)[3])["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert {plan.entry_point, "helpers.py"} <= set(tar.getnames())
        assert tar.extractfile(plan.entry_point).read() == (Path(plan.source_dir) / plan.entry_point).read_bytes()
    assert sb.describe(plan.job_name, REGION)["status"] == "Completed"  # moto finishes jobs at once


def test_submit_executes_the_built_request_as_it_is_without_going_back_to_the_plan(aws, sample_plan, monkeypatch):
    """The request is a frozen value: the dry run prints it, submit sends exactly it (here one the plan could not
    give: a tag added to the value), and neither the SDK nor the plan is consulted again."""
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    sent = capture_create_requests(monkeypatch)
    built = sb.build(sample_plan())
    with pytest.raises(TypeError):
        built.create_training_job["RoleArn"] = "arn:aws:iam::123456789012:role/other"
    with pytest.raises(TypeError):
        built.create_training_job["InputDataConfig"][0]["ChannelName"] = "other"
    arguments = built.arguments()
    arguments["Tags"] = [*arguments.get("Tags", []), {"Key": "only-in-the-value", "Value": "1"}]
    changed = dataclasses.replace(built, create_training_job=sm_request.freeze(arguments))
    printed = json.loads(json.dumps(changed.document()))  # what `--dry-run --output json` prints of it
    monkeypatch.setattr(sm_request, "build", lambda plan: pytest.fail("submit rebuilt the request"))
    monkeypatch.setattr(sm_sdk, "offline_estimator", lambda plan: pytest.fail("submit went back to the SDK"))

    sb.submit(changed, echo=lambda line: None)

    assert sent == [printed["request"]]
    assert printed["uploads"] == [changed.upload.uri]
    assert boto3.client("s3", region_name=REGION).head_object(Bucket=BUCKET, Key=changed.upload.uri.split("/", 3)[3])


def test_launch_sends_what_its_dry_run_printed(capsys, aws, monkeypatch):
    """`dfm launch --dry-run --output json` and `dfm launch` of the same spec and job name: the CreateTrainingJob
    call moto records is the dry run's JSON request."""
    from spec_helpers import run

    config = Path(__file__).parent.parent / "configs" / "ps.yaml"
    job = "ps-2026-11-25-12-00-00-000"
    code, out, err = run(capsys, "launch", config, "--dry-run", "--output", "json", "--job-name", job)
    assert code == 0, err
    printed = json.loads(out)
    boto3.client("s3", region_name=REGION).create_bucket(
        Bucket=printed["request"]["OutputDataConfig"]["S3OutputPath"].split("/")[2]
    )
    sent = capture_create_requests(monkeypatch)
    code, out, err = run(capsys, "launch", config, "--job-name", job)
    assert code == 0, err
    assert sent == [printed["request"]] and f"submitted {job}" in out


def test_submit_with_an_s3_source_dir_uploads_nothing(aws, sample_plan, monkeypatch):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    sent = capture_create_requests(monkeypatch)
    plan = sample_plan({"source_dir": f"s3://{BUCKET}/code/sourcedir.tar.gz"})
    sb.submit(sb.build(plan), echo=lambda line: None)
    assert json.loads(sent[0]["HyperParameters"]["sagemaker_submit_directory"]) == plan.source_dir
    assert s3.list_objects_v2(Bucket=BUCKET)["KeyCount"] == 0


def test_submit_refuses_an_invalid_request_before_uploading(aws, sample_plan, monkeypatch):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    sent = capture_create_requests(monkeypatch)
    with pytest.raises(DfmError) as caught:
        sb.submit(sb.build(sample_plan(max_run=0)), echo=pytest.fail)
    assert caught.value.exit_code == 2 and "MaxRuntimeInSeconds" in caught.value.message
    assert sent == [] and s3.list_objects_v2(Bucket=BUCKET)["KeyCount"] == 0


def test_submit_without_the_bucket_is_an_aws_refusal(aws, sample_plan):
    with pytest.raises(DfmError) as caught:
        sb.submit(sb.build(sample_plan()), echo=lambda line: None)
    assert caught.value.exit_code == 1 and "NoSuchBucket" in caught.value.message


@pytest.mark.parametrize("final, exit_code", [("Completed", None), ("Failed", 1)])
def test_launch_wait_streams_logs_and_exits_with_the_outcome(
    aws, sample_plan, moto_jobs, moto_logs, monkeypatch, final, exit_code
):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    plan = sample_plan()
    moto_logs(plan.job_name, "algo-1", "[dfm] train step=1 loss=0.5")
    moto_logs(plan.job_name, "algo-2", "worker ready")

    def job_ends(**_):
        moto_jobs.set_state(plan.job_name, final, "AlgorithmError: out of memory" if final == "Failed" else None)

    hook_sessions(monkeypatch, "after-call.sagemaker.CreateTrainingJob", job_ends)
    echoed: list[str] = []
    if exit_code is None:
        attempts.launch(plan, wait=True, echo=echoed.append, poll_seconds=0)
    else:
        with pytest.raises(DfmError) as caught:
            attempts.launch(plan, wait=True, echo=echoed.append, poll_seconds=0)
        assert caught.value.exit_code == 1
        assert caught.value.message == f"job {plan.job_name} Failed: AlgorithmError: out of memory"
    assert "[algo-1] [dfm] train step=1 loss=0.5" in echoed and "[algo-2] worker ready" in echoed


# --- status, logs, stop, list ----------------------------------------------------------------------


def test_describe_summarises_and_unknown_job_is_exit_1(moto_jobs):
    moto_jobs.create("job-a", instance_count=3)
    moto_jobs.set_state("job-a", "Failed", "ClientError: bad data")
    summary = sb.describe("job-a", REGION)
    assert (summary["status"], summary["failure_reason"], summary["instance_count"]) == (
        "Failed",
        "ClientError: bad data",
        3,
    )
    with pytest.raises(DfmError) as caught:
        sb.raise_for_outcome(summary)
    assert caught.value.exit_code == 1

    with pytest.raises(DfmError) as caught:
        sb.describe("no-such-job", REGION)
    assert caught.value.exit_code == 1
    assert caught.value.message == f"no job named no-such-job in {REGION}: check the name and --region"


def test_follow_prints_each_line_once_until_the_job_ends(moto_jobs, moto_logs):
    moto_jobs.create("job-f", instance_count=1)
    moto_jobs.set_state("job-f", "InProgress")
    same_ms = int(time.time() * 1000)
    moto_logs("job-f", "algo-1", "first", timestamp=same_ms)
    echoed: list[str] = []

    def echo(line: str) -> None:
        echoed.append(line)
        if line == "first":  # the job writes one more line at the very same millisecond, then ends
            moto_logs("job-f", "algo-1", "last", timestamp=same_ms)
            moto_jobs.set_state("job-f", "Completed")

    status = sb.stream_logs("job-f", REGION, follow=True, echo=echo, poll_seconds=0.01)
    assert status == "Completed" and echoed == ["-- InProgress", "first", "-- Completed", "last"]


def test_logs_before_any_instance_wrote_a_line(moto_jobs):
    moto_jobs.create("job-quiet")
    assert sb.stream_logs("job-quiet", REGION, echo=pytest.fail) == "Completed"  # no log group yet: no lines


def test_logs_of_other_jobs_are_not_mixed_in(moto_jobs, moto_logs):
    moto_jobs.create("job-a")
    moto_jobs.create("job-ab")
    moto_logs("job-a", "algo-1", "mine")
    moto_logs("job-ab", "algo-1", "not mine")
    echoed: list[str] = []
    sb.stream_logs("job-a", REGION, echo=echoed.append, as_json=True)
    assert [json.loads(line)["message"] for line in echoed] == ["mine"]
    assert json.loads(echoed[0])["host"] == "algo-1"


def stubbed_sagemaker(monkeypatch) -> Stubber:
    real = sm_aws.client("sagemaker", REGION)
    monkeypatch.setattr(sm_aws, "client", lambda service, region: real)
    return Stubber(real)


def test_stop_sends_stop_training_job(aws, monkeypatch):
    with stubbed_sagemaker(monkeypatch) as stubber:
        stubber.add_response("stop_training_job", {}, {"TrainingJobName": "job-s"})
        assert sb.stop("job-s", REGION)["status"] == "Stopping"
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    "code, message, words",
    [
        (
            "ValidationException",
            "The request was rejected because the training job is in status Completed.",
            "AWS refused stopping job-s (ValidationException): The request was rejected",
        ),
        ("AccessDeniedException", "User: x is not authorized to perform: sagemaker:StopTrainingJob", "iam:PassRole"),
        ("ExpiredTokenException", "The security token included in the request is expired", "refresh them"),
    ],
)
def test_aws_refusals_are_one_line_exit_1(aws, monkeypatch, code, message, words):
    with stubbed_sagemaker(monkeypatch) as stubber:
        stubber.add_client_error("stop_training_job", code, message)
        with pytest.raises(DfmError) as caught:
            sb.stop("job-s", REGION)
    assert caught.value.exit_code == 1 and words in caught.value.message


def test_list_jobs_filters_and_limits(moto_jobs):
    for name in ("deepfm-ps-1", "deepfm-ps-2", "deepfm-hvd-1"):
        moto_jobs.create(name)
    assert {job["job_name"] for job in sb.list_jobs(REGION, name_contains="ps")} == {"deepfm-ps-1", "deepfm-ps-2"}
    assert len(sb.list_jobs(REGION, max_results=2)) == 2
    assert {job["status"] for job in sb.list_jobs(REGION)} == {"Completed"}


def test_missing_credentials_are_a_usage_error(no_aws_env, no_network):
    with pytest.raises(DfmError) as caught:
        sb.list_jobs(REGION)
    assert caught.value.exit_code == 2 and "aws configure" in caught.value.message
    assert no_network == []


def test_unreachable_endpoint_is_exit_1(no_aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setattr(sm_aws, "MAX_ATTEMPTS", 1)
    with pytest.raises(DfmError) as caught:
        sb.describe("job-x", REGION)
    assert caught.value.exit_code == 1 and "cannot reach AWS" in caught.value.message


def test_sdk_import_and_dry_run_are_quiet_and_keep_the_excepthook():
    """In a fresh process, where the SDK's first import prints its config INFO lines and warnings."""
    import subprocess

    code = (
        "import sys; hook = sys.excepthook\n"
        "from launcher import sagemaker_backend as sb\nfrom launcher.compile import compile_spec\n"
        "sb.dry_run(compile_spec('configs/ps.yaml', env={}).plan)\n"
        "assert sys.excepthook is hook, sys.excepthook\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "Deprecation" not in done.stderr and "sagemaker.config" not in done.stderr


# --- the example configs, through the real spec -> plan path ---------------------------------------

CONFIGS = sorted(p for p in (Path(__file__).parent.parent / "configs").glob("*.yaml"))


def config_plan(path: Path):
    from launcher.compile import compile_spec

    return compile_spec(path, job_name=f"{path.stem}-2026-11-21-20-00-00-000", env={}).plan


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_dry_runs_offline_and_the_request_matches_the_plan(path, no_aws_env, no_network):
    plan = config_plan(path)
    result = sb.dry_run(plan)
    request = result["request"]

    assert no_network == []
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == [c.name for c in plan.channels]
    assert request["AlgorithmSpecification"]["TrainingInputMode"] == plan.input_mode
    hps = request["HyperParameters"]
    for key, value in plan.hyperparameters.items():  # what the script receives, after the SDK's JSON encoding
        assert json.loads(hps[key]) == value, key
    assert json.loads(hps["sagemaker_program"]) == plan.entry_point
    if len(plan.instance_groups) > 1:  # the SDK refuses InstanceType/InstanceCount beside groups
        assert request["ResourceConfig"]["InstanceGroups"] == [g.request() for g in plan.instance_groups]
        assert "InstanceType" not in request["ResourceConfig"] and "InstanceCount" not in request["ResourceConfig"]
    else:
        assert request["ResourceConfig"]["InstanceCount"] == plan.instance_count
        assert request["ResourceConfig"]["InstanceType"] == plan.instance_type
    assert "DebugHookConfig" not in request and request["ProfilerConfig"]["DisableProfiler"] is True
    assert plan.bundled and {m["Name"] for m in request["AlgorithmSpecification"]["MetricDefinitions"]} == {
        m["Name"] for m in conventions.METRIC_DEFINITIONS
    }
    if plan.checkpoint_s3_uri:
        assert request["CheckpointConfig"]["S3Uri"] == plan.checkpoint_s3_uri
    else:
        assert "CheckpointConfig" not in request
    CONFIG_CHECKS.get(path.stem, lambda request: None)(request)


def check_ps(request: dict) -> None:
    assert request["HyperParameters"]["sagemaker_parameter_server_enabled"] == "true"
    distributions = [c["DataSource"]["S3DataSource"]["S3DataDistributionType"] for c in request["InputDataConfig"]]
    assert distributions == ["ShardedByS3Key", "FullyReplicated"]  # train sharded across hosts, eval whole
    assert {"Key": "team", "Value": "ads"} in request["Tags"]


def check_horovod(request: dict) -> None:
    assert request["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"] == "4"
    assert {c["InputMode"] for c in request["InputDataConfig"]} == {"Pipe"}
    assert (
        len(request["InputDataConfig"]) == 5 and ":2.12-gpu-py310" in request["AlgorithmSpecification"]["TrainingImage"]
    )


def check_efs_ps(request: dict) -> None:
    file_system = next(c for c in request["InputDataConfig"] if "FileSystemDataSource" in c["DataSource"])
    assert file_system["DataSource"]["FileSystemDataSource"]["FileSystemAccessMode"] == "rw"
    assert request["VpcConfig"]["Subnets"] and request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 600


def check_fastfile_spot(request: dict) -> None:
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"]["MaxWaitTimeInSeconds"] == 10800
    assert {c["InputMode"] for c in request["InputDataConfig"]} == {"FastFile"}
    assert ":2.21.0-cpu-py312-amzn2023-sagemaker" in request["AlgorithmSpecification"]["TrainingImage"]


def check_hetero_ps(request: dict) -> None:
    groups = request["ResourceConfig"]["InstanceGroups"]
    assert [(g["InstanceGroupName"], g["InstanceType"], g["InstanceCount"]) for g in groups] == [
        ("worker", "ml.g5.2xlarge", 4),
        ("ps", "ml.r5.4xlarge", 4),
    ]
    # the ps hosts download nothing; no toolkit distribution (its ps would sit on every host of one group)
    s3 = [c for c in request["InputDataConfig"] if "S3DataSource" in c["DataSource"]]
    assert [c["DataSource"]["S3DataSource"]["InstanceGroupNames"] for c in s3] == [["worker"]] * 2
    # the checkpoints' EFS directory: every host mounts it (a ps writes its own share there)
    (efs,) = [c for c in request["InputDataConfig"] if "FileSystemDataSource" in c["DataSource"]]
    assert (
        efs["ChannelName"] == "checkpoints"
        and efs["DataSource"]["FileSystemDataSource"]["FileSystemAccessMode"] == "rw"
    )
    assert not [k for k in request["HyperParameters"] if k.endswith("_enabled")]
    assert (request["HyperParameters"]["ps_group"], request["HyperParameters"]["ps_per_host"]) == ('"ps"', "1")
    assert "-gpu-" in request["AlgorithmSpecification"]["TrainingImage"]  # the workers' type decides


CONFIG_CHECKS = {
    "ps": check_ps,
    "horovod": check_horovod,
    "efs-ps": check_efs_ps,
    "fastfile-spot": check_fastfile_spot,
    "hetero-ps": check_hetero_ps,
}


def test_a_heterogeneous_job_is_submitted_and_described_by_group(aws, monkeypatch):
    plan = config_plan(Path(__file__).parent.parent / "configs" / "hetero-ps.yaml")
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=plan.output_path.split("/")[2])
    sent = capture_create_requests(monkeypatch)

    sb.submit(sb.build(plan), echo=lambda line: None)

    assert sent[0] == sb.dry_run(plan)["request"]
    summary = sb.describe(plan.job_name, REGION)
    assert summary["instance_groups"] == [
        {"group": "worker", "instance_type": "ml.g5.2xlarge", "instance_count": 4},
        {"group": "ps", "instance_type": "ml.r5.4xlarge", "instance_count": 4},
    ]


def test_submit_ps_config_ships_the_bundled_scripts(aws, monkeypatch):
    plan = config_plan(Path(__file__).parent.parent / "configs" / "ps.yaml")
    bucket = plan.output_path.split("/")[2]
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
    sent = capture_create_requests(monkeypatch)

    sb.submit(sb.build(plan), echo=lambda line: None)

    uri = json.loads(sent[0]["HyperParameters"]["sagemaker_submit_directory"])
    key = uri.split("/", 3)[3]
    archive = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        shipped = set(tar.getnames())
    assert plan.entry_point in shipped
    assert {p.name for p in Path(plan.source_dir).glob("*.py")} <= shipped


def test_a_long_features_section_is_uploaded_in_the_source_tarball(aws, monkeypatch, tmp_path):
    from launcher.compile import compile_spec
    from test_plan import big_features_spec

    path, section = big_features_spec(tmp_path)
    plan = compile_spec(path, job_name="deepfm-raw-2026-11-23-01-00-00-000", env={}).plan
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=plan.output_path.split("/")[2])
    sent = capture_create_requests(monkeypatch)

    sb.submit(sb.build(plan), echo=lambda line: None)

    assert json.loads(sent[0]["HyperParameters"]["features"]) == "@dfm_features.json"
    uri = json.loads(sent[0]["HyperParameters"]["sagemaker_submit_directory"])
    archive = (
        boto3.client("s3", region_name=REGION)
        .get_object(Bucket=uri.split("/")[2], Key=uri.split("/", 3)[3])["Body"]
        .read()
    )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert json.loads(tar.extractfile("dfm_features.json").read()) == section
        assert plan.entry_point in tar.getnames()
    assert not (Path(plan.source_dir) / "dfm_features.json").exists()  # the bundled folder stays as it is
