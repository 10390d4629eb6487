"""`dfm data prepare SPEC`: the spec's `prepare:` section as a Spark job (SageMaker Processing, or --local).

pyspark loads only with --local, the SageMaker SDK only for --dry-run and a submit.
"""

from __future__ import annotations


import click

from launcher.errors import DfmError


def _compiled_spec(spec_path: str, overrides: tuple[str, ...]):
    from launcher.compile import compile_spec

    compiled = compile_spec(spec_path, overrides)
    if compiled.errors:
        for line in compiled.errors:
            click.echo(line, err=True)
        raise DfmError(f"{spec_path}: {len(compiled.errors)} error(s); nothing prepared", 2)
    for line in compiled.warnings:
        click.echo(f"warning: {line}", err=True)
    if compiled.spec.prepare is None:
        raise DfmError(f"{compiled.spec.where('')}: no prepare: section; add one (see docs/data.md)", 2)
    return compiled.spec


@click.command("prepare")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a spec value (repeatable).")
@click.option("--local", is_flag=True, help="Run on local Spark (local[*]): prepare.input.local -> local.channels.")
@click.option("--dry-run", is_flag=True, help="Print the CreateProcessingJob request; send nothing.")
@click.option("--stats-only", is_flag=True, help="Only the statistics (stats.json and a proposed features.yaml).")
@click.option("--wait/--no-wait", default=False, show_default=True, help="After submitting, follow the job's logs.")
@click.option("--job-name", default=None, help="Processing job name (default: <name>-prep-<timestamp>).")
@click.option("--force", is_flag=True, help="--local: replace prepared data already in the channel folders.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def prepare(spec_path: str, overrides: tuple[str, ...], local: bool, dry_run: bool, stats_only: bool, wait: bool,
            job_name: str | None, force: bool, output: str) -> None:
    """Shuffle, split, balance and shard click logs into this job's training data, with statistics."""
    spec = _compiled_spec(spec_path, overrides)
    if local:
        from launcher.data import prepare_local

        report = prepare_local.run(spec, stats_only=stats_only, force=force)
        click.echo(prepare_local.dump(report) if output == "json" else prepare_local.summary(report))
        return
    from launcher.sagemaker_backend import processing

    name = job_name or processing.job_name(spec)
    if dry_run:
        from launcher.cli_spec import show_dry_run
        from launcher.render import render_processing_dry_run

        show_dry_run(processing.dry_run(spec, name, stats_only), render_processing_dry_run, output, show_secrets=False)
        return
    processing.submit(spec, name, wait=wait, echo=click.echo, stats_only=stats_only)
