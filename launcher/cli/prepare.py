"""`dfm data prepare SPEC`: the spec's `prepare:` section as a Spark job (SageMaker Processing, or --local).

A CLI module beside the others (the command joins the `dfm data` group in launcher/cli/__init__.py). pyspark loads only
with --local, the SageMaker SDK only for --dry-run and a submit.
"""

from __future__ import annotations


import click

from launcher.cli.compile_errors import echo_findings, refuse
from launcher.cli.options import OUTPUT, SET
from launcher.errors import DfmError


def _compiled_spec(spec_path: str, overrides: tuple[str, ...]):
    from launcher.compile import compile_spec

    compiled = compile_spec(spec_path, overrides)
    if compiled.errors:
        refuse(compiled.errors, compiled.warnings)
    echo_findings(warnings=compiled.warnings)
    if compiled.spec.prepare is None:
        raise DfmError(f"{compiled.spec.where('')}: no prepare: section; add one (see docs/data.md)", 2)
    return compiled.spec


@click.command("prepare")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@SET
@click.option("--local", is_flag=True, help="Run on local Spark (local[*]): prepare.input.local -> local.channels.")
@click.option("--dry-run", is_flag=True, help="Print the CreateProcessingJob request; send nothing.")
@click.option(
    "--stats-only",
    is_flag=True,
    help="Only the statistics: stats.json and a proposed features.yaml (--local; on SageMaker with --wait).",
)
@click.option("--wait/--no-wait", default=False, show_default=True, help="After submitting, follow the job's logs.")
@click.option("--job-name", default=None, help="Processing job name (default: <name>-prep-<timestamp>).")
@click.option(
    "--force",
    is_flag=True,
    help="--local: replace prepared data already in the channel folders (the new "
    "data is written beside them and swapped in when complete; not for SageMaker's S3 outputs).",
)
@click.option(
    "--features-from",
    "stats_file",
    default=None,
    metavar="STATS_JSON",
    help="Only print the features: section proposed from a job's stats.json (a path or s3:// URI).",
)
@OUTPUT
def prepare(
    spec_path: str,
    overrides: tuple[str, ...],
    local: bool,
    dry_run: bool,
    stats_only: bool,
    wait: bool,
    job_name: str | None,
    force: bool,
    stats_file: str | None,
    output: str,
) -> None:
    """Shuffle, split, balance and shard click logs into this job's training data, with statistics."""
    spec = _compiled_spec(spec_path, overrides)
    if stats_file is not None:
        click.echo(_proposal(spec, stats_file), nl=False)
        return
    if force and not local:
        raise DfmError(
            "--force replaces local folders only (--local): a SageMaker job's outputs are uploaded into "
            "data.train/data.eval as they are, over what is there, with no swap; prepare into new, empty "
            "S3 prefixes instead (set data.train and data.eval)",
            2,
        )
    from launcher.backends import backend_named
    from launcher.plans.prepare_plan import build_prepare_plan

    plan = build_prepare_plan(spec, job_name, stats_only=stats_only)
    backend = backend_named("processing", local)
    request = backend.dryrun(plan)
    if local and dry_run:
        from launcher.cli.spec import show_dry_run
        from launcher.cli.render import render_local_prepare_dry_run

        show_dry_run(backend.document(request), render_local_prepare_dry_run, output, show_secrets=False)
        return
    if local:
        from launcher.data.prepare_local import dump, summary

        report = _prepare_locally(backend, request, force, output)
        click.echo(dump(report) if output == "json" else summary(report))
        return
    if dry_run:
        from launcher.cli.spec import show_dry_run
        from launcher.cli.render import render_processing_dry_run

        show_dry_run(backend.document(request), render_processing_dry_run, output, show_secrets=False)
        return
    backend.execute(request, wait=wait, echo=click.echo)
    if wait and plan.stats:  # the job has ended well: propose features: from its stats.json
        from launcher.sagemaker_backend import processing

        report = plan.report_uri.rstrip("/")
        proposal = _proposal(spec, f"{report}/stats.json")
        processing.write_object(f"{report}/features.yaml", proposal.encode(), spec.region)
        click.echo(f"proposed (also in {report}/features.yaml):\n{proposal}", nl=False)


def _proposal(spec, stats_file: str) -> str:
    """The features: section proposed from a stats.json (a local path or an s3:// URI)."""
    import json
    from pathlib import Path

    from launcher.data.prepare_stats import proposal_yaml

    if stats_file.startswith("s3://"):
        from launcher.sagemaker_backend import processing

        text = processing.read_object(stats_file, spec.region).decode()
    elif Path(stats_file).is_file():
        text = Path(stats_file).read_text(encoding="utf-8")
    else:
        raise DfmError(f"{stats_file}: not found (--features-from takes a stats.json path or s3:// URI)", 2)
    try:
        stats = json.loads(text)
        return proposal_yaml(stats, spec)
    except (ValueError, KeyError, TypeError) as err:
        raise DfmError(f"{stats_file}: not a stats.json of dfm data prepare ({err})", 2) from None


def _prepare_locally(backend, request, force: bool, output: str) -> dict:
    """The local preparation; on a terminal with text output its stages on a status line (watching.Stages)."""
    from launcher.watching import Stages, on_terminal

    if output != "text" or not on_terminal():
        return backend.execute(request, force=force)
    with Stages() as shown:
        return backend.execute(request, force=force, stages=shown.stage)
