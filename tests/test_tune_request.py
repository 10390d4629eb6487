"""`dfm tune --dry-run` and submit: the CreateHyperParameterTuningJob request the SDK's own tuner sends, checked
by botocore's model; submitted to moto; followed (status, trials, stop) with moto and botocore's Stubber."""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from launcher import cli
from launcher.sagemaker_backend import (
    aws as sm_aws,
    sdk as sm_sdk,
    training_request as sm_request,
    tuning_request,
    tuning_jobs,
)
from spec_helpers import REPO

REGION, BUCKET = "us-east-1", "dfm-test-bucket"
NAME = "deepfm-ps-261124-120000"
CONFIG = str(REPO / "configs" / "tune-ps.yaml")
ENV = {"DFM_BUCKET": BUCKET, "AWS_REGION": REGION}


def dry_run_json(capsys, monkeypatch, *extra: str) -> dict:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["tune", CONFIG, "--dry-run", "--output", "json", "--job-name", NAME, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_dry_run_is_offline_and_botocore_accepts_it(capsys, monkeypatch, no_aws_env, no_network):
    document = dry_run_json(capsys, monkeypatch)
    built = document["request"]
    from botocore.validate import ParamValidator

    shape = (
        boto3.session.Session(region_name=REGION)
        .client("sagemaker")
        .meta.service_model.operation_model("CreateHyperParameterTuningJob")
        .input_shape
    )
    assert not ParamValidator().validate(built, shape).has_errors()
    config = built["HyperParameterTuningJobConfig"]
    assert built["HyperParameterTuningJobName"] == NAME
    assert config["Strategy"] == "Bayesian" and config["TrainingJobEarlyStoppingType"] == "Auto"
    assert config["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 20, "MaxParallelTrainingJobs": 2}
    ranges = config["ParameterRanges"]
    assert {r["Name"]: r["ScalingType"] for r in ranges["ContinuousParameterRanges"]} == {
        "learning_rate": "Logarithmic",
        "l2_dense": "Auto",
        "dropout": "Auto",
    }
    assert [r["Name"] for r in ranges["IntegerParameterRanges"]] == ["embedding_size"]
    definition = built["TrainingJobDefinition"]
    assert definition["StaticHyperParameters"]["sagemaker_parameter_server_enabled"] == "true"
    assert not {"learning_rate", "batch_size", "embedding_size"} & set(definition["StaticHyperParameters"])
    assert "eval:auc" in [m["Name"] for m in definition["AlgorithmSpecification"]["MetricDefinitions"]]
    assert definition["HyperParameterTuningResourceConfig"] == {
        "InstanceCount": 2,
        "InstanceType": "ml.c5.18xlarge",
        "VolumeSizeInGB": 100,
    }
    assert document["cost"]["max_usd"] == pytest.approx(20 * document["cost"]["trial_max_usd"])
    assert document["cost"]["max_wall_hours"] == 10.0  # 10 rounds of 2 trials x max_run 1 h


def test_dry_run_equals_what_the_sdks_own_tuner_sends(capsys, monkeypatch, aws):
    """The reference: a TensorFlow estimator and a HyperparameterTuner built the way an SDK user does, fit()
    against moto (the source really uploaded), the CreateHyperParameterTuningJob parameters captured."""
    document = dry_run_json(capsys, monkeypatch)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    from sagemaker.inputs import TrainingInput
    from sagemaker.parameter import CategoricalParameter, ContinuousParameter, IntegerParameter
    from sagemaker.tuner import HyperparameterTuner, TuningJobCompletionCriteriaConfig

    sent: list[dict] = []
    boto = sm_aws.boto_session(REGION)
    boto.events.register(
        "provide-client-params.sagemaker.CreateHyperParameterTuningJob",
        lambda params, **_: sent.append(json.loads(json.dumps(params))),
    )
    import sagemaker

    session = sagemaker.Session(boto_session=boto, default_bucket=BUCKET)
    estimator = sm_sdk.estimator(document["estimator"]["kwargs"], session)
    ranges = {}  # the config's ranges, as an SDK user writes them
    for name, given in yaml.safe_load(open(CONFIG))["tune"]["ranges"].items():
        scaling = {"log": "Logarithmic"}.get(given.get("scaling"), "Auto")
        if "values" in given:
            ranges[name] = CategoricalParameter(given["values"])
        elif given.get("type") == "integer":
            ranges[name] = IntegerParameter(given["min"], given["max"], scaling_type=scaling)
        else:
            ranges[name] = ContinuousParameter(given["min"], given["max"], scaling_type=scaling)
    tuner = HyperparameterTuner(
        estimator,
        hyperparameter_ranges=ranges,
        completion_criteria_config=TuningJobCompletionCriteriaConfig(max_number_of_training_jobs_not_improving=8),
        **document["tuner"]["kwargs"],
    )
    data = f"s3://{BUCKET}/deepfm"
    tuner.fit(
        {
            "train": TrainingInput(f"{data}/train/", distribution="ShardedByS3Key", input_mode="File"),
            "eval": TrainingInput(f"{data}/eval/", input_mode="File"),
        },
        job_name=NAME,
        wait=False,
    )
    assert sent == [document["request"]]


def test_submit_creates_the_tuning_job_and_status_lists_it(aws, monkeypatch, capsys):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    assert cli.main(["tune", CONFIG, "--job-name", NAME, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["job_name"] == NAME
    summary = tuning_jobs.describe(NAME, REGION, with_trials=False)
    assert summary["strategy"] == "Bayesian" and summary["max_jobs"] == 20
    assert summary["objective"] == {"metric": "eval:auc", "type": "Maximize"}
    assert [job["job_name"] for job in tuning_jobs.list_jobs(REGION)] == [NAME]
    source = f"deepfm/{NAME}/source/sourcedir.tar.gz"  # uploaded where the request says
    assert boto3.client("s3", region_name=REGION).head_object(Bucket=BUCKET, Key=source)["ContentLength"] > 0


def test_submit_sends_exactly_the_dry_runs_request(aws, monkeypatch, capsys):
    """The dry run prints a built TuningRequest; submit(request) sends that value, nothing rebuilt or faked: the
    CreateHyperParameterTuningJob parameters moto received equal the dry run's JSON."""
    document = dry_run_json(capsys, monkeypatch)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    boto = sm_aws.boto_session(REGION)
    sent: list[dict] = []
    boto.events.register(
        "provide-client-params.sagemaker.CreateHyperParameterTuningJob",
        lambda params, **_: sent.append(json.loads(json.dumps(params))),
    )
    monkeypatch.setattr(sm_aws, "boto_session", lambda region: boto)
    assert cli.main(["tune", CONFIG, "--job-name", NAME]) == 0
    assert sent == [document["request"]]
    built = tuning_request.build(cli_tune_plan(monkeypatch))
    with pytest.raises(AttributeError):
        built.request_json = "{}"  # frozen
    built.request["HyperParameterTuningJobName"] = "changed"  # a read is a copy
    assert built.request == document["request"]


def cli_tune_plan(monkeypatch):
    from launcher.cli.tune import compile_tuning

    return compile_tuning(CONFIG, (), NAME)[1]


def stubbed(monkeypatch) -> Stubber:
    client = boto3.client("sagemaker", region_name=REGION)
    monkeypatch.setattr(sm_aws, "client", lambda service, region=None: client)
    return Stubber(client)


def trial(name: str, status: str, value: float | None, **tuned: str) -> dict:
    summary = {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{name}",
        "CreationTime": datetime.datetime(2026, 11, 24),
        "TrainingJobStatus": status,
        "TunedHyperParameters": tuned,
    }
    if value is not None:
        summary["FinalHyperParameterTuningJobObjectiveMetric"] = {"MetricName": "eval:auc", "Value": value}
    return summary


BEST = trial(f"{NAME}-002-abc", "Completed", 0.7412, learning_rate="0.004", batch_size='"1024"')
TRIALS = {
    "TrainingJobSummaries": [
        BEST,
        trial(f"{NAME}-001-abc", "Completed", 0.7301, learning_rate="0.02", batch_size='"512"'),
        trial(f"{NAME}-003-abc", "Stopped", None, learning_rate="0.09", batch_size='"512"'),
    ]
}


def described(status: str, completed: int = 2, running: int = 1) -> dict:
    return {
        "HyperParameterTuningJobName": NAME,
        "HyperParameterTuningJobArn": f"arn:aws:sagemaker:{REGION}:123456789012:hyper-parameter-tuning-job/{NAME}",
        "HyperParameterTuningJobConfig": {
            "Strategy": "Bayesian",
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "eval:auc"},
            "ParameterRanges": {
                "ContinuousParameterRanges": [
                    {"Name": "learning_rate", "MinValue": "0.001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}
                ],
                "CategoricalParameterRanges": [{"Name": "batch_size", "Values": ["512", "1024"]}],
            },
        },
        "HyperParameterTuningJobStatus": status,
        "CreationTime": datetime.datetime(2026, 11, 24),
        "TrainingJobStatusCounters": {
            "Completed": completed,
            "InProgress": running,
            "RetryableError": 0,
            "NonRetryableError": 0,
            "Stopped": 1,
        },
        "ObjectiveStatusCounters": {"Succeeded": completed, "Pending": running, "Failed": 0},
        "BestTrainingJob": BEST,
    }


def test_status_finds_the_tuning_job_and_gives_counts_best_and_each_trial(monkeypatch, aws, capsys):
    stub = stubbed(monkeypatch)
    # no --kind: dfm asks for a training job of that name first, then a tuning job
    stub.add_client_error("describe_training_job", "ValidationException", "Requested resource not found.")
    stub.add_response("describe_hyper_parameter_tuning_job", described("InProgress"))
    stub.add_response("list_training_jobs_for_hyper_parameter_tuning_job", TRIALS)
    with stub:
        assert cli.main(["status", NAME, "--region", REGION, "--output", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trials"] == {"completed": 2, "running": 1, "stopped": 1, "failed": 0}
    assert summary["best"]["objective"] == 0.7412
    assert summary["best"]["hyperparameters"] == {"learning_rate": 0.004, "batch_size": 1024}
    assert [(t["status"], t["objective"]) for t in summary["trial_list"]] == [
        ("Completed", 0.7412),
        ("Completed", 0.7301),
        ("Stopped", None),
    ]
    assert tuning_jobs.trial_to_follow(summary) == f"{NAME}-002-abc"


def test_stop_sends_stop_hyper_parameter_tuning_job(monkeypatch, aws):
    stub = stubbed(monkeypatch)
    stub.add_response("stop_hyper_parameter_tuning_job", {}, {"HyperParameterTuningJobName": NAME})
    with stub:
        assert cli.main(["stop", NAME, "--kind", "tuning", "--region", REGION]) == 0
    stub.assert_no_pending_responses()


def test_the_request_is_checked_against_the_tuning_operations_model(no_aws_env, no_network):
    """Beyond botocore's validator (types, minimums): the service model's maximums and patterns."""
    with pytest.raises(Exception) as refused:
        sm_request.validate(
            boto3.session.Session(region_name=REGION).client("sagemaker"),
            {"HyperParameterTuningJobName": "x" * 40, "HyperParameterTuningJobConfig": {}},
            tuning_request.OPERATION,
        )
    assert "CreateHyperParameterTuningJob request would be refused" in str(refused.value)


def test_dry_run_text_shows_the_ranges_and_the_ceilings(capsys, monkeypatch, no_aws_env, no_network):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["tune", CONFIG, "--dry-run", "--job-name", NAME]) == 0
    out = capsys.readouterr().out
    assert f"tuning job {NAME}: Bayesian, maximize eval:auc, 20 trials, 2 at once, early stopping auto" in out
    assert "learning_rate   continuous   0.1 .. 0.5 (logarithmic)" in out
    assert "cost ceiling: $146.80 (20 trials x $7.34)" in out
    assert "wall time: at most 1" in out and "(10 rounds of 2 trials x 1.0 h)" in out


def test_tune_without_a_tune_section_is_a_usage_error(capsys, monkeypatch, no_aws_env, no_network):
    assert cli.main(["tune", str(REPO / "configs" / "ps.yaml"), "--dry-run"]) == 2
    assert "no tune: section" in capsys.readouterr().err


def test_warm_start_parents_keep_the_specs_order(capsys, monkeypatch, no_aws_env, no_network):
    """The SDK's WarmStartConfig holds its parents in a set: the request's order changed from run to run."""
    parents = ["tune-e", "tune-d", "tune-c", "tune-b", "tune-a"]
    document = dry_run_json(
        capsys, monkeypatch, "--set", f"tune.warm_start={{type: transfer_learning, parents: [{', '.join(parents)}]}}"
    )
    sent = document["request"]["WarmStartConfig"]["ParentHyperParameterTuningJobs"]
    assert [p["HyperParameterTuningJobName"] for p in sent] == parents


def test_job_name_is_held_to_the_tuning_apis_32_characters(capsys, monkeypatch, no_aws_env, no_network):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["tune", CONFIG, "--dry-run", "--job-name", "d" * 33]) == 2
    err = capsys.readouterr().err
    assert "--job-name: " in err and "at most 32" in err
    assert cli.main(["tune", CONFIG, "--dry-run", "--job-name", "d" * 32]) == 0


def test_status_of_a_tuning_job_gives_the_best_as_a_launch_line_and_draws_the_plot(monkeypatch, aws, capsys, tmp_path):
    stub = stubbed(monkeypatch)
    stub.add_response("describe_hyper_parameter_tuning_job", described("InProgress"))
    stub.add_response("list_training_jobs_for_hyper_parameter_tuning_job", TRIALS)
    plot = tmp_path / "trials.png"
    with stub:
        assert cli.main(["status", NAME, "--kind", "tuning", "--region", REGION, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert (
        "launch it: dfm launch SPEC --set hyperparameters.learning_rate=0.004 --set hyperparameters.batch_size=1024"
        in out
    )
    assert f"plot: {plot}" in out and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tune_wait_follows_the_job_to_its_end_and_reports_it_as_a_local_study(monkeypatch, aws, capsys, tmp_path):
    """Submitted to moto (the real SDK building the request), then followed with Stubber's answers: a line per
    change of the counts, and at the end the trials, the `dfm launch` line with this spec and study.png/json."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    stub = stubbed(monkeypatch)
    stub.add_response("describe_hyper_parameter_tuning_job", described("InProgress", completed=1, running=2))
    stub.add_response("describe_hyper_parameter_tuning_job", described("InProgress", completed=1, running=2))
    stub.add_response("describe_hyper_parameter_tuning_job", described("Completed", running=0))
    stub.add_response("list_training_jobs_for_hyper_parameter_tuning_job", TRIALS)
    with stub:
        assert (
            cli.main(
                ["tune", CONFIG, "--job-name", NAME, "--wait", "--poll", "0", "--set", f"local.run_dir={tmp_path}"]
            )
            == 0
        )
    stub.assert_no_pending_responses()
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if line.startswith(f"[dfm tune] {NAME}:")]
    assert [line.split(": ", 1)[1].split(",")[:2] for line in progress] == [
        ["InProgress", " 1 completed"],
        ["Completed", " 2 completed"],
    ]
    assert (
        f"launch it: dfm launch {CONFIG} --set hyperparameters.learning_rate=0.004 --set "
        "hyperparameters.batch_size=1024" in captured.out
    )
    assert (tmp_path / NAME / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    document = json.loads((tmp_path / NAME / "study.json").read_text())
    assert [(t["job_name"], t["state"]) for t in document["trials"]] == [
        (f"{NAME}-001-abc", "complete"),
        (f"{NAME}-002-abc", "complete"),
        (f"{NAME}-003-abc", "stopped"),
    ]
    assert document["best"]["job_name"] == f"{NAME}-002-abc"
