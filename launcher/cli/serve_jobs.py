"""`dfm transform JOB_OR_MODEL` (a batch transform job, or `--local` files scored through the local server),
`dfm deploy JOB_OR_MODEL` (an endpoint) and `dfm undeploy NAME`: a trained model served on SageMaker. Through
`backends` (kinds transform and endpoint): plan -> request -> the dry run prints it -> submit sends exactly it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from launcher.cli.options import OUTPUT, REGION
from launcher.errors import DfmError

MODEL_OPTIONS = (
    click.option(
        "--spec",
        "spec_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="Take the role and region from this spec (--role and --region win).",
    ),
    click.option(
        "--role", default=None, help="The model's execution role ARN (default: the spec's, else the training job's)."
    ),
    click.option(
        "--framework-version",
        default=None,
        help="TensorFlow version of the inference image (default: the training job's image's; for an s3:// model "
        "the newest the SDK knows).",
    ),
)
DRY_RUN = click.option("--dry-run", is_flag=True, help="Print the requests; send nothing.")
YES = click.option("--yes", "-y", is_flag=True, help="Submit without asking (dfm asks only on a terminal).")


def _with(options):
    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def _plan(build, *args, **kwargs):
    from launcher.plans.model_plan import PlanError

    try:
        return build(*args, **kwargs)
    except PlanError as err:
        raise DfmError(str(err), 2) from None


def _model(
    model: str,
    spec_path: str | None,
    region: str | None,
    role: str | None,
    framework_version: str | None,
    offline: bool,
):
    from launcher.backends import resolve_model

    if spec_path is not None:
        from launcher.spec import load_spec

        spec = load_spec(spec_path)
        role, region = role or spec.role, region or spec.region
    return resolve_model(model, region=region, role=role, framework_version=framework_version, offline=offline)


def text(document: dict[str, Any]) -> str:
    """A SageMaker transform job's or endpoint's dry run as text: its cost, then each request."""
    model = document["model"]
    lines = [
        f"{document['kind']} {document['name']} in {document['region']}",
        f"model      {model['model_data']}"
        + (f" (training job {model['training_job']})" if model["training_job"] else ""),
        f"image      TensorFlow {model['framework_version']} inference",
        *cost_lines(document),
        *(f"warning: {w}" for w in document["warnings"]),
    ]
    for call in document["requests"]:
        lines += ["", f"{call['operation']}:", json.dumps(call["request"], indent=2)]
    return "\n".join(lines)


def cost_lines(document: dict[str, Any]) -> list[str]:
    cost = document["cost"]
    if cost.get("max_usd") is not None:
        return [
            f"cost       at most ${cost['max_usd']:,.2f} ({cost['instances']} x ${cost['instance_hourly_usd']}/h x "
            f"{cost['max_hours']:g} h; {cost['note']})"
        ]
    if cost.get("usd_per_hour") is not None:
        return [f"cost       ${cost['usd_per_hour']:,.3f} per hour ({cost['note']})"]
    return [f"cost       {cost.get('note', 'unknown')}"]


def _send(kind: str, plan, output: str, dry_run: bool, yes: bool, **execute) -> None:
    from launcher.backends import backend_for
    from launcher.cli.spec import on_terminal

    backend = backend_for(kind, "sagemaker")
    request = backend.dryrun(plan)
    document = backend.document(request)
    if dry_run:
        click.echo(json.dumps(document, indent=2) if output == "json" else text(document))
        return
    echo = click.echo if output == "text" else (lambda line: click.echo(line, err=True))
    if not yes and output == "text" and on_terminal():
        click.echo("\n".join([f"{kind} {document['name']}", *cost_lines(document)]))
        if not click.confirm("Submit?", default=False):
            raise DfmError("not submitted", 1)
    name = backend.execute(request, echo=echo, **execute)
    if output == "json":
        click.echo(json.dumps({"name": name, "kind": kind, "region": request.region}))


@click.command()
@click.argument("model", metavar="JOB_OR_MODEL")
@click.option("--data", required=True, help="s3:// prefix or object to score (--local: a file or folder).")
@click.option(
    "--output-path", default=None, help="s3:// where the `<file>.out` go (--local: a folder; default beside)."
)
@click.option("--instance-type", default=None, help="e.g. ml.c5.xlarge (SageMaker).")
@click.option("--instance-count", type=int, default=1, show_default=True)
@click.option(
    "--content-type",
    default="text/csv",
    show_default=True,
    help="text/csv, application/json or application/jsonlines; split by line.",
)
@click.option(
    "--strategy", default="SingleRecord", show_default=True, help="SingleRecord (a line a request) or MultiRecord."
)
@click.option("--max-payload", type=int, default=6, show_default=True, help="MB per request.")
@click.option("--max-hours", type=float, default=24.0, show_default=True, help="The cost ceiling's bound.")
@click.option("--job-name", default=None, help="The transform job's (and its model's) name.")
@click.option("--local", is_flag=True, help="Score local files through the local server (MODEL: a local model).")
@_with(MODEL_OPTIONS)
@DRY_RUN
@YES
@REGION
@OUTPUT
def transform(
    model: str,
    data: str,
    output_path: str | None,
    instance_type: str | None,
    instance_count: int,
    content_type: str,
    strategy: str,
    max_payload: int,
    max_hours: float,
    job_name: str | None,
    local: bool,
    spec_path: str | None,
    role: str | None,
    framework_version: str | None,
    dry_run: bool,
    yes: bool,
    region: str | None,
    output: str,
) -> None:
    """Score --data with JOB_OR_MODEL (a training job's name or an s3:// model.tar.gz) in a batch transform job:
    each input file's lines scored, its `<file>.out` written under --output-path."""
    from launcher.plans import model_plan

    if local:
        _local_transform(model, data, output_path, content_type, strategy, max_payload, dry_run, output)
        return
    if instance_type is None or output_path is None:
        raise DfmError("a transform job needs --instance-type and --output-path (or --local to score files here)")
    source = _model(model, spec_path, region, role, framework_version, offline=dry_run)
    plan = _plan(
        model_plan.build_transform_plan,
        source,
        data=data,
        output_path=output_path,
        instance_type=instance_type,
        instance_count=instance_count,
        content_type=content_type,
        strategy=strategy,
        max_payload=max_payload,
        max_hours=max_hours,
        job_name=job_name,
    )
    _send("transform", plan, output, dry_run, yes)


def _local_transform(model, data, output_path, content_type, strategy, max_payload, dry_run, output) -> None:
    from launcher.backends import backend_for
    from launcher.plans.model_plan import CONTENT_TYPES, STRATEGIES
    from launcher.serving.transform import LocalTransformPlan

    if content_type not in CONTENT_TYPES or strategy not in STRATEGIES:
        raise DfmError(f"--content-type: one of {', '.join(CONTENT_TYPES)}; --strategy: one of {', '.join(STRATEGIES)}")
    backend = backend_for("transform", "local")
    plan = LocalTransformPlan(
        Path(model), Path(data), Path(output_path) if output_path else None, content_type, strategy, max_payload
    )
    request = backend.dryrun(plan)
    try:
        if dry_run:
            click.echo(json.dumps(backend.document(request), indent=2))
            return
        echo = click.echo if output == "text" else (lambda line: click.echo(line, err=True))
        written = backend.execute(request, echo=echo)
        if output == "json":
            click.echo(json.dumps(written, indent=2))
    finally:
        request.close()


@click.command()
@click.argument("model", metavar="JOB_OR_MODEL")
@click.option("--instance-type", default=None, help="e.g. ml.m5.large.")
@click.option("--instance-count", type=int, default=1, show_default=True)
@click.option("--serverless-memory", type=int, default=None, help="Serverless instead: 1024-6144 MB in 1024 steps.")
@click.option("--max-concurrency", type=int, default=5, show_default=True, help="Serverless: concurrent invocations.")
@click.option("--endpoint-name", default=None, help="The endpoint's (and its config's and model's) name.")
@click.option("--wait", is_flag=True, help="After submitting, wait until the endpoint is InService (exit 1 if not).")
@_with(MODEL_OPTIONS)
@DRY_RUN
@YES
@REGION
@OUTPUT
def deploy(
    model: str,
    instance_type: str | None,
    instance_count: int,
    serverless_memory: int | None,
    max_concurrency: int,
    endpoint_name: str | None,
    wait: bool,
    spec_path: str | None,
    role: str | None,
    framework_version: str | None,
    dry_run: bool,
    yes: bool,
    region: str | None,
    output: str,
) -> None:
    """Serve JOB_OR_MODEL (a training job's name or an s3:// model.tar.gz) on a SageMaker endpoint, on instances or
    serverless. It bills until `dfm undeploy`."""
    from launcher.plans import model_plan

    source = _model(model, spec_path, region, role, framework_version, offline=dry_run)
    plan = _plan(
        model_plan.build_deploy_plan,
        source,
        instance_type=instance_type,
        instance_count=instance_count,
        serverless_memory=serverless_memory,
        max_concurrency=max_concurrency,
        endpoint_name=endpoint_name,
    )
    _send("endpoint", plan, output, dry_run, yes, wait=wait)


@click.command()
@click.argument("name", metavar="ENDPOINT")
@REGION
@OUTPUT
def undeploy(name: str, region: str | None, output: str) -> None:
    """Delete ENDPOINT, and its endpoint config and model when dfm deploy made them."""
    from launcher.backends import undeploy as delete_endpoint

    echo = click.echo if output == "text" else (lambda line: click.echo(line, err=True))
    deleted = delete_endpoint(name, region, echo)
    if output == "json":
        click.echo(json.dumps({"deleted": deleted}))


COMMANDS = (transform, deploy, undeploy)
