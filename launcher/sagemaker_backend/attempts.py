"""`dfm launch --wait` on SageMaker: submit, follow the logs with the stall watchdog, and resubmit a job that
lost its capacity (`recover:`), each attempt resuming from the first one's checkpoints. What to resubmit and
when is `launcher.plans.recovery`'s decision; this module acts on it. Every attempt runs the source the first
one uploaded."""

from __future__ import annotations

import contextlib
import time
from typing import Callable

from launcher.plans import recovery
from launcher.errors import DfmError
from launcher.plans.training_plan import Plan
from launcher.sagemaker_backend import job_watch, training_jobs, training_request
from launcher.sagemaker_backend.logs import StallWatch, Stalled, stream_logs

Echo = Callable[[str], None]


def follow(plan: Plan, job_name: str, echo: Echo, poll_seconds: float) -> str:
    """Stream the job's logs to its end (on a terminal under a bar of its phase and progress); a stalled job is
    stopped and reported (exit 1)."""
    timeout = plan.operations.stall_timeout_s
    watch = StallWatch(timeout) if timeout else None
    console = job_watch.terminal_console(echo)
    bar = job_watch.JobWatch(plan, console) if console is not None else None
    try:
        with bar or contextlib.nullcontext():
            return stream_logs(
                job_name,
                plan.region,
                follow=True,
                echo=bar.echo if bar is not None else echo,
                poll_seconds=poll_seconds,
                stall=watch,
                watch=bar,
            )
    except Stalled as stalled:
        training_jobs.stop(job_name, plan.region)
        raise DfmError(stalled.stopped(job_name), 1) from None


def launch(
    plan: Plan,
    *,
    wait: bool,
    echo: Echo = print,
    warn: Echo = print,
    poll_seconds: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    first: training_request.TrainingRequest | None = None,
) -> str:
    """Build each attempt's request (refusing an invalid job before anything is uploaded) and submit exactly it;
    with `wait`, follow it to the end and recover it as `recover:` says. Returns the last attempt's job name;
    exit 1 (DfmError) when the last attempt failed or was stopped. `first`: the first attempt's request, already
    built from `plan` (the one the dry run printed), sent as it is."""
    if not wait:
        if plan.operations.recovery is not None or plan.operations.stall_timeout_s:
            warn(
                "recover: and stall_timeout act while dfm watches the job: use dfm launch --wait "
                "(or dfm logs JOB --follow --stall-timeout N)"
            )
        return training_jobs.submit(first or training_request.build(plan), echo=echo, warn=warn)
    options = plan.operations.recovery
    attempt, source_uri = 0, None
    while True:
        current = recovery.attempt_plan(plan, attempt, source_uri)
        built = first if attempt == 0 and first is not None else training_request.build(current)
        if attempt == 0 and built.upload is not None:  # every attempt runs the source this one uploads
            source_uri = built.upload.uri
        job_name = training_jobs.submit(built, echo=echo, warn=warn)
        status = follow(current, job_name, echo, poll_seconds)
        summary = (
            training_jobs.describe(job_name, plan.region)
            if status != "Completed"
            else {"job_name": job_name, "status": status}
        )
        why = recovery.recoverable(summary)
        restarts_left = (options.max_restarts - attempt) if options is not None else 0
        ending = f"{status}" + (f": {summary['failure_reason']}" if summary.get("failure_reason") else "")
        echo(f"[dfm] attempt {attempt + 1} ({job_name} on {current.instance_type}): {ending}")
        if status == "Completed" or why is None or restarts_left <= 0:
            if why is not None and options is None:
                warn(f"{job_name} lost its capacity ({why}); add recover: to the spec to resubmit it by itself")
            training_jobs.raise_for_outcome(summary)
            return job_name
        delay = recovery.backoff_seconds(options.backoff_s, attempt + 1)
        echo(
            f"[dfm] {why}: resubmitting in {delay:.0f} s as attempt {attempt + 2} of at most "
            f"{options.max_restarts + 1}, resuming from {plan.checkpoint_s3_uri or 'its checkpoints'}"
        )
        sleep(delay)
        attempt += 1
