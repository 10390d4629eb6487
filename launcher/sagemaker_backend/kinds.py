"""The kinds of SageMaker job dfm runs, in one shape: describe, stop, list and logs per kind, so that `dfm status /
logs / stop / list` dispatch on the kind (`--kind`, or the kind SageMaker knows the name as), never on how a
name looks. Each kind's summary carries `job_name`, `kind`, `status` and `failure_reason`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from launcher.errors import DfmError
from launcher.sagemaker_backend import aws, training_jobs, logs, processing, transform_jobs, tuning_jobs


@dataclass(frozen=True)
class JobKind:
    name: str  # training | tuning | processing | transform
    describe: Callable[[str, str | None], dict]  # (job name, region) -> summary
    stop: Callable[[str, str | None], dict]
    list_jobs: Callable[..., list[dict]]  # (region, name_contains=, max_results=) -> summaries, newest first
    stream_logs: Callable[..., str]  # (job name, region, follow=, echo=, poll_seconds=, as_json=) -> final status


def _tuning_logs(name: str, region: str | None, **options) -> str:
    """A tuning job writes no log of its own: its best trial's (else the newest trial's)."""
    trial = tuning_jobs.trial_to_follow(tuning_jobs.describe(name, region))
    if trial is None:
        raise DfmError(f"{name} has no trial yet: try again once one started", 1)
    options["echo"](f"-- logs of trial {trial} (the best so far, else the newest)")
    return logs.stream_logs(trial, region, **options)


TRAINING = JobKind("training", training_jobs.describe, training_jobs.stop, training_jobs.list_jobs, logs.stream_logs)
TUNING = JobKind("tuning", tuning_jobs.describe, tuning_jobs.stop, tuning_jobs.list_jobs, _tuning_logs)
PROCESSING = JobKind("processing", processing.describe, processing.stop, processing.list_jobs, processing.stream_logs)
TRANSFORM = JobKind(
    "transform", transform_jobs.describe, transform_jobs.stop, transform_jobs.list_jobs, transform_jobs.stream_logs
)
KINDS: dict[str, JobKind] = {kind.name: kind for kind in (TRAINING, TUNING, PROCESSING, TRANSFORM)}


def kind_of(job_name: str, region: str | None, kind: str | None = None) -> JobKind:
    """The kind given (no call), else the kind SageMaker has a job of that name."""
    return KINDS[kind] if kind else find(job_name, region)[0]


def find(job_name: str, region: str | None, kind: str | None = None) -> tuple[JobKind, dict]:
    """(the job's kind, its summary): the kind given, else the first kind that has a job of that name."""
    region = aws.resolve_region(region)
    for candidate in [KINDS[kind]] if kind else KINDS.values():
        try:
            return candidate, candidate.describe(job_name, region)
        except aws.JobNotFound:
            continue
    names = list(KINDS)
    kinds = kind or f"{', '.join(names[:-1])} or {names[-1]}"
    raise DfmError(f"no {kinds} job named {job_name} in {region}: check the name, --kind and --region", 1)
