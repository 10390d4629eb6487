"""Operations on SageMaker (moto): RetryStrategy, TensorBoard and MLflow in the request, `dfm launch --wait`
resubmitting a job that lost its capacity, the stall watchdog, and `dfm status` naming every attempt."""

from __future__ import annotations

import dataclasses
import itertools

import boto3
import pytest
from conftest import BUCKET, JOB, REGION
from test_sagemaker_backend import capture_create_requests, hook_sessions

from launcher.plans import recovery
from launcher.errors import DfmError
from launcher.sagemaker_backend import attempts, training_jobs
from launcher.sagemaker_backend.logs import StallWatch, Stalled

ARN = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/ads"
CAPACITY = "CapacityError: Unable to provision requested ML compute capacity. InsufficientCapacityError"
RECOVER = {"recover": {"max_restarts": 2, "backoff_s": 30, "instance_types": ["ml.c5.18xlarge", "ml.m5.24xlarge"]}}


def test_operations_reach_the_request(sample_plan, no_aws_env, no_network):
    from launcher.sagemaker_backend import training_request

    plan = sample_plan(
        {
            "retry": {"max_attempts": 3},
            "tensorboard": True,
            "mlflow": {"tracking_server_arn": ARN, "experiment": "ctr", "run": "nightly"},
        }
    )
    sent = training_request.build(plan).arguments()
    assert sent["RetryStrategy"] == {"MaximumRetryAttempts": 3}
    assert sent["TensorBoardOutputConfig"] == {
        "S3OutputPath": f"s3://{BUCKET}/deepfm/{JOB}/tensorboard",
        "LocalPath": "/opt/ml/output/tensorboard",
    }
    assert sent["MlflowConfig"] == {"MlflowResourceArn": ARN, "MlflowExperimentName": "ctr", "MlflowRunName": "nightly"}
    watched = training_request.dry_run(sample_plan({**RECOVER, "stall_timeout": 900}))
    assert watched["watch"] == {
        "stall_timeout_s": 900,
        "recovery": {"max_restarts": 2, "backoff_s": 30.0, "instance_types": ["ml.c5.18xlarge", "ml.m5.24xlarge"]},
    }
    from launcher.cli.render import render_dry_run

    text = render_dry_run(watched)
    assert "up to 2 resubmissions (<job>-r1, ...) on ml.c5.18xlarge, then ml.m5.24xlarge" in text
    assert "stopped after 900 s without a metric line" in text
    without = training_request.build(sample_plan()).arguments()
    assert not {"RetryStrategy", "TensorBoardOutputConfig", "MlflowConfig"} & set(without)


LONG = "x" * 39 + "-2026-11-25-14-00-00-000"  # 63 characters: every attempt's name is cut


def test_attempt_names_fit_and_are_numbered():
    assert len(LONG) == 63
    for attempt in (1, 9, 12):
        name = recovery.attempt_name(LONG, attempt)
        assert len(name) <= 63 and name.endswith(f"-r{attempt}")
        assert recovery.attempt_number(name) == attempt
    assert recovery.attempt_name(JOB, 3) == f"{JOB}-r3" and recovery.attempt_number(JOB) == 0


@pytest.mark.parametrize(
    "summary, worth",
    [
        ({"status": "Failed", "failure_reason": CAPACITY}, True),
        ({"status": "Stopped", "secondary_status": "MaxWaitTimeExceeded"}, True),
        ({"status": "Failed", "failure_reason": "AlgorithmError: out of memory"}, False),
        ({"status": "Stopped", "secondary_status": "Stopped"}, False),  # a person stopped it
    ],
)
def test_only_lost_capacity_is_worth_a_resubmission(summary, worth):
    assert (recovery.recoverable(summary) is not None) is worth


def _drive(monkeypatch, moto_jobs, plan, endings):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    sent = capture_create_requests(monkeypatch)
    queue = list(endings)

    def job_ends(**_):
        status, secondary, reason = queue.pop(0)
        name = sent[-1]["TrainingJobName"]
        moto_jobs.set_state(name, status, reason)
        from conftest import _moto_training_job

        _moto_training_job(name).secondary_status = secondary

    hook_sessions(monkeypatch, "after-call.sagemaker.CreateTrainingJob", job_ends)
    echoed, slept = [], []
    try:
        attempts.launch(plan, wait=True, echo=echoed.append, warn=echoed.append, poll_seconds=0, sleep=slept.append)
        code = 0
    except DfmError as err:
        code = err.exit_code
        echoed.append(err.message)
    return sent, echoed, slept, code


def test_a_capacity_failure_is_resubmitted_and_resumes_from_the_same_checkpoints(sample_plan, moto_jobs, monkeypatch):
    plan = sample_plan(RECOVER)
    sent, echoed, slept, code = _drive(
        monkeypatch, moto_jobs, plan, [("Failed", "Failed", CAPACITY), ("Completed", "Completed", None)]
    )
    assert code == 0 and slept == [30]
    assert [r["TrainingJobName"] for r in sent] == [JOB, f"{JOB}-r1"]
    assert sent[0]["CheckpointConfig"] == sent[1]["CheckpointConfig"]
    assert sent[0]["CheckpointConfig"]["S3Uri"] == f"s3://{BUCKET}/deepfm/{JOB}/checkpoints"
    assert sent[1]["ResourceConfig"]["InstanceType"] == "ml.c5.18xlarge"  # the list's first type
    assert any(line.startswith(f"[dfm] attempt 1 ({JOB} on ml.c5.18xlarge): Failed: CapacityError") for line in echoed)
    assert any(line.startswith(f"[dfm] attempt 2 ({JOB}-r1 on ml.c5.18xlarge): Completed") for line in echoed)
    summary = training_jobs.describe(f"{JOB}-r1", REGION)
    assert summary["attempts"] == [JOB, f"{JOB}-r1"]
    assert training_jobs.describe(JOB, REGION)["attempts"] == [JOB, f"{JOB}-r1"]


def test_status_lists_every_attempt_of_a_63_character_job(sample_plan, moto_jobs, monkeypatch, capsys):
    from launcher.cli import main

    plan = sample_plan(RECOVER, job_name=LONG)
    sent, echoed, slept, code = _drive(
        monkeypatch,
        moto_jobs,
        plan,
        [("Failed", "Failed", CAPACITY), ("Failed", "Failed", CAPACITY), ("Completed", "Completed", None)],
    )
    names = [r["TrainingJobName"] for r in sent]
    assert code == 0 and names == [LONG, recovery.attempt_name(LONG, 1), recovery.attempt_name(LONG, 2)]
    assert not names[1].startswith(LONG)  # cut: the names alone do not lead back to the first
    assert [r.get("Tags", []) for r in sent[1:]] == [[{"Key": recovery.FIRST_ATTEMPT_TAG, "Value": LONG}]] * 2
    for name in names:
        assert training_jobs.describe(name, REGION)["attempts"] == names
        main(["status", name, "--region", REGION])  # exit 1 for the failed attempts
        assert f"attempts   {', '.join(names)}" in capsys.readouterr().out


def test_attempts_run_the_first_attempts_source_and_share_its_tensorboard(
    sample_plan, moto_jobs, monkeypatch, source_dir
):
    plan = sample_plan({**RECOVER, "tensorboard": True})
    edits = []
    hook_sessions(
        monkeypatch,
        "after-call.sagemaker.CreateTrainingJob",  # the tree changes while the job waits
        lambda **_: edits.append((source_dir / "train.py").write_text(f"print({len(edits)})\n")),
    )
    sent, echoed, slept, code = _drive(
        monkeypatch, moto_jobs, plan, [("Failed", "Failed", CAPACITY), ("Completed", "Completed", None)]
    )
    assert code == 0 and len(sent) == 2 and edits
    first_source = f'"s3://{BUCKET}/deepfm/{JOB}/source/sourcedir.tar.gz"'
    assert [r["HyperParameters"]["sagemaker_submit_directory"] for r in sent] == [first_source] * 2
    uploaded = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in uploaded if o["Key"].endswith("sourcedir.tar.gz")] == [
        f"deepfm/{JOB}/source/sourcedir.tar.gz"
    ]
    assert [r["TensorBoardOutputConfig"]["S3OutputPath"] for r in sent] == [
        f"s3://{BUCKET}/deepfm/{JOB}/tensorboard"
    ] * 2


def test_a_spot_job_out_of_max_wait_moves_on_and_the_last_attempt_decides_the_exit(sample_plan, moto_jobs, monkeypatch):
    plan = sample_plan({**RECOVER, "spot": {"max_wait": 7200}})
    spot_out = ("Stopped", "MaxWaitTimeExceeded", None)
    sent, echoed, slept, code = _drive(monkeypatch, moto_jobs, plan, [spot_out, spot_out, spot_out])
    assert code == 1 and slept == [30, 60]  # two restarts at most, the back-off doubled
    assert [r["TrainingJobName"] for r in sent] == [JOB, f"{JOB}-r1", f"{JOB}-r2"]
    assert [r["ResourceConfig"]["InstanceType"] for r in sent] == ["ml.c5.18xlarge", "ml.c5.18xlarge", "ml.m5.24xlarge"]
    assert len({r["CheckpointConfig"]["S3Uri"] for r in sent}) == 1
    assert echoed[-1] == f"job {JOB}-r2 Stopped"


def test_a_spot_job_out_of_max_wait_is_resumed_and_completes(sample_plan, moto_jobs, monkeypatch):
    plan = sample_plan(
        {
            "recover": {"max_restarts": 1, "backoff_s": 5},
            "spot": {"max_wait": 7200},
            "checkpoints": f"s3://{BUCKET}/ck/spot/",
        }
    )
    sent, echoed, slept, code = _drive(
        monkeypatch, moto_jobs, plan, [("Stopped", "MaxWaitTimeExceeded", None), ("Completed", "Completed", None)]
    )
    assert code == 0 and slept == [5]
    assert [r["TrainingJobName"] for r in sent] == [JOB, f"{JOB}-r1"]
    assert [r["CheckpointConfig"]["S3Uri"] for r in sent] == [f"s3://{BUCKET}/ck/spot/"] * 2
    assert all(r["EnableManagedSpotTraining"] for r in sent)
    assert any("spot capacity: MaxWaitTimeExceeded" in line and "resubmitting in 5 s" in line for line in echoed)


def test_a_failure_of_the_job_itself_is_not_resubmitted(sample_plan, moto_jobs, monkeypatch):
    sent, echoed, slept, code = _drive(
        monkeypatch, moto_jobs, sample_plan(RECOVER), [("Failed", "Failed", "AlgorithmError: out of memory")]
    )
    assert code == 1 and slept == [] and len(sent) == 1
    assert echoed[-1] == f"job {JOB} Failed: AlgorithmError: out of memory"


def test_without_recover_a_capacity_failure_says_how_to_recover(sample_plan, moto_jobs, monkeypatch):
    sent, echoed, slept, code = _drive(monkeypatch, moto_jobs, sample_plan(), [("Failed", "Failed", CAPACITY)])
    assert code == 1 and len(sent) == 1
    assert any("add recover: to the spec" in line for line in echoed)


def test_the_stall_watch_names_the_host_silent_longest():
    now = [0.0]
    watch = StallWatch(60, clock=lambda: now[0])
    watch.check()  # nothing written yet: provisioning does not count
    watch.saw("algo-1", "[dfm] train step=10 loss=0.5 auc=0.6 examples_per_sec=1.0")
    now[0] = 5
    watch.saw("algo-2", "worker 0: waiting")
    now[0] = 50
    watch.saw("algo-1", "[dfm] note: still here")  # not a metric line
    now[0] = 60
    watch.check()
    now[0] = 61
    with pytest.raises(Stalled) as caught:
        watch.check()
    assert "no metric line for 61 s" in str(caught.value)
    assert "silent longest: algo-2, 56 s since its last line: worker 0: waiting" in str(caught.value)


def test_a_return_to_training_starts_the_silence_again():
    """600 s timeout, 500 s of silence, a spot interruption and a resume: the resumed script restoring its
    checkpoint has its own 600 s before it must print a metric line."""
    now = [0.0]
    watch = StallWatch(600, clock=lambda: now[0])
    watch.enter("Training", 1)
    watch.saw("algo-1", "[dfm] train step=10 loss=0.5 auc=0.6 examples_per_sec=1.0")
    now[0] = 500
    watch.enter("Interrupted", 1)
    now[0] = 900
    watch.enter("Training", 2)
    now[0] = 1050  # 150 s after resuming, still restoring
    watch.check()
    now[0] = 1500
    watch.check()
    now[0] = 1501
    with pytest.raises(Stalled, match="no metric line for 601 s in Training"):
        watch.check()


def test_a_return_to_training_between_two_polls_starts_the_silence_again():
    """Both polls read Training; the job's transitions show it entered Training once more in between."""
    now = [0.0]
    watch = StallWatch(600, clock=lambda: now[0])
    watch.enter("Training", 1)
    watch.saw("algo-1", "[dfm] train step=10 loss=0.5 auc=0.6 examples_per_sec=1.0")
    now[0] = 500
    watch.enter("Training", 2)
    now[0] = 1050
    watch.check()
    now[0] = 1101
    with pytest.raises(Stalled, match="no metric line for 601 s"):
        watch.check()


def test_a_resumed_job_restoring_silently_is_not_stopped(sample_plan, moto_jobs, moto_logs, monkeypatch):
    """The transitions DescribeTrainingJob returns are what the watch reads: a resume between two polls, then
    restoring longer than the silence left before the interruption, is not a stall."""
    from conftest import _moto_training_job

    plan = sample_plan({"stall_timeout": 100, "spot": {"max_wait": 7200}})
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    moto_logs(plan.job_name, "algo-1", "[dfm] train step=1 loss=0.5 auc=0.5 examples_per_sec=1.0")
    entered = [{"Status": "Training", "StartTime": 0}]
    polls = iter([1, 1, 2, 2])  # Training entries at each poll: one resume, unseen as a phase

    def next_poll(**_):
        count = next(polls, None)
        job = _moto_training_job(plan.job_name)
        if count is None:
            moto_jobs.set_state(plan.job_name, "Completed")
            return
        moto_jobs.set_state(plan.job_name, "InProgress", secondary="Training")
        job.secondary_status_transitions = entered * count

    hook_sessions(monkeypatch, "before-call.sagemaker.DescribeTrainingJob", next_poll)
    ticks = itertools.count(0, 20)  # 20 s pass at each reading of the watch's clock (two per poll, one per line)
    monkeypatch.setattr(attempts, "StallWatch", lambda timeout: StallWatch(timeout, clock=lambda: next(ticks)))
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: pytest.fail(f"{name} was stopped"))
    assert attempts.launch(plan, wait=True, echo=lambda line: None, poll_seconds=0) == plan.job_name


def test_a_stalled_job_is_stopped_and_exits_1(sample_plan, moto_jobs, moto_logs, monkeypatch):
    plan = sample_plan({"stall_timeout": 60})
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    moto_logs(plan.job_name, "algo-1", "[dfm] train step=1 loss=0.5 auc=0.5 examples_per_sec=1.0")
    hook_sessions(
        monkeypatch,
        "after-call.sagemaker.CreateTrainingJob",
        lambda **_: moto_jobs.set_state(plan.job_name, "InProgress", secondary="Training"),
    )
    ticks = itertools.count(0, 10)  # the watch's clock: 10 s pass at each reading (two per poll, one per line)
    monkeypatch.setattr(attempts, "StallWatch", lambda timeout: StallWatch(timeout, clock=lambda: next(ticks)))
    stopped = []
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: stopped.append(name))
    with pytest.raises(DfmError) as caught:
        attempts.launch(plan, wait=True, echo=lambda line: None, poll_seconds=0)
    assert caught.value.exit_code == 1 and stopped == [plan.job_name]
    # the line seen at 0 s, polls at 10, 20, ...: stopped at the first poll past the timeout
    assert caught.value.message == (
        f"job {plan.job_name} stalled: no metric line for 70 s in Training (stall_timeout 60 s); "
        "silent longest: algo-1, 70 s since its last line: [dfm] train step=1 loss=0.5 auc=0.5 "
        "examples_per_sec=1.0; dfm stopped it"
    )


def test_a_spot_job_waiting_for_capacity_is_not_stalled(sample_plan, moto_jobs, moto_logs, monkeypatch):
    """Interrupted, Starting and Downloading again take longer than stall_timeout; only Training counts."""
    plan = sample_plan({"stall_timeout": 100, "spot": {"max_wait": 7200}})
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    metric = "[dfm] train step={} loss=0.5 auc=0.5 examples_per_sec=1.0"
    moto_logs(plan.job_name, "algo-1", metric.format(1))
    phases = ["Training", "Interrupted", "Interrupted", "Starting", "Downloading", "Training", "Completed"]

    def next_phase(**_):  # each DescribeTrainingJob (one per poll) sees the job one phase further
        phase = phases.pop(0) if len(phases) > 1 else phases[0]
        moto_jobs.set_state(plan.job_name, "Completed" if phase == "Completed" else "InProgress", secondary=phase)
        if phase == "Training" and "Interrupted" not in phases:  # resumed from its checkpoint
            moto_logs(plan.job_name, "algo-1", metric.format(2))

    hook_sessions(monkeypatch, "before-call.sagemaker.DescribeTrainingJob", next_phase)
    ticks = itertools.count(0, 30)  # 30 s pass at each reading of the watch's clock (two per poll, one per line)
    monkeypatch.setattr(attempts, "StallWatch", lambda timeout: StallWatch(timeout, clock=lambda: next(ticks)))
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: pytest.fail(f"{name} was stopped"))
    echoed = []
    assert attempts.launch(plan, wait=True, echo=echoed.append, poll_seconds=0) == plan.job_name
    assert (
        "[dfm] stall watch: waiting while the job is Interrupted; only time in Training counts toward "
        "stall_timeout" in echoed
    )
    assert phases == ["Completed"]


def test_logs_follow_stops_a_stalled_job(moto_jobs, moto_logs, monkeypatch, capsys):
    from launcher.cli import main
    from launcher.sagemaker_backend import kinds, logs

    moto_jobs.create("job-s")
    moto_jobs.set_state("job-s", "InProgress", secondary="Training")
    moto_logs("job-s", "algo-1", "[dfm] train step=5 loss=0.5 auc=0.5 examples_per_sec=1.0")
    ticks = itertools.count(0, 20)  # 20 s pass at each reading of the watch's clock (two per poll, one per line)
    monkeypatch.setattr(logs, "StallWatch", lambda timeout: StallWatch(timeout, clock=lambda: next(ticks)))
    stopped = []  # moto has no StopTrainingJob: record the call the kind makes
    recording = dataclasses.replace(kinds.TRAINING, stop=lambda name, region: stopped.append(name))
    monkeypatch.setitem(kinds.KINDS, "training", recording)
    assert main(["logs", "job-s", "--follow", "--poll", "0", "--stall-timeout", "30", "--region", REGION]) == 1
    assert "job job-s stalled: no metric line for 60 s in Training" in capsys.readouterr().err
    assert stopped == ["job-s"]
    assert main(["logs", "job-s", "--stall-timeout", "30", "--region", REGION]) == 2
    assert "add --follow" in capsys.readouterr().err
