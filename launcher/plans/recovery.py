"""Recovery of a job that lost its capacity: which endings are worth a resubmission, the plan of each attempt,
and the wait before it. Pure: the SageMaker backend and the local runner act on what this decides.

An attempt keeps the first attempt's checkpoint location (so the scripts resume from it), its uploaded source
and its TensorBoard prefix, and gets a name derived from the first (`<first>-r<N>`, the first cut so the whole fits
SageMaker's 63 characters) and the tag FIRST_ATTEMPT_TAG naming the first, by which `dfm status` of any attempt
finds the others.
"""

from __future__ import annotations

import dataclasses
import re

from launcher.facts import conventions
from launcher.plans import hosts
from launcher.plans.training_plan import Plan

FIRST_ATTEMPT_TAG = "dfm-first-attempt"  # on each resubmission: the first attempt's job name
_ATTEMPT_SUFFIX = re.compile(r"-r(\d+)$")
# FailureReason texts of capacity failures (SageMaker: "CapacityError: Unable to provision requested ML compute
# capacity", "InsufficientCapacityError: ..."): SageMaker does not retry them itself, even with RetryStrategy.
CAPACITY_MARKERS = ("InsufficientCapacityError", "CapacityError", "Unable to provision requested ML compute capacity")
SPOT_MAX_WAIT = "MaxWaitTimeExceeded"


def attempt_name(first: str, attempt: int) -> str:
    """`first` for attempt 0, else `<first>-r<attempt>`, cut so the whole stays within 63 characters."""
    if attempt == 0:
        return first
    return conventions.fit_job_name(first, f"-r{attempt}")


def attempt_number(job_name: str) -> int:
    found = _ATTEMPT_SUFFIX.search(job_name)
    return int(found.group(1)) if found else 0


def recoverable(summary: dict) -> str | None:
    """Why a finished training job (its status summary) is worth resubmitting, or None: capacity that could not
    be had, or a spot job whose max_wait ran out first. Failures of the job itself are not: they would fail again."""
    status = summary.get("status")
    reason = summary.get("failure_reason") or ""
    if status == "Failed" and any(marker in reason for marker in CAPACITY_MARKERS):
        return f"capacity: {reason}"
    if status == "Stopped" and summary.get("secondary_status") == SPOT_MAX_WAIT:
        return f"spot capacity: {SPOT_MAX_WAIT} (the spot job ran out of max_wait)"
    return None


def backoff_seconds(backoff_s: float, attempt: int) -> float:
    """Before attempt N (>= 1): backoff_s, doubled each time after."""
    return backoff_s * 2 ** (attempt - 1)


def attempt_plan(plan: Plan, attempt: int, source_uri: str | None = None) -> Plan:
    """The plan of attempt N: the first attempt's checkpoint location and TensorBoard prefix, a derived name tagged
    with the first's, and the worker group moved to the recovery list's type for that attempt (its last type once
    the list runs out). `source_uri`: the source tarball the first attempt uploaded, which the attempt runs as is
    (the local tree may have changed since)."""
    if attempt == 0:
        return plan
    name = attempt_name(plan.job_name, attempt)
    types = plan.operations.recovery.instance_types if plan.operations.recovery else ()
    groups = plan.instance_groups
    if types:
        moved = dataclasses.replace(groups[0], instance_type=types[min(attempt, len(types)) - 1])
        groups = (moved, *groups[1:])
    hyperparameters = dict(plan.hyperparameters)
    if hyperparameters.get("model_dir", "").startswith("s3://"):
        hyperparameters["model_dir"] = conventions.model_dir(plan.output_path, name, distribution="none", bundled=False)
    source = {"source_dir": source_uri, "source_files": {}} if source_uri else {}
    cost = hosts.costs(groups, plan.max_run, plan.warm_pool_seconds, spot=plan.spot_max_wait is not None)
    return dataclasses.replace(
        plan,
        job_name=name,
        instance_groups=groups,
        hyperparameters=hyperparameters,
        cost=cost,
        tags={**plan.tags, FIRST_ATTEMPT_TAG: plan.job_name},
        **source,
    )
