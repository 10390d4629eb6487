"""A warm start's source on SageMaker: a job name resolved with DescribeTrainingJob (its checkpoint prefix when it
had one, else its model artifact), and, before a job is paid for, the S3 source listed to see it holds a checkpoint
or the model artifact. A dry run resolves a job name (one DescribeTrainingJob call) but never lists S3."""

from __future__ import annotations

import dataclasses

from launcher.errors import DfmError
from launcher.plans import warm_start as warm
from launcher.plans.training_plan import Plan, with_warm_start
from launcher.sagemaker_backend import aws

CHECKPOINT_INDEX = "checkpoint"  # tf.train.CheckpointManager's index file, beside ckpt-N.index


def source_of_job(description: dict) -> tuple[str, str]:
    """(kind, uri) of a DescribeTrainingJob answer: the checkpoint prefix it synced, else its model.tar.gz."""
    checkpoint = (description.get("CheckpointConfig") or {}).get("S3Uri")
    if checkpoint:
        return warm.CHECKPOINT, warm.checkpoint_prefix(checkpoint)
    model = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if model:
        return warm.MODEL, model
    name = description.get("TrainingJobName", "the job")
    raise DfmError(
        f"warm_start.from: {name} has neither a checkpoint prefix nor a model artifact "
        f"({description.get('TrainingJobStatus', 'no status')}): name a job that checkpointed or finished",
        1,
    )


def resolve(plan: Plan, sagemaker_client=None) -> Plan:
    """`plan` with its warm start resolved (a job name through DescribeTrainingJob); unchanged when it is."""
    start = plan.warm_start
    if start is None or start.resolved:
        return plan
    if not warm.is_job_name(start.source):
        raise DfmError(
            f"warm_start.from: {start.source} is neither a training job name nor an s3:// URI "
            "(a local folder is for dfm launch --local)",
            2,
        )
    client = sagemaker_client or aws.client("sagemaker", plan.region)
    with aws.aws_errors("reading the warm-start job", job_name=start.source, region=plan.region):
        description = client.describe_training_job(TrainingJobName=start.source)
    kind, uri = source_of_job(description)
    if plan.checkpoint_s3_uri and plan.checkpoint_s3_uri.rstrip("/") == uri.rstrip("/"):
        raise DfmError(
            f"warm_start.from: {start.source}'s checkpoints ({uri}) are also this job's checkpoints prefix: SageMaker "
            "would restore them and then overwrite them; give checkpoints its own prefix (auto)",
            2,
        )
    resolved = with_warm_start(plan, kind, uri)
    stalled = nothing_left_to_train(plan, description.get("HyperParameters") or {})
    return dataclasses.replace(resolved, warnings=(*resolved.warnings, stalled)) if stalled else resolved


def nothing_left_to_train(plan: Plan, source: dict) -> str | None:
    """`steps: continue` from a job that trained as far as this one would: the step counter is at its end already."""
    if not plan.bundled or plan.warm_start.steps != "continue":
        return None

    def value(hyperparameters, name: str) -> float:
        try:
            return float(str(hyperparameters.get(name, 0)).strip('"'))
        except ValueError:
            return 0.0

    grown = [name for name in ("max_steps", "epochs") if value(plan.hyperparameters, name) > value(source, name)]
    if grown:
        return None
    return (
        f"warm_start.steps: continue, and neither max_steps nor epochs is above {plan.warm_start.source}'s: the step "
        "counter starts where that job ended, so nothing may be left to train"
    )


def source_problem(plan: Plan, s3) -> str | None:
    """Why the resolved source cannot warm-start the job (nothing there, or no checkpoint), or None."""
    start = plan.warm_start
    if start is None or not start.resolved:
        return None
    bucket, _, key = start.uri[len("s3://") :].partition("/")
    named = "" if start.uri.rstrip("/") == start.source.rstrip("/") else f" ({start.source})"
    if start.kind == warm.MODEL:
        with aws.aws_errors(f"listing {start.uri}", region=plan.region):
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        if not any(item["Key"] == key for item in listed.get("Contents", [])):
            return f"warm_start.from: no model artifact at {start.uri}{named}: name a finished job or its model.tar.gz"
        return None
    with aws.aws_errors(f"listing {start.uri}", region=plan.region):
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
        names = [item["Key"][len(key) :] for page in pages for item in page.get("Contents", [])]
    if not any(n.rsplit("/", 1)[-1] == CHECKPOINT_INDEX or n.endswith(".index") for n in names):
        what = "is empty" if not names else f"holds {len(names)} object(s) but no checkpoint or *.index"
        return f"warm_start.from: {start.uri}{named} {what}: point it at a prefix holding a TF checkpoint"
    return None
