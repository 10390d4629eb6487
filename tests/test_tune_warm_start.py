"""Tuning warm start: `dfm tune --warm-start-from JOB` (repeatable) becomes WarmStartConfig in the
CreateHyperParameterTuningJob request moto receives; locally, a parent study's completed trials seed the new one."""

from __future__ import annotations

import json

import boto3

from launcher import cli
from launcher.compile import compile_spec, compile_trial
from launcher.local import study_seed
from launcher.plans.tuning_plan import build_tuning_plan
from launcher.rules.tuning_objective import objective_schedule
from launcher.sagemaker_backend import aws as sm_aws
from spec_helpers import REPO, write_spec

REGION, BUCKET = "us-east-1", "dfm-test-bucket"
CONFIG = str(REPO / "configs" / "tune-ps.yaml")
NAME = "deepfm-ps-261124-120000"
TUNE = {
    "objective": {"metric": "eval:auc", "goal": "maximize"},
    "strategy": "bayesian",
    "max_jobs": 4,
    "random_seed": 3,
    "ranges": {"learning_rate": {"min": 0.001, "max": 0.1, "scaling": "log"}, "batch_size": {"values": [128, 256]}},
}


def test_warm_start_from_tuning_jobs_reaches_create_hyper_parameter_tuning_job(aws, monkeypatch, capsys):
    monkeypatch.setenv("DFM_BUCKET", BUCKET)
    monkeypatch.setenv("AWS_REGION", REGION)
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    boto = sm_aws.boto_session(REGION)
    sent: list[dict] = []
    boto.events.register(
        "provide-client-params.sagemaker.CreateHyperParameterTuningJob",
        lambda params, **_: sent.append(json.loads(json.dumps(params))),
    )
    monkeypatch.setattr(sm_aws, "boto_session", lambda region: boto)
    args = ["tune", CONFIG, "--job-name", NAME, "--warm-start-from", "tune-mon", "--warm-start-from", "tune-tue"]
    assert cli.main(args) == 0, capsys.readouterr().err
    assert sent[0]["WarmStartConfig"] == {
        "ParentHyperParameterTuningJobs": [
            {"HyperParameterTuningJobName": "tune-mon"},
            {"HyperParameterTuningJobName": "tune-tue"},
        ],
        "WarmStartType": "IdenticalDataAndAlgorithm",
    }


def test_a_parent_that_is_no_tuning_job_name_is_refused(capsys, monkeypatch, no_aws_env, no_network):
    monkeypatch.setenv("DFM_BUCKET", BUCKET)
    assert cli.main(["tune", CONFIG, "--dry-run", "--warm-start-from", "runs/study_1"]) == 2
    assert "tune.warm_start.parents" in capsys.readouterr().err


def test_transfer_learning_is_spelled_as_the_api_does(capsys, monkeypatch, no_aws_env, no_network):
    monkeypatch.setenv("DFM_BUCKET", BUCKET)
    args = [
        "tune",
        CONFIG,
        "--dry-run",
        "-o",
        "json",
        "--set",
        "tune.warm_start={type: transfer_learning, parents: [a]}",
    ]
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["request"]["WarmStartConfig"]["WarmStartType"] == "TransferLearning"


def local_tuning(folder, tune, seed_from=()):
    from launcher.local.tuning_study import LocalTuning

    folder.mkdir(parents=True, exist_ok=True)
    path = write_spec(
        folder,
        {"tune": tune, "data": {"eval": "s3://dfm-test/eval/"}, "checkpoints": False, "hyperparameters": {"epochs": 3}},
    )
    compiled = compile_spec(path, env={})
    assert compiled.ok, compiled.errors
    tplan = build_tuning_plan(compiled.spec, compiled.plan, schedule=objective_schedule(compiled.spec), name="study")
    lines: list[str] = []
    tuning = LocalTuning(
        tplan, compiled.spec, folder / "runs", compile_trial, echo=lines.append, seed_from=list(seed_from)
    )
    return tuning, lines


def test_a_local_study_is_seeded_with_its_parents_completed_trials(tmp_path):
    import optuna

    parent, _ = local_tuning(tmp_path / "monday", TUNE)
    study = parent.open_study(False)
    space = {
        "learning_rate": optuna.distributions.FloatDistribution(0.001, 0.1, log=True),
        "batch_size": optuna.distributions.CategoricalDistribution([128, 256]),
    }
    for value, learning_rate in ((0.71, 0.01), (0.74, 0.05), (0.69, 0.002)):
        params = {"learning_rate": learning_rate, "batch_size": 256}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=space, value=value))
    failed = optuna.trial.create_trial(
        params={"learning_rate": 0.02, "batch_size": 128}, distributions=space, state=optuna.trial.TrialState.FAIL
    )
    study.add_trial(failed)  # not completed: not carried over
    narrower = {**TUNE, "ranges": {**TUNE["ranges"], "learning_rate": {"min": 0.005, "max": 0.1, "scaling": "log"}}}
    child, lines = local_tuning(tmp_path / "tuesday", narrower, seed_from=[parent.folder])
    seeded = child.open_study(False)

    parents = [t for t in seeded.get_trials(deepcopy=False) if study_seed.PARENT in t.user_attrs]
    assert sorted((t.value, t.params["learning_rate"]) for t in parents) == [(0.71, 0.01), (0.74, 0.05)]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in parents)
    assert child.counted(seeded) == []  # the parents' trials do not count towards max_jobs
    assert "2 trial(s) of 1 parent study(ies), 1 left out" in lines[-1]
    unseeded, _ = local_tuning(tmp_path / "alone", narrower)
    assert unseeded.open_study(False).get_trials(states=(optuna.trial.TrialState.COMPLETE,)) == []


def test_a_folder_without_a_study_is_one_line_exit_2(tmp_path):
    import pytest

    from launcher.errors import DfmError

    child, _ = local_tuning(tmp_path / "tuesday", TUNE, seed_from=[tmp_path / "nothing"])
    with pytest.raises(DfmError) as err:
        child.open_study(False)
    assert err.value.exit_code == 2 and "not a local study's folder" in err.value.message
