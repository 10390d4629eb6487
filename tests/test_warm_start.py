"""warm_start: the spec section and --warm-start-from, its rules, and the channel it becomes in the SageMaker request
(the SDK's model channel for a model.tar.gz, `warmstart` for a checkpoint prefix); a job name resolved with
DescribeTrainingJob, an S3 source without a checkpoint refused before the job is created."""

from __future__ import annotations

import json

import boto3
import pytest

from conftest import _moto_training_job
from launcher import rules
from launcher.compile import compile_spec
from launcher.errors import DfmError
from launcher.facts import contract
from launcher.sagemaker_backend import training_jobs, training_request
from launcher.spec import SpecError, load_spec
from spec_helpers import BASE, REPO, ROLE, line_of, merged, run, write_spec
from test_sagemaker_backend import capture_create_requests

REGION, BUCKET = "us-east-1", "dfm-test-bucket"
MODEL = "s3://dfm-bucket/out/day1/output/model.tar.gz"
PREFIX = "s3://dfm-bucket/out/day1/checkpoints"


def findings(changes: dict) -> list[tuple[str, str, str]]:
    spec = load_spec(merged(BASE, changes))
    return [(f.severity, f.field, f.message) for f in rules.check_warm_start(spec)]


def channels_of(request: dict) -> dict[str, dict]:
    return {channel["ChannelName"]: channel for channel in request["InputDataConfig"]}


# ------------------------------------------------------------------------------------------------ schema
def test_the_section_is_strict_with_file_and_line(tmp_path):
    path = write_spec(tmp_path, {"warm_start": {"from": PREFIX, "restore": "weights", "step": "continue"}})
    with pytest.raises(SpecError) as err:
        load_spec(path)
    lines = err.value.lines()
    assert any(f"spec.yaml:{line_of(path, 'restore')}: warm_start.restore: 'weights' is not one of" in x for x in lines)
    assert any("warm_start.step: unknown key (did you mean 'steps'?)" in x for x in lines), lines
    with pytest.raises(SpecError) as err:  # the field's Python name is no key of the spec
        load_spec(merged(BASE, {"warm_start": {"source": PREFIX}}))
    assert any("warm_start.from: required, missing" in line for line in err.value.lines()), err.value.lines()


def test_defaults_and_the_flag_is_the_set_line(tmp_path, no_aws_env, no_network, capsys):
    spec = load_spec(merged(BASE, {"warm_start": {"from": "day1-job"}}))
    assert (spec.warm_start.source, spec.warm_start.restore, spec.warm_start.steps) == ("day1-job", "all", "restart")
    path = write_spec(tmp_path)
    by_flag = run(capsys, "launch", path, "--dry-run", "-o", "json", "--job-name", "j1", "--warm-start-from", MODEL)
    by_set = run(
        capsys, "launch", path, "--dry-run", "-o", "json", "--job-name", "j1", "--set", f"warm_start.from={MODEL}"
    )
    assert by_flag[0] == 0, by_flag[2]
    assert json.loads(by_flag[1])["request"] == json.loads(by_set[1])["request"]


def test_the_scripts_hyperparameters_are_derived_and_refused_by_hand():
    for name in ("warm_start", "warm_start_steps", "warm_start_source"):
        assert name in contract.DERIVED_HYPERPARAMETERS
    compiled = compile_spec(merged(BASE, {"hyperparameters": {"warm_start": "all"}}))
    assert not compiled.ok and any("hyperparameters.warm_start" in line for line in compiled.errors)
    plan = compile_spec(
        merged(
            BASE,
            {
                "warm_start": {"from": PREFIX, "restore": "embeddings", "steps": "continue"},
                "hyperparameters": {"epochs": 3},
            },
        )
    ).plan
    assert {k: plan.hyperparameters[k] for k in ("warm_start", "warm_start_steps", "warm_start_source")} == {
        "warm_start": "embeddings",
        "warm_start_steps": "continue",
        "warm_start_source": PREFIX,
    }
    # the bundled scripts accept exactly these values
    hparams = contract.bundled_hparams()
    assert hparams.convert("warm_start", "embeddings") == "embeddings"
    with pytest.raises(Exception):
        hparams.convert("warm_start", "weights")


# ------------------------------------------------------------------------------------------------- rules
def test_a_source_that_is_the_jobs_own_checkpoint_prefix_is_refused():
    assert findings({"warm_start": {"from": PREFIX + "/"}, "checkpoints": PREFIX})[0][:2] == (
        "error",
        "warm_start.from",
    )
    assert findings({"warm_start": {"from": PREFIX}, "checkpoints": "s3://dfm-bucket/out/day2/checkpoints"}) == []


def test_the_refusal_exits_2_naming_the_file_and_the_reason(tmp_path, capsys):
    path = write_spec(tmp_path, {"warm_start": {"from": PREFIX}, "checkpoints": PREFIX})
    code, _, err = run(capsys, "launch", path, "--dry-run")
    assert code == 2
    assert f"spec.yaml:{line_of(path, 'from:')}: warm_start.from:" in err and "overwrite" in err


def test_a_users_script_is_told_what_it_receives():
    found = findings({"warm_start": {"from": MODEL}, "entry_point": "train.py", "source_dir": "s3://b/code/src.tar.gz"})
    assert found[0][:2] == ("warning", "warm_start") and "/opt/ml/input/data/model" in found[0][2]


def test_continue_without_more_steps_warns_and_more_epochs_does_not():
    assert findings({"warm_start": {"from": PREFIX, "steps": "continue"}})[0][:2] == ("warning", "warm_start.steps")
    assert findings({"warm_start": {"from": PREFIX, "steps": "continue"}, "hyperparameters": {"epochs": 2}}) == []


def test_the_channel_names_it_takes_are_refused_for_data():
    found = findings({"warm_start": {"from": PREFIX}, "data": {"channels": {"warmstart": "s3://dfm-bucket/x/"}}})
    assert found[0][:2] == ("error", "data.channels.warmstart")


# ----------------------------------------------------------------------------------------- the request
def test_a_model_artifact_is_the_sdks_model_channel_offline(no_aws_env, no_network):
    plan = compile_spec(merged(BASE, {"warm_start": {"from": MODEL}}), job_name="j2").plan
    built = training_request.build(plan)
    model = channels_of(built.arguments())["model"]
    assert model["ContentType"] == "application/x-sagemaker-model" and model["InputMode"] == "File"
    assert model["DataSource"]["S3DataSource"]["S3Uri"] == MODEL
    assert model["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "FullyReplicated"
    assert built.estimator_kwargs["model_uri"] == MODEL and built.estimator_kwargs["model_channel_name"] == "model"
    assert built.document()["warm_start"]["channel"] == "model"


def test_a_checkpoint_prefix_is_the_warmstart_channel_in_every_mode(no_aws_env, no_network):
    plan = compile_spec(
        merged(
            BASE,
            {
                "warm_start": {"from": PREFIX},
                "data": {"mode": "Pipe", "s3_shard": True},
                "instance": {"count": 2},
                "distribution": "parameter_server",
            },
        ),
        job_name="j3",
    ).plan
    channel = channels_of(training_request.build(plan).arguments())["warmstart"]
    assert channel["InputMode"] == "File" and "ContentType" not in channel
    assert channel["DataSource"]["S3DataSource"] == {
        "S3DataType": "S3Prefix",
        "S3Uri": PREFIX + "/",
        "S3DataDistributionType": "FullyReplicated",
    }


def create_source_job(name: str, checkpoint: str | None, hyperparameters: dict | None = None) -> None:
    boto3.client("sagemaker", region_name=REGION).create_training_job(
        TrainingJobName=name,
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": "img:1", "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/out/"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
        HyperParameters=hyperparameters or {},
        **({"CheckpointConfig": {"S3Uri": checkpoint}} if checkpoint else {}),
    )


def spec_on_the_bucket(**changes) -> dict:
    return merged(BASE, {"output": f"s3://{BUCKET}/out/", "data": {"train": f"s3://{BUCKET}/train/"}, **changes})


def test_a_job_name_is_resolved_by_describe_and_the_checkpoint_channel_created(aws, monkeypatch):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    for key in ("checkpoint", "ckpt-7.index", "ckpt-7.data-00000-of-00001"):
        s3.put_object(Bucket=BUCKET, Key=f"ck/day1/{key}", Body=b"x")
    create_source_job("day1", f"s3://{BUCKET}/ck/day1", {"epochs": "1"})
    sent = capture_create_requests(monkeypatch)
    plan = compile_spec(spec_on_the_bucket(warm_start={"from": "day1", "steps": "continue"}), job_name="day2").plan
    built = training_request.build(plan)
    assert built.plan.warm_start.uri == f"s3://{BUCKET}/ck/day1/"
    assert any("nothing may be left to train" in w for w in built.document()["warnings"])

    training_jobs.submit(built, echo=lambda line: None)

    assert (
        sent and channels_of(sent[0])["warmstart"]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{BUCKET}/ck/day1/"
    )
    stored = {c["ChannelName"]: c for c in _moto_training_job("day2").input_data_config}
    assert stored["warmstart"]["InputMode"] == "File"


def test_a_job_without_checkpoints_gives_its_model_artifact(aws, monkeypatch):
    create_source_job("day1", None)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    artifact = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName="day1")[
        "ModelArtifacts"
    ]["S3ModelArtifacts"]
    s3.put_object(Bucket=BUCKET, Key=artifact.split("/", 3)[3], Body=b"tar")
    plan = compile_spec(spec_on_the_bucket(warm_start={"from": "day1"}), job_name="day2").plan
    built = training_request.build(plan)
    assert built.document()["warm_start"]["read_with"] == "DescribeTrainingJob"

    training_jobs.submit(built, echo=lambda line: None)

    stored = {c["ChannelName"]: c for c in _moto_training_job("day2").input_data_config}
    assert stored["model"]["ContentType"] == "application/x-sagemaker-model"
    assert stored["model"]["DataSource"]["S3DataSource"]["S3Uri"] == artifact


def test_tuning_trials_warm_start_too(no_aws_env, no_network, capsys, monkeypatch):
    monkeypatch.setenv("DFM_BUCKET", "dfm-bucket")
    config = str(REPO / "configs" / "tune-ps.yaml")
    code, out, err = run(capsys, "tune", config, "--dry-run", "-o", "json", "--set", f"warm_start.from={MODEL}")
    assert code == 0, err
    definition = json.loads(out)["request"]["TrainingJobDefinition"]
    assert channels_of(definition)["model"]["ContentType"] == "application/x-sagemaker-model"
    assert json.loads(definition["StaticHyperParameters"]["warm_start_source"]) == MODEL


def test_an_unknown_job_is_one_line_exit_1(aws):
    plan = compile_spec(spec_on_the_bucket(warm_start={"from": "no-such-job"}), job_name="day2").plan
    with pytest.raises(DfmError) as err:
        training_request.build(plan)
    assert err.value.exit_code == 1 and "no-such-job" in err.value.message


def test_an_empty_prefix_is_refused_before_the_job_is_created(aws, monkeypatch, capsys, tmp_path):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="ck/other/notes.txt", Body=b"x")
    sent = capture_create_requests(monkeypatch)
    path = write_spec(tmp_path, spec_on_the_bucket(), base={})
    for source in (f"s3://{BUCKET}/ck/day1", f"s3://{BUCKET}/ck/other", f"s3://{BUCKET}/ck/day1/model.tar.gz"):
        code, out, err = run(capsys, "launch", path, "--warm-start-from", source, "--job-name", "day2")
        assert code == 1, err
        assert err.strip().splitlines()[-1].startswith("dfm: warm_start.from:") and source in err
    assert sent == []


def test_a_dry_run_with_a_uri_stays_offline(no_aws_env, no_network, capsys, tmp_path):
    path = write_spec(tmp_path)
    code, out, err = run(capsys, "launch", path, "--dry-run", "--warm-start-from", PREFIX)
    assert code == 0, err
    assert "Warm start" in out and PREFIX in out and "channel warmstart" in out
