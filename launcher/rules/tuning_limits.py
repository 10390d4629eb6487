"""The tuning API's limits on a `tune:` section: how many ranges of each kind, the tuning job's name, its
runtime, warm-start parents, the static hyperparameters and environment a trial may carry.

The SDK's HyperparameterTuner checks none of these: the service refuses the job after the source dir was uploaded.
"""

from __future__ import annotations

from launcher.facts import conventions
from launcher.facts import service_model
from launcher.rules.findings import Finding, error, warning
from launcher.rules.request_rules import JOB_NAME
from launcher.spec import Spec
from launcher.plans.tuning_plan import (
    MAX_TUNING_BASE_NAME,
    MAX_TUNING_JOB_NAME,
    TUNER_HYPERPARAMETERS,
    tuning_base_name,
)

RANGE_SHAPES = {
    "continuous": "ContinuousParameterRanges",
    "integer": "IntegerParameterRanges",
    "categorical": "CategoricalParameterRanges",
}


def service_limit(shape: str, bound: str = "max") -> int | None:
    """The service model's bound on `shape`; None where the model is not at hand (nothing is checked)."""
    try:
        return service_model.limit(shape, bound)
    except service_model.ModelUnavailable:
        return None


def check_tune_limits(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None:
        return []
    problems = []
    for kind, shape in RANGE_SHAPES.items():
        count = sum(1 for rng in tune.ranges.values() if rng.type == kind)
        allowed = service_limit(shape)
        if allowed is not None and count > allowed:
            problems.append(
                error("tune.ranges", f"{count} {kind} ranges, SageMaker allows {allowed}: tune fewer hyperparameters")
            )
    base = tuning_base_name(spec)
    where = "tune.name" if tune.name else "name"
    if not JOB_NAME.fullmatch(base):
        problems.append(
            error(where, f"'{base}' is not a tuning job name: letters, digits and '-' only, not at either end")
        )
    elif len(base) > MAX_TUNING_BASE_NAME:
        problems.append(
            error(
                where,
                f"{len(base)} characters: tuning job names stop at {MAX_TUNING_JOB_NAME} and dfm appends "
                f"-YYMMDD-HHMMSS: give tune.name of at most {MAX_TUNING_BASE_NAME} characters",
            )
        )
    if tune.max_jobs is not None and tune.max_parallel_jobs > tune.max_jobs:
        problems.append(
            error(
                "tune.max_parallel_jobs",
                f"{tune.max_parallel_jobs} at once but only {tune.max_jobs} trials: use at most {tune.max_jobs}",
            )
        )
    if tune.max_runtime_s is not None:
        low, high = (
            service_limit("HyperParameterTuningMaxRuntimeInSeconds", "min"),
            service_limit("HyperParameterTuningMaxRuntimeInSeconds"),
        )
        if low is not None and tune.max_runtime_s < low:
            problems.append(
                error("tune.max_runtime_s", f"{tune.max_runtime_s} s is less than SageMaker's minimum {low} s")
            )
        elif high is not None and tune.max_runtime_s > high:
            problems.append(
                error("tune.max_runtime_s", f"{tune.max_runtime_s} s is more than SageMaker's maximum {high} s")
            )
        elif tune.max_runtime_s < spec.max_run:
            problems.append(
                warning(
                    "tune.max_runtime_s",
                    f"shorter than one trial's max_run ({spec.max_run} s): the tuning job may stop its first trials",
                )
            )
    if tune.warm_start is not None:
        allowed = service_limit("ParentHyperParameterTuningJobs")
        if allowed is not None and len(tune.warm_start.parents) > allowed:
            problems.append(
                error(
                    "tune.warm_start.parents",
                    f"{len(tune.warm_start.parents)} parents, SageMaker allows {allowed}: keep the best {allowed}",
                )
            )
        for parent in tune.warm_start.parents:
            if not JOB_NAME.fullmatch(parent) or len(parent) > MAX_TUNING_JOB_NAME:
                problems.append(
                    error(
                        "tune.warm_start.parents",
                        f"'{parent}' is not a tuning job name (at most {MAX_TUNING_JOB_NAME} letters, digits, '-')",
                    )
                )
    static = (
        len(spec.hyperparameters)
        + len(conventions.SDK_HYPERPARAMETERS)
        + len(conventions.SDK_DISTRIBUTION_HYPERPARAMETERS[spec.distribution_kind])
        + len(TUNER_HYPERPARAMETERS)
    )
    allowed = service_limit("HyperParameters")
    if allowed is not None and static > allowed:
        problems.append(
            error(
                "hyperparameters",
                f"{static} static hyperparameters per trial (the SDK and the tuner add some), SageMaker allows "
                f"{allowed}",
            )
        )
    return problems


def check_tune_environment(spec: Spec) -> list[Finding]:
    """The tuning job's training definition takes fewer environment variables than a training job."""
    most = service_limit("HyperParameterTrainingJobEnvironmentMap")
    if spec.tune is None or most is None or len(spec.environment) <= most:
        return []
    return [
        error(
            "environment",
            f"{len(spec.environment)} variables, but a tuning job's training definition takes at "
            f"most {most}: keep {most} or fewer for dfm tune",
        )
    ]


def check_tuning_job_name_override(job_name: str) -> list[Finding]:
    """For `dfm tune --job-name`: the full tuning job name, held to the tuning API's limits (not training's)."""
    if JOB_NAME.fullmatch(job_name) and len(job_name) <= MAX_TUNING_JOB_NAME:
        return []
    return [
        error(
            "--job-name",
            f"'{job_name}' is not a tuning job name: at most {MAX_TUNING_JOB_NAME} letters, digits "
            "and '-', not at either end",
        )
    ]
