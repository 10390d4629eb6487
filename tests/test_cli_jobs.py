"""`dfm status | logs | stop | list` end to end through the CLI, AWS answered by moto (stop: Stubber)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from botocore.stub import Stubber

from launcher.sagemaker_backend import aws as sm_aws
from spec_helpers import run

REGION = "us-east-1"  # as in conftest.py


def test_status_of_a_completed_job(moto_jobs, capsys):
    moto_jobs.create("deepfm-ps-1", instance_count=2)
    code, out, err = run(capsys, "status", "deepfm-ps-1", "--region", REGION)
    assert code == 0, err
    assert "status     Completed" in out and "2 x ml.c5.xlarge" in out
    assert "#/jobs/deepfm-ps-1" in out

    code, out, _ = run(capsys, "status", "deepfm-ps-1", "--output", "json")  # region from AWS_DEFAULT_REGION
    assert code == 0 and json.loads(out)["status"] == "Completed"


def test_status_of_a_heterogeneous_job_names_each_group(moto_jobs, capsys):
    moto_jobs.create(
        "deepfm-hetero-1",
        groups=[
            {"InstanceGroupName": "worker", "InstanceType": "ml.g5.2xlarge", "InstanceCount": 2},
            {"InstanceGroupName": "ps", "InstanceType": "ml.r5.4xlarge", "InstanceCount": 1},
        ],
    )
    code, out, err = run(capsys, "status", "deepfm-hetero-1", "--region", REGION)
    assert code == 0, err
    assert "instances  2 x ml.g5.2xlarge (worker) + 1 x ml.r5.4xlarge (ps)" in out


def test_status_of_a_failed_job_exits_1_with_the_reason(moto_jobs, capsys):
    moto_jobs.create("deepfm-ps-2")
    moto_jobs.set_state("deepfm-ps-2", "Failed", "AlgorithmError: exit code 1")
    code, out, err = run(capsys, "status", "deepfm-ps-2")
    assert code == 1
    assert "failure    AlgorithmError: exit code 1" in out
    assert err.strip() == "dfm: job deepfm-ps-2 Failed: AlgorithmError: exit code 1"


def test_status_of_an_unknown_job_is_one_line_exit_1(aws, capsys):
    code, out, err = run(capsys, "status", "nope")
    assert code == 1 and out == ""
    assert (
        err.strip()
        == f"dfm: no training, tuning, processing or transform job named nope in {REGION}: check the name, --kind and "
        "--region"
    )


def test_list_text_json_filter_and_max(moto_jobs, capsys):
    for name in ("deepfm-ps-a", "deepfm-hvd-b", "deepfm-ps-c"):
        moto_jobs.create(name)
    code, out, _ = run(capsys, "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["JOB", "KIND", "STATUS", "CREATED", "ENDED"] and len(lines) == 4

    code, out, _ = run(capsys, "list", "--name-contains", "ps", "--output", "json")
    assert code == 0 and sorted(job["job_name"] for job in json.loads(out)) == ["deepfm-ps-a", "deepfm-ps-c"]

    code, out, _ = run(capsys, "list", "--max", "1", "--output", "json")
    assert code == 0 and len(json.loads(out)) == 1

    code, out, _ = run(capsys, "list", "--name-contains", "zzz")
    assert code == 0 and out.strip() == "no jobs whose name contains 'zzz'"


@pytest.mark.parametrize(
    "argv",
    [
        ("list", "--max", "0"),
        ("list", "--output", "xml"),
        ("status",),
        ("logs", "job", "--poll", "-1"),
    ],
)
def test_usage_errors_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err


def test_missing_region_exits_2(no_aws_env, capsys):
    code, _, err = run(capsys, "list")
    assert code == 2 and "no AWS region" in err


def test_logs_text_and_json(moto_jobs, moto_logs, capsys):
    moto_jobs.create("deepfm-ps-l", instance_count=2)
    moto_logs("deepfm-ps-l", "algo-1", "[dfm] train step=100 loss=0.45 auc=0.71 examples_per_sec=9000")
    moto_logs("deepfm-ps-l", "algo-2", "ps ready")

    code, out, _ = run(capsys, "logs", "deepfm-ps-l")
    assert code == 0
    assert sorted(out.splitlines()) == [
        "[algo-1] [dfm] train step=100 loss=0.45 auc=0.71 examples_per_sec=9000",
        "[algo-2] ps ready",
    ]

    code, out, _ = run(capsys, "logs", "deepfm-ps-l", "--output", "json")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {(e["host"], e["message"]) for e in events} == {
        ("algo-1", "[dfm] train step=100 loss=0.45 auc=0.71 examples_per_sec=9000"),
        ("algo-2", "ps ready"),
    }


def test_logs_follow_exits_with_the_jobs_outcome(moto_jobs, moto_logs, capsys):
    moto_jobs.create("deepfm-ps-x")
    moto_jobs.set_state("deepfm-ps-x", "Stopped")
    moto_logs("deepfm-ps-x", "algo-1", "stopping early")

    code, out, err = run(capsys, "logs", "deepfm-ps-x", "--follow", "--poll", "0")
    assert code == 1 and out.splitlines() == ["-- Stopped", "stopping early"]
    assert err.strip() == "dfm: job deepfm-ps-x Stopped"

    code, _, _ = run(capsys, "logs", "deepfm-ps-x")  # without --follow: the lines, not a verdict
    assert code == 0


@pytest.fixture
def stubbed_sagemaker(aws, monkeypatch):
    real = sm_aws.client("sagemaker", REGION)
    monkeypatch.setattr(sm_aws, "client", lambda service, region: real)
    with Stubber(real) as stubber:
        yield stubber


def test_stop(stubbed_sagemaker, capsys):
    stubbed_sagemaker.add_response("stop_training_job", {}, {"TrainingJobName": "deepfm-ps-s"})
    code, out, _ = run(capsys, "stop", "deepfm-ps-s", "--kind", "training")
    assert code == 0 and out.startswith("stopping training job deepfm-ps-s")

    stubbed_sagemaker.add_response("stop_training_job", {}, {"TrainingJobName": "deepfm-ps-t"})
    code, out, _ = run(capsys, "stop", "deepfm-ps-t", "--kind", "training", "--output", "json")
    assert code == 0 and json.loads(out)["status"] == "Stopping"
    stubbed_sagemaker.assert_no_pending_responses()


def test_stop_a_transform_job(stubbed_sagemaker, capsys):
    stubbed_sagemaker.add_response("stop_transform_job", {}, {"TransformJobName": "deepfm-score-1"})
    code, out, _ = run(capsys, "stop", "deepfm-score-1", "--kind", "transform")
    assert code == 0 and out.startswith("stopping transform job deepfm-score-1")
    assert "#/transform-jobs/deepfm-score-1" in out
    stubbed_sagemaker.assert_no_pending_responses()


def test_stop_refused_exits_1(stubbed_sagemaker, capsys):
    stubbed_sagemaker.add_client_error(
        "stop_training_job",
        "ValidationException",
        "The request was rejected because the training job is in status Completed.",
    )
    code, out, err = run(capsys, "stop", "deepfm-ps-s", "--kind", "training")
    assert code == 1 and out == ""
    assert err.startswith("dfm: AWS refused stopping deepfm-ps-s (ValidationException)") and err.count("\n") == 1


def test_help_imports_neither_boto3_nor_sagemaker():
    code = (
        "import sys\n"
        "from launcher.cli import main\n"
        "for argv in (['--help'], ['status', '--help'], ['list', '--help']):\n"
        "    assert main(argv) == 0\n"
        "heavy = [m for m in ('sagemaker', 'boto3', 'botocore') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Show a job's state" in done.stdout and "--name-contains" in done.stdout


def test_list_merges_every_kind_newest_first(stubbed_sagemaker, capsys):
    import datetime

    day = datetime.datetime(2026, 11, 24)
    stubbed_sagemaker.add_response(
        "list_training_jobs",
        {
            "TrainingJobSummaries": [
                {
                    "TrainingJobName": "deepfm-ps-old",
                    "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/deepfm-ps-old",
                    "CreationTime": day,
                    "TrainingJobStatus": "Completed",
                }
            ]
        },
    )
    stubbed_sagemaker.add_response(
        "list_hyper_parameter_tuning_jobs",
        {
            "HyperParameterTuningJobSummaries": [
                {
                    "HyperParameterTuningJobName": "deepfm-tune-1",
                    "HyperParameterTuningJobArn": (
                        "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/deepfm-tune-1"
                    ),
                    "HyperParameterTuningJobStatus": "InProgress",
                    "Strategy": "Bayesian",
                    "CreationTime": day.replace(hour=3),
                    "TrainingJobStatusCounters": {},
                    "ObjectiveStatusCounters": {},
                }
            ]
        },
    )
    stubbed_sagemaker.add_response(
        "list_processing_jobs",
        {
            "ProcessingJobSummaries": [
                {
                    "ProcessingJobName": "deepfm-prep-1",
                    "ProcessingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:processing-job/deepfm-prep-1",
                    "CreationTime": day.replace(hour=1),
                    "ProcessingJobStatus": "Failed",
                }
            ]
        },
    )
    stubbed_sagemaker.add_response(
        "list_transform_jobs",
        {
            "TransformJobSummaries": [
                {
                    "TransformJobName": "deepfm-score-1",
                    "TransformJobArn": "arn:aws:sagemaker:us-east-1:123456789012:transform-job/deepfm-score-1",
                    "CreationTime": day.replace(hour=2),
                    "TransformJobStatus": "InProgress",
                }
            ]
        },
    )
    code, out, _ = run(capsys, "list", "--output", "json")
    assert code == 0
    assert [(job["job_name"], job["kind"], job["status"]) for job in json.loads(out)] == [
        ("deepfm-tune-1", "tuning", "InProgress"),
        ("deepfm-score-1", "transform", "InProgress"),
        ("deepfm-prep-1", "processing", "Failed"),
        ("deepfm-ps-old", "training", "Completed"),
    ]


def test_status_without_kind_names_every_kind_it_asked(stubbed_sagemaker, capsys):
    stubbed_sagemaker.add_client_error("describe_training_job", "ValidationException", "Requested resource not found.")
    stubbed_sagemaker.add_client_error(
        "describe_hyper_parameter_tuning_job", "ResourceNotFound", "Amazon SageMaker can't find a tuning job"
    )
    stubbed_sagemaker.add_client_error("describe_processing_job", "ValidationException", "Could not find requested job")
    stubbed_sagemaker.add_client_error("describe_transform_job", "ValidationException", "Could not find requested job")
    code, out, err = run(capsys, "status", "nope")
    assert code == 1 and out == "" and "no training, tuning, processing or transform job named nope" in err


def test_status_without_a_job_lists_the_recent_jobs(stubbed_sagemaker, capsys):
    import datetime

    stubbed_sagemaker.add_response(
        "list_training_jobs",
        {
            "TrainingJobSummaries": [
                {
                    "TrainingJobName": "deepfm-ps-1",
                    "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/deepfm-ps-1",
                    "CreationTime": datetime.datetime(2026, 11, 24),
                    "TrainingJobStatus": "InProgress",
                }
            ]
        },
    )
    code, out, _ = run(capsys, "status", "--kind", "training")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["JOB", "KIND", "STATUS", "CREATED", "ENDED"] and row.split()[:3] == [
        "deepfm-ps-1",
        "training",
        "InProgress",
    ]
