"""`dfm launch --wait` on a terminal: the job's phase from DescribeTrainingJob's SecondaryStatus, then its steps,
examples/s and loss from the metric and progress lines, on a bar; off a terminal the plain lines, no progress lines."""

from __future__ import annotations

import io

import boto3
from rich.console import Console

from conftest import BUCKET
from test_sagemaker_backend import hook_sessions
from launcher.sagemaker_backend import attempts, job_watch

PHASES = ["Starting", "Downloading", "Training", "Training", "Uploading", "Completed"]


def scripted_job(plan, moto_jobs, moto_logs, monkeypatch) -> list[str]:
    """Each DescribeTrainingJob (one per poll) sees the job one phase further; in Training it writes its lines."""
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    phases = list(PHASES)
    seen = []

    def next_phase(**_):
        phase = phases.pop(0) if len(phases) > 1 else phases[0]
        seen.append(phase)
        moto_jobs.set_state(plan.job_name, "Completed" if phase == "Completed" else "InProgress", secondary=phase)
        if phase == "Training" and seen.count("Training") == 1:
            moto_logs(plan.job_name, "algo-1", "[dfm] progress step=0", "[dfm] progress step=40")
        elif phase == "Training":
            moto_logs(plan.job_name, "algo-1", "[dfm] train step=100 loss=0.4321 auc=0.7 examples_per_sec=5000.0")

    hook_sessions(monkeypatch, "before-call.sagemaker.DescribeTrainingJob", next_phase)
    return seen


def test_launch_wait_on_a_terminal_shows_the_phase_then_the_progress(sample_plan, moto_jobs, moto_logs, monkeypatch):
    plan = sample_plan({"hyperparameters": {"max_steps": 100, "batch_size": 256}})
    scripted_job(plan, moto_jobs, moto_logs, monkeypatch)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    monkeypatch.setattr(job_watch, "terminal_console", lambda echo: console)
    assert attempts.launch(plan, wait=True, echo=lambda line: None, poll_seconds=0) == plan.job_name
    shown = out.getvalue()
    assert "[dfm] progress: 100 steps; max_steps 100" in shown
    places = [shown.index(phase) for phase in ("Starting", "Downloading", "Training", "Uploading")]
    assert places == sorted(places)
    assert "40/100" in shown and "10,240/25,600 examples" in shown  # from the progress line, before any train line
    assert "100/100" in shown and "5,000 examples/s" in shown and "loss 0.4321" in shown
    assert "[dfm] progress step" not in shown  # the bar's lines
    assert "[dfm] train step=100" in shown  # the log scrolls above the bar


def test_launch_wait_off_a_terminal_prints_no_bar_and_no_progress_lines(sample_plan, moto_jobs, moto_logs, monkeypatch):
    plan = sample_plan({"hyperparameters": {"max_steps": 100}})
    scripted_job(plan, moto_jobs, moto_logs, monkeypatch)
    echoed = []
    assert attempts.launch(plan, wait=True, echo=echoed.append, poll_seconds=0) == plan.job_name
    assert "[algo-1] [dfm] train step=100 loss=0.4321 auc=0.7 examples_per_sec=5000.0" in echoed
    assert not any("[dfm] progress" in line or "\x1b[" in line for line in echoed)
    phases = [line.split(":")[0] for line in echoed if line.startswith("-- ")]
    assert phases[:3] == ["-- Starting", "-- Downloading", "-- Training"]
