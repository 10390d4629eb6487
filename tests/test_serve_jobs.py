"""`dfm transform` and `dfm deploy` / `undeploy` on SageMaker: the requests the SDK's TensorFlowModel builds offline
pass botocore's model, moto accepts them, what is sent is what the dry run printed; the inference image is the one
of the training image's TensorFlow version and region; bad input is one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import pytest

from launcher.facts import catalog, inference_images
from launcher.plans import model_plan
from spec_helpers import run

REGION = "us-east-1"  # as in conftest.py
BUCKET = "dfm-test-bucket"
ROLE = "arn:aws:iam::123456789012:role/dfm-training"
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "ps.yaml"
TRAINING_IMAGE = f"763104351884.dkr.ecr.{REGION}.amazonaws.com/tensorflow-training:2.14.1-cpu-py310"


@pytest.fixture
def trained(aws):
    """A completed training job in moto, on the TF 2.14 training image, its model.tar.gz in S3."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    boto3.client("sagemaker", region_name=REGION).create_training_job(
        TrainingJobName="deepfm-ps-1",
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": TRAINING_IMAGE, "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/out"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    s3.put_object(Bucket=BUCKET, Key="out/deepfm-ps-1/output/model.tar.gz", Body=b"x" * 1000)
    return "deepfm-ps-1"


def _dry_run(capsys, *args) -> dict:
    code, out, err = run(capsys, *args, "--dry-run", "--output", "json")
    assert code == 0, err
    return json.loads(out)


def _requests(document: dict) -> dict:
    return {call["operation"]: call["request"] for call in document["requests"]}


TRANSFORM = (
    "transform",
    "deepfm-ps-1",
    "--data",
    f"s3://{BUCKET}/score/",
    "--output-path",
    f"s3://{BUCKET}/scored/",
    "--instance-type",
    "ml.c5.xlarge",
    "--instance-count",
    "2",
    "--strategy",
    "MultiRecord",
    "--job-name",
    "deepfm-score-1",
)


def test_a_transform_job_of_a_training_job_is_sent_as_the_dry_run_printed_and_moto_accepts_it(trained, capsys):
    document = _dry_run(capsys, *TRANSFORM)
    requests = _requests(document)
    assert list(requests) == ["CreateModel", "CreateTransformJob"]
    model = requests["CreateModel"]
    assert model["PrimaryContainer"]["ModelDataUrl"] == f"s3://{BUCKET}/out/deepfm-ps-1/output/model.tar.gz"
    assert model["PrimaryContainer"]["Image"] == inference_images.image_uri("2.14.1", REGION)
    assert model["PrimaryContainer"]["Image"].endswith("/tensorflow-inference:2.14.1-cpu")
    assert model["ExecutionRoleArn"] == ROLE  # the training job's role: no --role given
    job = requests["CreateTransformJob"]
    assert job["TransformInput"]["SplitType"] == "Line" and job["TransformInput"]["ContentType"] == "text/csv"
    assert job["TransformResources"] == {"InstanceCount": 2, "InstanceType": "ml.c5.xlarge"}
    assert job["BatchStrategy"] == "MultiRecord" and job["MaxPayloadInMB"] == 6
    assert document["model"]["size_bytes"] == 1000
    assert document["cost"]["max_usd"] == round(document["cost"]["instance_hourly_usd"] * 2 * 24, 2)

    code, out, err = run(capsys, *TRANSFORM, "--yes", "--output", "json")
    assert code == 0, err
    assert json.loads(out) == {"name": "deepfm-score-1", "kind": "transform", "region": REGION}
    client = boto3.client("sagemaker", region_name=REGION)
    sent_model = client.describe_model(ModelName="deepfm-score-1")
    assert sent_model["PrimaryContainer"]["Image"] == model["PrimaryContainer"]["Image"]
    assert sent_model["PrimaryContainer"]["ModelDataUrl"] == model["PrimaryContainer"]["ModelDataUrl"]
    sent = client.describe_transform_job(TransformJobName="deepfm-score-1")
    for key in ("TransformInput", "TransformOutput", "TransformResources", "BatchStrategy", "MaxPayloadInMB"):
        assert sent[key] == job[key], key

    # status, list know the transform job (no --kind: found by name)
    code, out, err = run(capsys, "status", "deepfm-score-1")
    assert code == 0, err
    assert "status     Completed" in out and "2 x ml.c5.xlarge" in out and "#/transform-jobs/deepfm-score-1" in out
    code, out, _ = run(capsys, "list", "--kind", "transform", "--output", "json")
    assert [(j["job_name"], j["kind"]) for j in json.loads(out)] == [("deepfm-score-1", "transform")]


def test_the_request_sent_is_the_built_value(trained, capsys):
    """Submit sends the request value itself, not one rebuilt: a value changed after the build is what moto gets."""
    from dataclasses import replace
    from types import MappingProxyType

    from launcher.backends import backend_for, resolve_model

    source = resolve_model("deepfm-ps-1", region=REGION, role=None, framework_version=None, offline=False)
    plan = model_plan.build_transform_plan(
        source,
        data=f"s3://{BUCKET}/score/",
        output_path=f"s3://{BUCKET}/scored/",
        instance_type="ml.c5.xlarge",
        job_name="deepfm-score-2",
    )
    backend = backend_for("transform", "sagemaker")
    request = backend.dryrun(plan)
    calls = [(op, dict(r)) for op, r in request.calls]
    calls[1][1]["MaxPayloadInMB"] = 3
    changed = replace(request, calls=tuple((op, MappingProxyType(r)) for op, r in calls))
    backend.execute(changed, echo=lambda line: None)
    sent = boto3.client("sagemaker", region_name=REGION).describe_transform_job(TransformJobName="deepfm-score-2")
    assert sent["MaxPayloadInMB"] == 3


def test_a_dry_run_of_an_s3_model_sends_nothing(no_aws_env, no_network, capsys):
    document = _dry_run(
        capsys,
        "deploy",
        f"s3://{BUCKET}/models/model.tar.gz",
        "--instance-type",
        "ml.m5.large",
        "--role",
        ROLE,
        "--framework-version",
        "2.12",
        "--region",
        "eu-west-1",
        "--endpoint-name",
        "deepfm-live",
    )
    assert no_network == []
    requests = _requests(document)
    assert list(requests) == ["CreateModel", "CreateEndpointConfig", "CreateEndpoint"]
    assert requests["CreateModel"]["PrimaryContainer"]["Image"] == inference_images.image_uri("2.12", "eu-west-1")
    assert requests["CreateEndpointConfig"]["ProductionVariants"][0]["InstanceType"] == "ml.m5.large"
    assert requests["CreateEndpoint"] == {
        "EndpointName": "deepfm-live",
        "EndpointConfigName": "deepfm-live",
        "Tags": [{"Key": "dfm:made-by", "Value": "dfm"}],
    }
    assert document["cost"]["usd_per_hour"] > 0 and document["model"]["size_bytes"] is None


def test_an_endpoint_is_sent_as_the_dry_run_printed_waited_for_and_undeployed(trained, capsys):
    args = ("deploy", "deepfm-ps-1", "--serverless-memory", "2048", "--endpoint-name", "deepfm-live")
    requests = _requests(_dry_run(capsys, *args))
    variant = requests["CreateEndpointConfig"]["ProductionVariants"][0]
    assert variant["ServerlessConfig"] == {"MemorySizeInMB": 2048, "MaxConcurrency": 5}
    assert "InstanceType" not in variant

    code, out, err = run(capsys, *args, "--wait", "--yes")
    assert code == 0, err
    assert out.splitlines() == ["submitted endpoint deepfm-live", "-- deepfm-live: InService"]
    client = boto3.client("sagemaker", region_name=REGION)
    config = client.describe_endpoint_config(EndpointConfigName="deepfm-live")
    assert config["ProductionVariants"][0]["ServerlessConfig"] == variant["ServerlessConfig"]
    assert client.describe_endpoint(EndpointName="deepfm-live")["EndpointConfigName"] == "deepfm-live"

    # an endpoint config and a model dfm did not make are left alone
    client.create_model(ModelName="their-model", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": "img:1"})
    client.create_endpoint_config(
        EndpointConfigName="theirs", ProductionVariants=[{**variant, "ModelName": "their-model"}]
    )
    client.create_endpoint(EndpointName="other", EndpointConfigName="theirs")
    code, out, err = run(capsys, "undeploy", "deepfm-live")
    assert code == 0, err
    assert out.splitlines() == [
        "deleted endpoint deepfm-live",
        "deleted endpoint config deepfm-live",
        "deleted model deepfm-live",
    ]
    code, out, err = run(capsys, "undeploy", "other")
    assert code == 0 and out.splitlines() == ["deleted endpoint other"]
    assert client.describe_endpoint_config(EndpointConfigName="theirs")["EndpointConfigName"] == "theirs"
    assert client.describe_model(ModelName="their-model")["ModelName"] == "their-model"


@pytest.mark.parametrize(
    "args, words",
    [
        (("--instance-type", "ml.c5.xlarg"), "'ml.c5.xlarg' is not an instance type SageMaker offers for endpoints"),
        (("--serverless-memory", "1500"), "--serverless-memory 1500: one of 1024, 2048, 3072, 4096, 5120, 6144 MB"),
        (("--serverless-memory", "8192"), "--serverless-memory 8192: one of 1024"),
        (("--serverless-memory", "2048", "--max-concurrency", "0"), "--max-concurrency 0: from 1 to 200"),
        (("--instance-type", "ml.m5.large", "--serverless-memory", "2048"), "one of them"),
        ((), "give --instance-type (instances) or --serverless-memory"),
        (("--instance-type", "ml.m5.large", "--instance-count", "0"), "--instance-count 0: at least 1"),
        (("--instance-type", "ml.m5.large", "--endpoint-name", "a_b"), "--endpoint-name 'a_b': does not match"),
        (("--instance-type", "ml.m5.large", "--framework-version", "2.21"), "TensorFlow 2.21 has no SageMaker"),
    ],
)
def test_bad_deploy_input_is_one_line_exit_2(no_aws_env, capsys, args, words):
    code, out, err = run(
        capsys, "deploy", f"s3://{BUCKET}/m/model.tar.gz", "--role", ROLE, "--region", REGION, "--dry-run", *args
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err


@pytest.mark.parametrize(
    "args, words",
    [
        (("--instance-type", "ml.c5.xlarg"), "is not an instance type SageMaker offers for batch transform"),
        (("--instance-type", "ml.c5.xlarge", "--content-type", "application/x-recordio"), "--content-type"),
        (("--instance-type", "ml.c5.xlarge", "--strategy", "Some"), "--strategy 'Some': one of"),
        (("--instance-type", "ml.c5.xlarge", "--max-payload", "101"), "--max-payload 101: from 1 to 100 MB"),
        (("--instance-type", "ml.c5.xlarge", "--data", "/local/file.csv"), "--data '/local/file.csv': give an s3://"),
    ],
)
def test_bad_transform_input_is_one_line_exit_2(no_aws_env, capsys, args, words):
    base = ("transform", f"s3://{BUCKET}/m/model.tar.gz", "--data", f"s3://{BUCKET}/in/", "--role", ROLE)
    code, out, err = run(capsys, *base, "--output-path", f"s3://{BUCKET}/o/", "--region", REGION, "--dry-run", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err


def test_a_training_job_that_does_not_exist_is_one_line_exit_1_in_aws_words(aws, capsys):
    code, out, err = run(capsys, "deploy", "no-such-job", "--instance-type", "ml.m5.large", "--dry-run")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("dfm: describing training job no-such-job: not found (ValidationException)"), err


def test_an_instance_without_room_for_the_model_is_refused():
    big = model_plan.ModelSource(f"s3://{BUCKET}/m/model.tar.gz", "2.14.1", ROLE, REGION, size_bytes=4 * 2**30)
    with pytest.raises(model_plan.PlanError, match=r"needs about 9.0 GiB to load, ml.m5.large has 8 GiB"):
        model_plan.build_deploy_plan(big, instance_type="ml.m5.large")
    with pytest.raises(model_plan.PlanError, match="--serverless-memory has 6 GiB"):
        model_plan.build_deploy_plan(big, serverless_memory=6144)
    assert model_plan.build_deploy_plan(big, instance_type="ml.m5.2xlarge").instance_type == "ml.m5.2xlarge"


def test_the_inference_images_are_the_sdks_own():
    """The facts read the SDK's config: the image the SDK picks for each version is the one the facts name."""
    from launcher.sagemaker_backend import sdk

    sdk.sdk()
    from sagemaker import image_uris

    for short, full in inference_images.versions().items():
        if short.startswith("2."):
            expected = image_uris.retrieve(
                "tensorflow", REGION, version=full, image_scope="inference", instance_type="ml.c5.xlarge"
            )
            assert inference_images.image_uri(short, REGION) == expected, short
    assert inference_images.inference_version("2.21") is None


def test_logs_of_a_transform_job_come_from_its_log_group(trained, capsys):
    code, _, err = run(capsys, *TRANSFORM, "--yes")
    assert code == 0, err
    logs = boto3.client("logs", region_name=REGION)
    group = "/aws/sagemaker/TransformJobs"
    logs.create_log_group(logGroupName=group)
    for host, message in (("i-0a", "scoring part-0"), ("i-0b", "scoring part-1")):
        stream = f"deepfm-score-1/{host}-1763755200"
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        logs.put_log_events(
            logGroupName=group,
            logStreamName=stream,
            logEvents=[{"timestamp": int(time.time() * 1000), "message": message}],
        )
    code, out, err = run(capsys, "logs", "deepfm-score-1", "--output", "json")
    assert code == 0, err
    assert sorted(json.loads(line)["message"] for line in out.splitlines()) == ["scoring part-0", "scoring part-1"]


def test_the_role_and_region_come_from_a_spec_unless_given(no_aws_env, monkeypatch, capsys):
    monkeypatch.setenv("DFM_ROLE_ARN", "arn:aws:iam::123456789012:role/from-spec")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    args = ("deploy", f"s3://{BUCKET}/m/model.tar.gz", "--instance-type", "ml.m5.large", "--spec", CONFIG)
    document = _dry_run(capsys, *args)
    model = _requests(document)["CreateModel"]
    assert model["ExecutionRoleArn"] == "arn:aws:iam::123456789012:role/from-spec" and document["region"] == "eu-west-1"
    assert model["PrimaryContainer"]["Image"] == inference_images.image_uri(inference_images.newest(), "eu-west-1")
    document = _dry_run(capsys, *args, "--role", ROLE, "--region", REGION)
    assert _requests(document)["CreateModel"]["ExecutionRoleArn"] == ROLE and document["region"] == REGION


def test_a_refused_request_deletes_what_was_made_before_it(trained):
    """CreateEndpoint refused (its config named wrong after the build): the config and model just made are deleted."""
    from dataclasses import replace
    from types import MappingProxyType

    from launcher.backends import backend_for, resolve_model
    from launcher.errors import DfmError

    source = resolve_model("deepfm-ps-1", region=REGION, role=None, framework_version=None, offline=False)
    plan = model_plan.build_deploy_plan(source, instance_type="ml.m5.large", endpoint_name="deepfm-live")
    backend = backend_for("endpoint", "sagemaker")
    request = backend.dryrun(plan)
    calls = [(op, dict(r)) for op, r in request.calls]
    calls[2][1]["EndpointConfigName"] = "missing"
    lines = []
    with pytest.raises(DfmError) as refused:
        backend.execute(replace(request, calls=tuple((op, MappingProxyType(r)) for op, r in calls)), echo=lines.append)
    assert refused.value.exit_code == 1
    assert refused.value.message.startswith(
        "CreateEndpoint deepfm-live: not found (ValidationException): Could not find"
    )
    assert lines == [
        "deleted endpoint config deepfm-live (made before the refusal)",
        "deleted model deepfm-live (made before the refusal)",
    ]
    client = boto3.client("sagemaker", region_name=REGION)
    assert client.list_models()["Models"] == [] and client.list_endpoint_configs()["EndpointConfigs"] == []


def test_wait_exits_1_when_the_endpoint_fails(aws, monkeypatch):
    from botocore.stub import Stubber

    from launcher.errors import DfmError
    from launcher.sagemaker_backend import aws as sm_aws
    from launcher.sagemaker_backend import endpoints

    real = sm_aws.client("sagemaker", REGION)
    monkeypatch.setattr(sm_aws, "client", lambda service, region: real)
    lines = []
    with Stubber(real) as stubber:
        for status in ("Creating", "Creating", "Failed"):
            answer = {
                "EndpointName": "deepfm-live",
                "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/deepfm-live",
                "EndpointStatus": status,
                "CreationTime": "2026-11-28T00:00:00Z",
                "LastModifiedTime": "2026-11-28T00:00:00Z",
            }
            if status == "Failed":
                answer["FailureReason"] = (
                    "The primary container for production variant AllTraffic did not pass the ping health check."
                )
            stubber.add_response("describe_endpoint", answer, {"EndpointName": "deepfm-live"})
        with pytest.raises(DfmError) as refused:
            endpoints.wait("deepfm-live", REGION, echo=lines.append, poll_seconds=0)
        stubber.assert_no_pending_responses()
    assert refused.value.exit_code == 1
    assert str(refused.value.message).startswith("endpoint deepfm-live is Failed: The primary container")
    assert lines == ["-- deepfm-live: Creating", "-- deepfm-live: Failed"]


def test_on_a_terminal_deploy_shows_the_cost_per_hour_and_asks_first(trained, monkeypatch, capsys):
    import click

    from launcher.cli import spec as cli_spec

    asked = []
    monkeypatch.setattr(cli_spec, "on_terminal", lambda: True)
    monkeypatch.setattr(click, "confirm", lambda text, default: asked.append(text) or False)
    code, out, err = run(capsys, "deploy", "deepfm-ps-1", "--instance-type", "ml.m5.large", "--instance-count", "2")
    assert code == 1 and err.strip() == "dfm: not submitted" and asked == ["Submit?"]
    price = 2 * catalog.instance("ml.m5.large").usd_per_hour
    assert f"cost       ${price:,.3f} per hour" in out
    assert boto3.client("sagemaker", region_name=REGION).list_models()["Models"] == []  # nothing sent
