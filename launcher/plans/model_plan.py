"""What serving a trained model on SageMaker is: the model (its artifact, the inference image's TensorFlow version,
the role), and a batch transform job (`dfm transform`) or an endpoint (`dfm deploy`) over it, each checked against
botocore's service model (instance type enums, names, serverless memory) and priced. Pure: the model's source is
resolved (a training job described) by the SageMaker backend before a plan is built."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping

from launcher.facts import catalog, service_model
from launcher.plans.training_plan import job_timestamp

CONTENT_TYPES = ("text/csv", "application/json", "application/jsonlines")
STRATEGIES = ("SingleRecord", "MultiRecord")
SPLIT_TYPE = "Line"  # one record a line: CSV rows or JSON lines
ACCEPT = "application/json"  # what TensorFlow Serving answers
MAX_PAYLOAD_MB = 100  # SageMaker's documented ceiling on MaxPayloadInMB
SERVERLESS_STEP_MB = 1024
DEFAULT_MAX_CONCURRENCY = 5  # the SDK's ServerlessInferenceConfig default
# The instance's memory against the model's: TensorFlow Serving holds the variables (an embedding table compresses
# little, so the model.tar.gz's size is close to theirs), and while a version loads its restore reads them beside
# the copy being filled: dfm asks for twice the artifact, and a GiB for the server processes.
LOAD_FACTOR = 2
SERVER_OVERHEAD_GIB = 1.0
PRICE_NOTE = "estimate: on-demand us-east-1 training list price of the type (hosting prices differ a little)"


class PlanError(ValueError):
    """A value SageMaker would refuse, or that cannot work: the message names the option and its fix."""


@dataclass(frozen=True)
class ModelSource:
    """The model SageMaker serves: its model.tar.gz, the TensorFlow version of its inference image, the role."""

    model_data: str  # s3://.../model.tar.gz
    framework_version: str  # the inference image's full TensorFlow version (facts.inference_images)
    role: str
    region: str
    training_job: str | None = None  # the job whose artifact it is, when given by job name
    size_bytes: int | None = None  # the artifact's size, where known


@dataclass(frozen=True)
class TransformPlan:
    job_name: str  # the transform job's, and its model's, name
    model: ModelSource
    data: str
    output_path: str
    instance_type: str
    instance_count: int
    content_type: str
    strategy: str
    max_payload: int
    max_hours: float
    split_type: str = SPLIT_TYPE
    accept: str = ACCEPT
    cost: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeployPlan:
    endpoint_name: str  # the endpoint's, its config's and its model's name
    model: ModelSource
    instance_type: str | None  # None: serverless
    instance_count: int
    serverless_memory: int | None  # MB
    max_concurrency: int
    cost: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def default_name(base: str, now: float | None = None) -> str:
    """`<base>-<YYMMDD-HHMMSS>`, cut to SageMaker's 63 characters, every character the names allow."""
    cleaned = "".join(c if c.isalnum() else "-" for c in base).strip("-") or "dfm-model"
    suffix = "-" + job_timestamp(now)
    return cleaned[: 63 - len(suffix)].rstrip("-") + suffix


def _name(value: str, shape: str, option: str) -> str:
    problems = service_model.value_problems(shape, value)
    if problems:
        raise PlanError(f"{option} {value!r}: {problems[0]} (letters, digits and '-', at most 63)")
    return value


def _instance_type(value: str, shape: str, what: str) -> str:
    allowed = service_model.enum(shape)
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise PlanError(f"--instance-type {value!r} is not an instance type SageMaker offers for {what}{hint}")
    return value


def _s3(value: str, option: str) -> str:
    if not value.startswith("s3://") or len(value) <= len("s3://"):
        raise PlanError(f"{option} {value!r}: give an s3:// location (or use --local for files here)")
    return value


def _count(value: int, option: str) -> int:
    if value < 1:
        raise PlanError(f"{option} {value}: at least 1")
    return value


def memory_needed_gib(size_bytes: int) -> float:
    return LOAD_FACTOR * size_bytes / 2**30 + SERVER_OVERHEAD_GIB


def _memory_problem(size_bytes: int | None, memory_gib: float | None, where: str, fix: str) -> str | None:
    if size_bytes is None or memory_gib is None:
        return None
    needed = memory_needed_gib(size_bytes)
    if needed <= memory_gib:
        return None
    return (
        f"the model ({size_bytes / 2**30:.2f} GiB artifact) needs about {needed:.1f} GiB to load, {where} has "
        f"{memory_gib:g} GiB: {fix}"
    )


def _hourly(instance_type: str) -> float | None:
    known = catalog.instance(instance_type)
    return known.usd_per_hour if known is not None else None


def build_transform_plan(
    model: ModelSource,
    *,
    data: str,
    output_path: str,
    instance_type: str,
    instance_count: int = 1,
    content_type: str = "text/csv",
    strategy: str = "SingleRecord",
    max_payload: int = 6,
    max_hours: float = 24.0,
    job_name: str | None = None,
    now: float | None = None,
) -> TransformPlan:
    """A batch transform job over `model`; PlanError for anything SageMaker would refuse."""
    name = _name(job_name or default_name(model.training_job or "dfm-transform", now), "TransformJobName", "--job-name")
    _instance_type(instance_type, "TransformInstanceType", "batch transform")
    _count(instance_count, "--instance-count")
    if content_type not in CONTENT_TYPES:
        raise PlanError(f"--content-type {content_type!r}: one of {', '.join(CONTENT_TYPES)} (split by line)")
    if strategy not in STRATEGIES:
        raise PlanError(f"--strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if not 1 <= max_payload <= MAX_PAYLOAD_MB:
        raise PlanError(f"--max-payload {max_payload}: from 1 to {MAX_PAYLOAD_MB} MB")
    if max_hours <= 0:
        raise PlanError(f"--max-hours {max_hours:g}: more than 0")
    warnings = []
    hourly = _hourly(instance_type)
    problem = _memory_problem(
        model.size_bytes,
        getattr(catalog.instance(instance_type), "memory_gib", None),
        instance_type,
        "choose a type with more memory",
    )
    if problem:
        raise PlanError(problem)
    if hourly is None:
        warnings.append(f"dfm knows no price of {instance_type}: no cost ceiling")
    cost = {
        "instance_hourly_usd": hourly,
        "instances": instance_count,
        "max_hours": max_hours,
        "max_usd": round(hourly * instance_count * max_hours, 2) if hourly is not None else None,
        "note": f"ceiling if it runs --max-hours (a transform job has no time limit: dfm stop ends it); {PRICE_NOTE}",
    }
    return TransformPlan(
        name,
        model,
        _s3(data, "--data"),
        _s3(output_path, "--output-path"),
        instance_type,
        instance_count,
        content_type,
        strategy,
        max_payload,
        max_hours,
        cost=cost,
        warnings=tuple(warnings),
    )


def build_deploy_plan(
    model: ModelSource,
    *,
    instance_type: str | None = None,
    instance_count: int = 1,
    serverless_memory: int | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    endpoint_name: str | None = None,
    now: float | None = None,
) -> DeployPlan:
    """An endpoint serving `model` on instances or serverless; PlanError for anything SageMaker would refuse."""
    name = _name(
        endpoint_name or default_name(model.training_job or "dfm-endpoint", now), "EndpointName", "--endpoint-name"
    )
    if (instance_type is None) == (serverless_memory is None):
        raise PlanError("give --instance-type (instances) or --serverless-memory (serverless), one of them")
    warnings: list[str] = []
    if serverless_memory is not None:
        low, high = (service_model.limit("ServerlessMemorySizeInMB", b) for b in ("min", "max"))
        if not low <= serverless_memory <= high or serverless_memory % SERVERLESS_STEP_MB:
            sizes = ", ".join(map(str, range(low, high + 1, SERVERLESS_STEP_MB)))
            raise PlanError(f"--serverless-memory {serverless_memory}: one of {sizes} MB")
        low, high = (service_model.limit("ServerlessMaxConcurrency", b) for b in ("min", "max"))
        if not low <= max_concurrency <= high:
            raise PlanError(f"--max-concurrency {max_concurrency}: from {low} to {high}")
        problem = _memory_problem(
            model.size_bytes, serverless_memory / 1024, "--serverless-memory", "give more, or deploy on an instance"
        )
        if problem:
            raise PlanError(problem)
        cost = {"usd_per_hour": None, "note": "serverless: billed per millisecond of inference and per GB of memory"}
        return DeployPlan(name, model, None, 1, serverless_memory, max_concurrency, cost, tuple(warnings))
    assert instance_type is not None
    _instance_type(instance_type, "ProductionVariantInstanceType", "endpoints")
    _count(instance_count, "--instance-count")
    known = catalog.instance(instance_type)
    problem = _memory_problem(
        model.size_bytes, known.memory_gib if known else None, instance_type, "choose a type with more memory"
    )
    if problem:
        raise PlanError(problem)
    if known is None:
        warnings.append(f"dfm does not know {instance_type}'s memory or price: no memory check, no cost")
    elif model.size_bytes is None:
        warnings.append("the artifact's size is unknown here: the instance's memory is not checked against it")
    hourly = known.usd_per_hour if known is not None else None
    cost = {
        "instance_hourly_usd": hourly,
        "instances": instance_count,
        "usd_per_hour": round(hourly * instance_count, 3) if hourly is not None else None,
        "note": f"an endpoint bills every hour it is up, until dfm undeploy; {PRICE_NOTE}",
    }
    return DeployPlan(name, model, instance_type, instance_count, None, max_concurrency, cost, tuple(warnings))
