"""Rules about what the CreateTrainingJob request may hold: job names, channel and hyperparameter counts,
the service model's enums, lengths and patterns, and instance types."""

from __future__ import annotations

import re

from launcher.facts import catalog
from launcher.facts import conventions
from launcher.rules import request_limits
from launcher.facts import service_model
from launcher.plans.training_plan import job_timestamp
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec

TIMESTAMP_SUFFIX = len("-" + job_timestamp(0))  # what build_plan appends to the spec's name: -YYMMDD-HHMMSS
MAX_JOB_NAME = conventions.MAX_JOB_NAME
MAX_BASE_NAME = MAX_JOB_NAME - TIMESTAMP_SUFFIX  # 49
JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")


def check_job_name(spec: Spec) -> list[Finding]:
    problems = []
    if not JOB_NAME.fullmatch(spec.name):
        problems.append(
            error(
                "name",
                f"'{spec.name}' is not a SageMaker job name: use letters, digits and '-' only, not at either end",
            )
        )
    if len(spec.name) > MAX_BASE_NAME:
        problems.append(
            error(
                "name",
                f"{len(spec.name)} characters, at most {MAX_BASE_NAME}: dfm appends -YYMMDD-HHMMSS and job "
                f"names stop at {MAX_JOB_NAME}",
            )
        )
    return problems


def check_job_name_override(job_name: str) -> list[Finding]:
    """For `--job-name`: the full name, timestamp included."""
    if JOB_NAME.fullmatch(job_name) and len(job_name) <= MAX_JOB_NAME:
        return []
    return [
        error(
            "--job-name",
            f"'{job_name}' is not a SageMaker job name: at most {MAX_JOB_NAME} letters, digits and '-', not at either "
            "end",
        )
    ]


def check_channels(spec: Spec) -> list[Finding]:
    problems = []
    names = [channel.name for channel in conventions.channel_sources(spec)]
    if len(names) > conventions.MAX_CHANNELS:
        problems.append(
            error(
                "data",
                f"{len(names)} channels, SageMaker allows {conventions.MAX_CHANNELS}: use fewer training paths or "
                "channels",
            )
        )
    reserved = {conventions.TRAIN_CHANNEL, conventions.EVAL_CHANNEL, conventions.CHECKPOINT_CHANNEL}
    for name in spec.data.channels:
        if name in reserved or conventions.NUMBERED_TRAIN_CHANNEL.fullmatch(name):
            problems.append(
                error(f"data.channels.{name}", f"'{name}' is a channel dfm names itself: pick another name")
            )
    return problems


def check_hyperparameter_limits(spec: Spec) -> list[Finding]:
    """The count, SDK additions included; each name's and value's length is a request limit (check_request_limits)."""
    added = len(conventions.SDK_HYPERPARAMETERS) + len(
        conventions.SDK_DISTRIBUTION_HYPERPARAMETERS[spec.distribution_kind]
    )
    try:
        allowed = service_model.limit("HyperParameters", "max")
    except service_model.ModelUnavailable:
        return []
    if allowed is None or len(spec.hyperparameters) + added <= allowed:
        return []
    return [
        error(
            "hyperparameters",
            f"{len(spec.hyperparameters)} given and the SDK adds {added}; SageMaker allows {allowed} in all",
        )
    ]


def check_request_limits(spec: Spec) -> list[Finding]:
    """Enums, maximum lengths and values, patterns: what the service model says CreateTrainingJob refuses."""
    try:
        return [error(field, message) for field, message in request_limits.problems(spec)]
    except service_model.ModelUnavailable as err:
        return [warning("", f"{err}; SageMaker's limits on the request are not checked")]


def check_instance_known(spec: Spec) -> list[Finding]:
    """A type the API lacks is a request-limit error; one it has but the catalogue lacks, a warning."""
    info = catalog.instance(spec.instance.type)
    if info is not None and info.accelerators:
        return [
            warning(
                "instance.type",
                f"{spec.instance.type} trains on {info.accelerators}, which SageMaker's TensorFlow images do not use: "
                "pick a CPU or GPU type",
            )
        ]
    if info is not None:
        return []
    try:
        if spec.instance.type not in service_model.enum("TrainingInstanceType"):
            return []
    except service_model.ModelUnavailable:
        pass
    return [
        warning(
            "instance.type", f"{spec.instance.type} is not in dfm's catalogue: no cost estimate, no GPU/vCPU checks"
        )
    ]
