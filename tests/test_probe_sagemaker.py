"""`dfm probe` on SageMaker, AWS answered by moto: each probe submitted through the training submit path, at most
max_parallel at a time, followed, measured (metric lines, start-up, billable time, instance metrics over the training
phase once published, per role and per GPU), a failed probe reported while the others go on, no warm pool, and every
probe started stopped on any way out: Ctrl-C, SIGTERM, an AWS error (moto has no StopTrainingJob: the stop calls are
recorded; the AWS errors are answered by a botocore hook)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import boto3
import pytest
from conftest import BUCKET, REGION, _moto_training_job
from spec_helpers import BASE, merged

from launcher.compile import compile_spec
from launcher.plans.probe_plan import build_probe_plan
from launcher.plans.probe_results import ProbeInterrupted
from launcher.sagemaker_backend import training_jobs, probes
from launcher.spec import load_spec

NAME = "deepfm-test-probe-x"
SPEC = merged(
    BASE,
    {
        "data": {"train": f"s3://{BUCKET}/train/"},
        "output": f"s3://{BUCKET}/out/",
        "probe": {"max_steps": 50, "max_parallel": 1},
    },
)


@pytest.fixture
def probe_request(aws):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    spec = load_spec(SPEC)

    def compile_candidate(lines, job_name):
        compiled = compile_spec(SPEC, lines, job_name, env={})
        return compiled.plan, compiled.errors

    probe = build_probe_plan(spec, compile_candidate, tries=["instance.count=1,2"], name=NAME)
    return probes.dryrun(probe)


@pytest.fixture
def on_submit(monkeypatch):
    """on_submit(change): `change(job_name)` runs right after each probe is created in moto (which creates it
    Completed)."""
    submitted: list[str] = []
    hooks = []
    real = training_jobs.submit

    def submit(built, **kwargs):
        name = real(built, **kwargs)
        submitted.append(name)
        for hook in hooks:
            hook(name)
        return name

    monkeypatch.setattr(training_jobs, "submit", submit)
    return hooks, submitted


T0 = dt.datetime(2026, 11, 28, 10, 0, tzinfo=dt.timezone.utc)  # a probe's creation, on a minute


def lived(name: str, billable: int = 90, trained: int | None = None) -> None:
    """The job as SageMaker describes one that ended: created at T0, Starting, Downloading from T0+60 s,
    Training T0+120..T0+420 s, Uploading until T0+450 s."""
    job = _moto_training_job(name)
    at = [T0 + dt.timedelta(seconds=s) for s in (0, 60, 120, 420, 450)]
    job.creation_time, job.training_start_time, job.training_end_time = at[0], at[1], at[4]
    job.secondary_status_transitions = [
        {"Status": status, "StartTime": start, "EndTime": end}
        for status, start, end in zip(("Starting", "Downloading", "Training", "Uploading"), at, at[1:])
    ]
    job.billable_time_in_seconds = billable
    job.training_time_in_seconds = trained


class Clock:
    """`now` for execute; `sleep` moves it on."""

    def __init__(self, at: dt.datetime):
        self.at = at

    def __call__(self) -> dt.datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += dt.timedelta(seconds=seconds)


def put_cpu(job: str, host: str, minute: int, value: float, metric: str = "CPUUtilization") -> None:
    """One published minute (T0 + `minute` min) of a host's instance metric."""
    boto3.client("cloudwatch", region_name=REGION).put_metric_data(
        Namespace=probes.NAMESPACE,
        MetricData=[
            {
                "MetricName": metric,
                "Value": value,
                "Timestamp": T0 + dt.timedelta(minutes=minute, seconds=5),
                "Dimensions": [{"Name": "Host", "Value": f"{job}/{host}"}],
            }
        ],
    )


def only_first(probe_request):
    return dataclasses.replace(probe_request, trainings=probe_request.trainings[:1])


def test_probes_are_submitted_one_at_a_time_followed_and_measured(probe_request, on_submit, moto_logs):
    hooks, submitted = on_submit
    first, second = (built.job_name for _, built in probe_request.trainings)
    for step, speed in ((10, 5.0), (20, 900.0), (30, 1100.0), (40, 1000.0), (50, 950.0), (60, 1050.0)):
        moto_logs(first, "algo-1", f"[dfm] train step={step} loss=0.5 auc=0.6 examples_per_sec={speed}")
    put_cpu(first, "algo-1", 6, 200.0)  # the minute training ended in

    def running_until_polled(name):
        lived(name)
        if name == first:
            job = _moto_training_job(name)
            job.training_job_status, job.secondary_status = "InProgress", "Training"

    hooks.append(running_until_polled)
    sleeps: list[tuple[float, list]] = []

    def sleep(seconds):  # the first probe ends while dfm waits; only then may the second start
        sleeps.append((seconds, list(submitted)))
        job = _moto_training_job(first)
        job.training_job_status = job.secondary_status = "Completed"

    echoed: list[str] = []
    clock = Clock(T0 + dt.timedelta(minutes=15))  # long after: nothing more to wait for
    measured = probes.execute(
        probe_request, echo=echoed.append, warn=echoed.append, poll_seconds=7, sleep=sleep, now=clock
    )

    assert sleeps == [(7, [first])] and submitted == [first, second]
    one, two = measured
    assert one.status == "Completed" and one.examples_per_sec == 1000.0  # the median of 5 windows after warm-up
    assert (one.throughput.low, one.throughput.high, one.throughput.windows) == (900.0, 1100.0, 5)
    assert one.startup_s == 120 and one.billable_s == 90
    assert one.utilization == {"CPUUtilization": 50.0}  # 200 % summed over ml.c5.xlarge's 4 vCPUs
    assert one.hosts == {"algo-1": {"CPUUtilization": 50.0}}
    assert two.examples_per_sec is None and two.utilization == {}
    assert [line for line in echoed if line.startswith("[dfm probe]")] == [
        f"[dfm probe] candidate 1 ({first}): Training",
        f"[dfm probe] candidate 1 ({first}): Completed",
        f"[dfm probe] candidate 2 ({second}): Completed",
    ]


def test_a_failed_probe_shows_its_reason_and_the_rest_go_on(probe_request, on_submit, moto_jobs):
    hooks, submitted = on_submit
    first, second = (built.job_name for _, built in probe_request.trainings)
    hooks.append(lambda name: name == first and moto_jobs.set_state(name, "Failed", "CapacityError: no ml.c5.xlarge"))
    echoed: list[str] = []

    measured = probes.execute(probe_request, echo=echoed.append, warn=echoed.append, sleep=lambda s: None)

    assert submitted == [first, second] and [m.status for m in measured] == ["Failed", "Completed"]
    assert measured[0].reason == "CapacityError: no ml.c5.xlarge"
    assert "[dfm probe] candidate 1 Failed: CapacityError: no ml.c5.xlarge" in echoed


def test_ctrl_c_stops_every_probe_started(probe_request, on_submit, monkeypatch):
    hooks, submitted = on_submit
    hooks.append(lambda name: setattr(_moto_training_job(name), "training_job_status", "InProgress"))
    stopped: list[str] = []
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: stopped.append(name))
    two = dataclasses.replace(probe_request, probe=dataclasses.replace(probe_request.probe, max_parallel=2))

    def interrupt(seconds):
        raise KeyboardInterrupt

    with pytest.raises(ProbeInterrupted) as caught:
        probes.execute(two, echo=lambda line: None, sleep=interrupt)

    assert stopped == submitted == [built.job_name for _, built in probe_request.trainings]
    assert [(m.number, m.status, m.reason) for m in caught.value.measurements] == [
        (1, "Stopped", "stopped by dfm probe: Ctrl-C"),
        (2, "Stopped", "stopped by dfm probe: Ctrl-C"),
    ]
    assert caught.value.error is None


def test_metrics_it_may_not_read_are_a_warning_not_the_end(probe_request, on_submit, moto_logs, monkeypatch):
    from launcher.errors import DfmError

    hooks, _ = on_submit
    hooks.append(lived)
    job = probe_request.trainings[0][1].job_name
    for step in (10, 20, 30, 40, 50, 60):
        moto_logs(job, "algo-1", f"[dfm] train step={step} loss=0.5 auc=0.6 examples_per_sec=400.0")

    def refused(*args):
        raise DfmError("AccessDenied: cloudwatch:GetMetricData", 1)

    monkeypatch.setattr(probes, "instance_metrics", refused)
    warned: list[str] = []

    (measured,) = probes.execute(
        only_first(probe_request), echo=lambda line: None, warn=warned.append, sleep=lambda s: None
    )

    assert measured.examples_per_sec == 400.0 and measured.utilization == {}
    assert warned == ["AccessDenied: cloudwatch:GetMetricData"]


def test_utilization_is_the_training_phase_read_once_its_last_minute_is_published(probe_request, on_submit):
    hooks, _ = on_submit
    hooks.append(lived)
    job = probe_request.trainings[0][1].job_name
    put_cpu(job, "algo-1", 1, 400.0)  # downloading: not training
    for minute in (2, 3, 4, 5):
        put_cpu(job, "algo-1", minute, 200.0)
    clock = Clock(T0 + dt.timedelta(minutes=7, seconds=30))  # just after the end: minute 6 not published yet
    waited: list[float] = []

    def sleep(seconds):
        waited.append(seconds)
        put_cpu(job, "algo-1", 6, 360.0)  # CloudWatch publishes the last minute of training
        put_cpu(job, "algo-1", 7, 40.0)  # and the upload's
        clock.sleep(seconds)

    (measured,) = probes.execute(only_first(probe_request), echo=lambda line: None, sleep=sleep, now=clock)

    assert waited == [30.0]
    # (4 x 200 + 360) / 5 minutes of training, over ml.c5.xlarge's 4 vCPUs
    assert measured.utilization == {"CPUUtilization": 58.0} and measured.hosts == {"algo-1": {"CPUUtilization": 58.0}}


def test_metrics_never_published_to_the_end_are_averaged_after_the_wait_with_a_warning(probe_request, on_submit):
    hooks, _ = on_submit
    hooks.append(lived)
    job = probe_request.trainings[0][1].job_name
    for minute in (2, 3, 4, 5):
        put_cpu(job, "algo-1", minute, 200.0)
    clock = Clock(T0 + dt.timedelta(minutes=7, seconds=30))
    warned: list[str] = []

    (measured,) = probes.execute(
        only_first(probe_request), echo=lambda line: None, warn=warned.append, sleep=clock.sleep, now=clock
    )

    assert clock.at >= T0 + dt.timedelta(minutes=7) + probes.PUBLISH_WAIT  # waited for it, then no longer
    assert measured.utilization == {"CPUUtilization": 50.0}
    assert warned == [
        f"{job}: CloudWatch has not published every host's last minute of instance metrics 5 min after training "
        "ended: utilization is averaged over what it has"
    ]


def test_utilization_per_role_and_gpu_metrics_per_gpu(probe_request, on_submit):
    from launcher.plans import hosts

    hooks, _ = on_submit
    hooks.append(lived)  # training from minute 2 to minute 7
    built = probe_request.trainings[0][1]
    # two ml.g5.12xlarge workers (48 vCPUs, 4 GPUs each), one ml.c5.xlarge parameter server (4 vCPUs)
    groups = hosts.layout("ml.g5.12xlarge", 2, "ml.c5.xlarge", 1)
    built = dataclasses.replace(built, plan=dataclasses.replace(built.plan, instance_groups=groups))
    job = built.job_name
    for minute in (2, 3, 4, 5, 6):
        put_cpu(job, "algo-1", minute, 480.0)
        put_cpu(job, "algo-1", minute, 300.0, "GPUUtilization")  # summed over 4 GPUs: 75% each
        put_cpu(job, "algo-1", minute, 200.0, "GPUMemoryUtilization")
        put_cpu(job, "algo-2", minute, 960.0)
        put_cpu(job, "algo-2", minute, 340.0, "GPUUtilization")
        put_cpu(job, "algo-3", minute, 360.0)
    clock = Clock(T0 + dt.timedelta(minutes=15))
    request = dataclasses.replace(probe_request, trainings=((1, built),))

    (measured,) = probes.execute(request, echo=lambda line: None, sleep=clock.sleep, now=clock)

    assert measured.hosts["algo-1"] == {"CPUUtilization": 10.0, "GPUUtilization": 75.0, "GPUMemoryUtilization": 50.0}
    assert measured.utilization == {"CPUUtilization": 15.0, "GPUMemoryUtilization": 50.0, "GPUUtilization": 80.0}
    assert measured.ps_utilization == {"CPUUtilization": 90.0}


@pytest.fixture
def aws_answers(monkeypatch):
    """answers[operation] = error code: that SageMaker call is answered with the error (its request never sent)."""
    from launcher.sagemaker_backend import aws

    answers: dict[str, str] = {}
    real = aws.boto_session

    def answer(model, **kwargs):
        code = answers.get(model.name)
        if code is None:
            return None
        http = type("Response", (), {"status_code": 400, "headers": {}})()
        return http, {"Error": {"Code": code, "Message": f"{code} (test)"}, "ResponseMetadata": {}}

    def session(region):
        made = real(region)
        made.events.register("before-call.sagemaker", answer)
        return made

    monkeypatch.setattr(aws, "boto_session", session)
    return answers


def test_an_aws_error_stops_every_started_probe_and_keeps_what_was_measured(
    probe_request, on_submit, monkeypatch, aws_answers
):
    hooks, submitted = on_submit
    first, second = submitted_names = [built.job_name for _, built in probe_request.trainings]
    hooks.append(
        lambda name: (
            lived(name) if name == first else setattr(_moto_training_job(name), "training_job_status", "InProgress")
        )
    )
    stopped: list[str] = []
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: stopped.append(name))
    two = dataclasses.replace(probe_request, probe=dataclasses.replace(probe_request.probe, max_parallel=2))
    clock = Clock(T0 + dt.timedelta(minutes=30))

    def credentials_expire(seconds):
        aws_answers["DescribeTrainingJob"] = "ExpiredTokenException"

    with pytest.raises(ProbeInterrupted) as caught:
        probes.execute(two, echo=lambda line: None, warn=lambda line: None, sleep=credentials_expire, now=clock)

    assert submitted == submitted_names and stopped == [second]
    one, two_ = caught.value.measurements
    assert (one.number, one.status, one.startup_s) == (1, "Completed", 120)
    assert (two_.number, two_.status) == (2, "Stopped") and "refused the credentials" in two_.reason
    assert "ExpiredTokenException" in caught.value.error.message


def test_ctrl_c_right_after_create_training_job_returns_still_stops_that_job(probe_request, on_submit, monkeypatch):
    hooks, submitted = on_submit

    def interrupted(name):
        raise KeyboardInterrupt  # CreateTrainingJob has returned; dfm has not yet noted the job

    hooks.append(interrupted)
    stopped: list[str] = []
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: stopped.append(name))

    with pytest.raises(ProbeInterrupted) as caught:
        probes.execute(probe_request, echo=lambda line: None, sleep=lambda s: None)

    first = probe_request.trainings[0][1].job_name
    assert submitted == stopped == [first]
    assert [(m.number, m.status) for m in caught.value.measurements] == [(1, "Stopped")]


def test_a_retried_create_answered_resource_in_use_is_followed_as_our_job(probe_request, on_submit):
    from botocore.exceptions import ClientError

    from launcher.sagemaker_backend import aws

    hooks, submitted = on_submit
    first, second = (built.job_name for _, built in probe_request.trainings)

    def retry_answered_in_use(name):
        if name == second:  # this one is older: a job of that name existed before this probe
            _moto_training_job(name).creation_time = T0 - dt.timedelta(days=2)
        error = {"Error": {"Code": "ResourceInUse", "Message": "Training job names must be unique"}}
        with aws.aws_errors("creating the training job", region=REGION):
            raise ClientError(error, "CreateTrainingJob")

    hooks.append(retry_answered_in_use)
    echoed: list[str] = []

    one, two = probes.execute(probe_request, echo=echoed.append, warn=echoed.append, sleep=lambda s: None)

    assert submitted == [first, second]
    assert (one.status, one.reason) == ("Completed", None)
    assert f"[dfm probe] {first}: created by the first of CreateTrainingJob's attempts; following it" in echoed
    assert two.status == "Failed" and "ResourceInUse" in two.reason


def test_probes_keep_no_warm_pool_whatever_the_spec_says(aws):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    spec = merged(SPEC, {"warm_pool_seconds": 1800})
    assert compile_spec(spec, (), "deepfm-test", env={}).plan.warm_pool_seconds == 1800

    def compile_candidate(lines, job_name):
        compiled = compile_spec(spec, lines, job_name, env={})
        return compiled.plan, compiled.errors

    probe = build_probe_plan(load_spec(spec), compile_candidate, tries=["warm_pool_seconds=600,900"], name=NAME)
    requests = probes.dryrun(probe).document()["requests"]

    assert [r["request"]["ResourceConfig"].get("KeepAlivePeriodInSeconds") for r in requests] == [None, None]


def test_dfm_probe_ends_on_an_aws_error_with_its_report_exit_1_and_no_probe_left(
    aws, tmp_path, capsys, monkeypatch, aws_answers
):
    from spec_helpers import run, write_spec

    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    path = write_spec(tmp_path, merged(SPEC, {"local": {"run_dir": str(tmp_path / "runs")}}))
    stopped: list[str] = []
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: stopped.append(name))
    aws_answers["DescribeTrainingJob"] = "ThrottlingException"

    code, out, err = run(capsys, "probe", path, "--try", "instance.count=1,2", "--name", NAME)

    assert code == 1 and stopped == [f"{NAME}-1"]  # max_parallel 1: the second was never submitted
    assert "AWS throttled describing" in err and "every probe started was stopped" in err
    assert "stopped by dfm probe: AWS throttled" in out
    assert (tmp_path / "runs" / NAME / "probe.json").is_file()


def test_sigterm_stops_every_probe_started_like_ctrl_c(probe_request, on_submit, monkeypatch):
    import signal

    hooks, submitted = on_submit
    hooks.append(lambda name: setattr(_moto_training_job(name), "training_job_status", "InProgress"))
    stopped: list[str] = []
    monkeypatch.setattr(training_jobs, "stop", lambda name, region: stopped.append(name))
    before = signal.getsignal(signal.SIGTERM)

    with pytest.raises(ProbeInterrupted) as caught:
        probes.execute(probe_request, echo=lambda line: None, sleep=lambda s: signal.raise_signal(signal.SIGTERM))

    assert stopped == submitted == [probe_request.trainings[0][1].job_name]
    assert caught.value.error.message == "terminated by SIGTERM" and caught.value.error.exit_code == 1
    assert [(m.status, m.reason) for m in caught.value.measurements] == [
        ("Stopped", "stopped by dfm probe: terminated by SIGTERM")
    ]
    assert signal.getsignal(signal.SIGTERM) == before
