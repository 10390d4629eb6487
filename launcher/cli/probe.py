"""`dfm probe SPEC`: short, capped copies of the spec over candidate setups (`--try KEY=V1,V2` or the spec's
`probe:` variants), each compiled through the rules, run on SageMaker (or --local) and measured; the report ranks
them by cost per epoch and recommends the `--set` lines to use. Probe jobs are training jobs tagged dfm:kind=probe:
`dfm status / logs / stop / list` follow them by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from launcher.cli.compile_errors import echo_findings
from launcher.cli.options import OUTPUT, SET
from launcher.errors import DfmError


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


def rows_from_stats(spec) -> int | None:
    """Training rows from what `dfm data prepare` wrote beside the local train channel: prepare.json's train rows,
    else stats.json's rows."""
    train = spec.local.channels.get("train")
    if not train:
        return None
    folder = Path(os.path.expanduser(train)).parent / "prepare"
    for name, read in (
        ("prepare.json", lambda d: d.get("train", {}).get("rows")),
        ("stats.json", lambda d: d.get("rows")),
    ):
        try:
            rows = read(json.loads((folder / name).read_text()))
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(rows, int) and rows > 0:
            return rows
    return None


def plan_probe(
    spec_path: str,
    overrides: tuple[str, ...],
    tries: tuple[str, ...],
    *,
    rows: int | None,
    name: str | None,
    local: bool,
    probe_overrides: tuple[str, ...] = (),
    local_lines: tuple[str, ...] = (),
):
    """The probe plan: the spec read with the --set lines (and `probe_overrides`, which change the probe: section
    only, and `local_lines`, the --channel options' local.channels lines, which are part of no recommendation),
    every candidate compiled through the rules."""
    from launcher.compile import compile_spec
    from launcher.plans.probe_plan import build_probe_plan
    from launcher.spec import SpecError, load_spec

    try:
        spec = load_spec(spec_path, (*local_lines, *overrides, *probe_overrides))
    except SpecError as err:
        echo_findings(err.lines())
        raise SystemExit(2) from None

    def compile_candidate(lines, job_name):
        compiled = compile_spec(spec_path, (*local_lines, *lines), job_name)
        return compiled.plan, compiled.errors

    try:
        return build_probe_plan(
            spec,
            compile_candidate,
            tries=tries,
            base_settings=overrides,
            name=name,
            rows=rows,
            stats_rows=(stats, f"the statistics beside the local train channel {spec.local.channels['train']}")
            if (stats := rows_from_stats(spec))
            else None,
            local=local,
        )
    except ValueError as err:
        raise DfmError(str(err)) from None


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--try",
    "tries",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Candidate values of a spec field (repeatable: every combination is a candidate), "
    "e.g. --try instance.count=1,2 --try instance.type=ml.c5.9xlarge,ml.c7i.8xlarge.",
)
@click.option("--dry-run", is_flag=True, help="Print every probe's request and the cost ceiling; no network call.")
@click.option("--local", "local", is_flag=True, help="Run the candidates on this machine, one after the other.")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Training steps per probe [default: probe.max_steps, 300].",
)
@click.option(
    "--rows",
    type=click.IntRange(min=1),
    default=None,
    help="Training rows of one full epoch (default: the stats.json dfm data prepare wrote).",
)
@click.option(
    "--deadline",
    "deadline_h",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="HOURS",
    help="Recommend the cheapest candidate whose full job ends within this many hours.",
)
@click.option(
    "--budget",
    "budget_usd",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="USD",
    help="Recommend the fastest candidate whose full job costs at most this.",
)
@click.option(
    "--name",
    "name",
    default=None,
    help="The probe's name (its jobs are NAME-1, NAME-2, ...) [default: spec name + -probe- + time].",
)
@click.option(
    "--poll",
    "poll_seconds",
    type=click.FloatRange(min=0.0),
    default=30.0,
    show_default=True,
    help="Seconds between polls of the probe jobs.",
)
@click.option(
    "--channel",
    "channels",
    multiple=True,
    metavar="NAME=PATH",
    help="--local: read channel NAME from PATH (as dfm launch --local does); not part of the recommendation.",
)
@SET
@OUTPUT
def probe(
    spec_path: str,
    tries: tuple[str, ...],
    dry_run: bool,
    local: bool,
    max_steps: int | None,
    rows: int | None,
    deadline_h: float | None,
    budget_usd: float | None,
    name: str | None,
    poll_seconds: float,
    channels: tuple[str, ...],
    overrides: tuple[str, ...],
    output: str,
) -> None:
    """Measure candidate setups for a few minutes each and say which one to pay for."""
    from launcher.cli.spec import local_overrides

    if deadline_h is not None and budget_usd is not None:
        raise DfmError("give --deadline (cheapest within it) or --budget (fastest within it), not both")
    if channels and not local:
        raise DfmError("--channel applies to --local probes (on SageMaker the spec's data: channels are read)")
    probe_overrides = (f"probe.max_steps={max_steps}",) if max_steps is not None else ()
    probe_plan = plan_probe(
        spec_path,
        overrides,
        tries,
        rows=rows,
        name=name,
        local=local,
        probe_overrides=probe_overrides,
        local_lines=tuple(local_overrides(channels, None, None)),
    )
    if not probe_plan.runnable:
        from launcher.cli.probe_report import refused_lines

        for line in refused_lines(
            [
                {"candidate": c.number, "settings": list(c.settings), "errors": list(c.errors)}
                for c in probe_plan.refused
            ]
        ):
            _echo_err(line)
        raise DfmError("every candidate was refused: nothing to probe")
    if dry_run:
        _dry_run(probe_plan, local, output)
        return
    _run(probe_plan, local, output, deadline_h, budget_usd, poll_seconds)


def _dry_run(probe_plan, local: bool, output: str) -> None:
    from launcher.backends import backend_named
    from launcher.cli import probe_report
    from launcher.cli.spec import show_dry_run

    backend = backend_named("probe", local)
    render = probe_report.render_local_dry_run if local else probe_report.render_dry_run
    show_dry_run(backend.document(backend.dryrun(probe_plan)), render, output, False)


def _run(probe_plan, local: bool, output: str, deadline_h, budget_usd, poll_seconds: float) -> None:
    from launcher.backends import backend_named
    from launcher.cli import probe_report
    from launcher.plans.probe_results import ProbeInterrupted

    echo = click.echo if output == "text" else _echo_err
    interrupted, error = False, None
    backend = backend_named("probe", local)
    try:
        measurements = backend.execute(
            backend.dryrun(probe_plan),
            echo=echo,
            warn=lambda line: _echo_err(f"warning: {line}"),
            poll_seconds=poll_seconds,
        )
    except ProbeInterrupted as stopped:
        measurements, interrupted, error = stopped.measurements, True, stopped.error
    folder = Path(probe_plan.runnable[0].plan.local.run_dir) / probe_plan.name
    document = probe_report.report_document(
        probe_plan, measurements, local=local, deadline_h=deadline_h, budget_usd=budget_usd, folder=folder
    )
    try:
        drawn = probe_report.plot(document, folder / probe_report.PLOT_FILE)
        document["plot"] = str(drawn) if drawn else None
    except ImportError:
        echo("[dfm probe] no plot: matplotlib is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / probe_report.REPORT_FILE).write_text(json.dumps(document, indent=1, default=str))
    click.echo(
        json.dumps(document, indent=2, default=str) if output == "json" else probe_report.render_report(document)
    )
    if error is not None:
        raise DfmError(f"{error.message} (every probe started was stopped; the report is in {folder})", error.exit_code)
    if interrupted:
        echo("[dfm probe] interrupted: every probe started was stopped")
        raise SystemExit(130)
    if not any(e["examples_per_sec"] for e in document["candidates"]):
        raise DfmError(f"no probe of {probe_plan.name} measured a throughput; its report is in {folder}", 1)


COMMANDS: list = [probe]
