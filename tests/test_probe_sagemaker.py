"""`dfm probe` on SageMaker, AWS answered by moto: each probe submitted through the training submit path, at most
max_parallel at a time, followed, measured (metric lines, start-up, billable time, instance metrics), a failed probe
reported while the others go on, and every running probe stopped on Ctrl-C (moto has no StopTrainingJob: the stop
calls are recorded)."""

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


def lived(name: str, billable: int = 90) -> None:
    job = _moto_training_job(name)
    start = job.creation_time
    job.secondary_status_transitions = [
        {"Status": "Starting", "StartTime": start, "EndTime": start + dt.timedelta(seconds=70)},
        {
            "Status": "Downloading",
            "StartTime": start + dt.timedelta(seconds=70),
            "EndTime": start + dt.timedelta(seconds=100),
        },
        {"Status": "Training", "StartTime": start + dt.timedelta(seconds=100)},
    ]
    job.billable_time_in_seconds = billable


def test_probes_are_submitted_one_at_a_time_followed_and_measured(probe_request, on_submit, moto_logs):
    hooks, submitted = on_submit
    first, second = (built.job_name for _, built in probe_request.trainings)
    for step, speed in ((10, 5.0), (20, 900.0), (30, 1100.0), (40, 1000.0), (50, 950.0), (60, 1050.0)):
        moto_logs(first, "algo-1", f"[dfm] train step={step} loss=0.5 auc=0.6 examples_per_sec={speed}")
    now = dt.datetime.now(dt.timezone.utc)
    boto3.client("cloudwatch", region_name=REGION).put_metric_data(
        Namespace=probes.NAMESPACE,
        MetricData=[
            {
                "MetricName": "CPUUtilization",
                "Value": 200.0,
                "Timestamp": now,
                "Dimensions": [{"Name": "Host", "Value": f"{first}/algo-1"}],
            }
        ],
    )

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
    measured = probes.execute(probe_request, echo=echoed.append, warn=echoed.append, poll_seconds=7, sleep=sleep)

    assert sleeps == [(7, [first])] and submitted == [first, second]
    one, two = measured
    assert one.status == "Completed" and one.examples_per_sec == 1000.0  # the median of 5 windows after warm-up
    assert (one.throughput.low, one.throughput.high, one.throughput.windows) == (900.0, 1100.0, 5)
    assert one.startup_s == 100 and one.billable_s == 90
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
    assert caught.value.measurements == []


def test_metrics_it_may_not_read_are_a_warning_not_the_end(probe_request, moto_jobs, moto_logs, monkeypatch):
    from launcher.errors import DfmError

    built = probe_request.trainings[0][1]
    moto_jobs.create(built.job_name)
    for step in (10, 20, 30, 40, 50, 60):
        moto_logs(built.job_name, "algo-1", f"[dfm] train step={step} loss=0.5 auc=0.6 examples_per_sec=400.0")

    def refused(*args):
        raise DfmError("AccessDenied: cloudwatch:GetMetricData", 1)

    monkeypatch.setattr(probes, "instance_metrics", refused)
    warned: list[str] = []
    description = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=built.job_name)

    measured = probes.measure(1, built, description, warn=warned.append)

    assert measured.examples_per_sec == 400.0 and measured.utilization == {}
    assert warned == ["AccessDenied: cloudwatch:GetMetricData"]
