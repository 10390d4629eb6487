"""Commands about submitted jobs of every kind (training, tuning, processing, transform): status, logs, stop, list.

Each command dispatches on the job's kind through the backend interface (`backends.find_job`, the SageMaker
backend's `jobs`): given with --kind, or the kind SageMaker knows the name as. The backend is imported inside each
command: `dfm --help` stays free of boto3, and none of these commands needs the SageMaker SDK at all (plain boto3
clients).
"""

from __future__ import annotations

import json

import click

from launcher.cli.options import OUTPUT, REGION
from launcher.errors import DfmError


KINDS = ("training", "tuning", "processing", "transform")
KIND = click.option(
    "--kind",
    type=click.Choice(KINDS),
    default=None,
    help="The job's kind (default: whichever kind SageMaker has a job of that name).",
)


def _backends():
    from launcher import backends

    return backends


def _echo_json(value) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def _instances_text(summary: dict) -> str:
    groups = summary.get("instance_groups") or [
        {"group": None, "instance_type": summary.get("instance_type"), "instance_count": summary.get("instance_count")}
    ]
    text = " + ".join(
        f"{g['instance_count']} x {g['instance_type']}" + (f" ({g['group']})" if g["group"] else "") for g in groups
    )
    return text + (" (spot)" if summary.get("spot") else "")


def _training_status_text(summary: dict) -> str:
    status = summary["status"]
    if summary.get("secondary_status") and summary["secondary_status"] != status:
        status += f" ({summary['secondary_status']})"
    rows = [
        ("job", summary["job_name"]),
        ("status", status),
        ("message", summary.get("status_message")),
        ("attempts", ", ".join(summary["attempts"]) if summary.get("attempts") else None),
        ("failure", summary.get("failure_reason")),
        ("instances", _instances_text(summary)),
        ("created", summary.get("created")),
        ("started", summary.get("started")),
        ("ended", summary.get("ended")),
        ("billable", f"{summary['billable_seconds']} s" if summary.get("billable_seconds") is not None else None),
        ("model", summary.get("model_artifacts")),
        ("console", summary.get("console_url")),
    ]
    return "\n".join(f"{label:<10} {value}" for label, value in rows if value)


def _tuning_status_text(summary: dict) -> str:
    from launcher.cli import tune_report

    return tune_report.render_sagemaker(summary)


def _processing_status_text(summary: dict) -> str:
    rows = [
        ("job", summary["job_name"]),
        ("status", summary["status"]),
        ("failure", summary.get("failure_reason")),
        ("instances", f"{summary['instance_count']} x {summary['instance_type']}"),
        ("image", summary.get("image")),
        ("created", summary.get("created")),
        ("ended", summary.get("ended")),
        *((f"output {name}", uri) for name, uri in summary.get("outputs", {}).items()),
        ("console", summary.get("console_url")),
    ]
    return "\n".join(f"{label:<10} {value}" for label, value in rows if value)


def _transform_status_text(summary: dict) -> str:
    rows = [
        ("job", summary["job_name"]),
        ("status", summary["status"]),
        ("failure", summary.get("failure_reason")),
        ("model", summary.get("model_name")),
        ("instances", f"{summary['instance_count']} x {summary['instance_type']}"),
        ("input", summary.get("input")),
        ("output", summary.get("output")),
        ("created", summary.get("created")),
        ("ended", summary.get("ended")),
        ("console", summary.get("console_url")),
    ]
    return "\n".join(f"{label:<10} {value}" for label, value in rows if value)


STATUS_TEXT = {
    "training": _training_status_text,
    "tuning": _tuning_status_text,
    "processing": _processing_status_text,
    "transform": _transform_status_text,
}


@click.command()
@click.argument("job_name", metavar="[JOB]", required=False)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A tuning job: draw the objective of its trials into this PNG (as `dfm tune --local` does).",
)
@KIND
@REGION
@OUTPUT
def status(job_name: str | None, kind: str | None, region: str | None, output: str, plot_path: str | None) -> None:
    """Show a job's state (a tuning job's: trials, the best and its `dfm launch` line). Exits 1 when it failed or was
    stopped.

    Without JOB: the recent jobs, as `dfm list` shows them."""
    from launcher.sagemaker_backend.training_jobs import raise_for_outcome

    if job_name is None:
        if plot_path:
            raise DfmError("--plot draws one tuning job's trials: name the job")
        _list_jobs(None, 20, (kind,) if kind else (), region, output)
        return

    found, summary = _backends().find_job(job_name, region, kind)
    if plot_path and found.name != "tuning":
        raise DfmError(f"--plot draws a tuning job's trials; {job_name} is a {found.name} job")
    if found.name == "tuning":
        from pathlib import Path

        from launcher.cli import tune_report

        report = tune_report.sagemaker_document(summary)
        if plot_path:
            tune_report.write_plot(report, Path(plot_path), lambda line: click.echo(line, err=True))
        summary = {**summary, "launch": report["launch"], "plot": report["plot"]}
    click.echo(json.dumps(summary, indent=2, default=str) if output == "json" else STATUS_TEXT[found.name](summary))
    raise_for_outcome(summary)


@click.command()
@click.argument("job_name", metavar="JOB")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the job ends (exit 1 if it fails).")
@click.option(
    "--poll",
    "poll_seconds",
    type=click.FloatRange(min=0.0),
    default=10.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
@click.option(
    "--stall-timeout",
    type=click.IntRange(min=1),
    default=None,
    help="With --follow: stop the job and exit 1 when no metric line comes for this many seconds.",
)
@KIND
@REGION
@OUTPUT
def logs(
    job_name: str,
    follow: bool,
    poll_seconds: float,
    stall_timeout: int | None,
    kind: str | None,
    region: str | None,
    output: str,
) -> None:
    """Print a job's CloudWatch log lines, from every instance, in time order (a tuning job: its best trial's).

    With --output json: one JSON object per line (timestamp in ms, host, message).
    """
    from launcher.errors import DfmError
    from launcher.sagemaker_backend.training_jobs import raise_for_outcome
    from launcher.sagemaker_backend.logs import StallWatch, Stalled

    if stall_timeout is not None and not follow:
        raise DfmError("--stall-timeout watches a job while it runs: add --follow")
    found = _backends().job_kind(job_name, region, kind)
    watch = {"stall": StallWatch(stall_timeout)} if stall_timeout else {}
    try:
        final = found.stream_logs(
            job_name,
            region,
            follow=follow,
            echo=click.echo,
            poll_seconds=poll_seconds,
            as_json=output == "json",
            **watch,
        )
    except Stalled as stalled:
        found.stop(job_name, region)
        raise DfmError(stalled.stopped(job_name), 1) from None
    if follow and final in ("Failed", "Stopped"):
        raise_for_outcome(found.describe(job_name, region))


@click.command()
@click.argument("job_name", metavar="JOB")
@KIND
@REGION
@OUTPUT
def stop(job_name: str, kind: str | None, region: str | None, output: str) -> None:
    """Ask SageMaker to stop a running job (a tuning job's running trials stop too)."""
    found = _backends().job_kind(job_name, region, kind)
    result = found.stop(job_name, region)
    if output == "json":
        _echo_json(result)
    else:
        click.echo(f"stopping {found.name} job {result['job_name']}\n{result['console_url']}")


@click.command(name="list")
@click.option("--name-contains", default=None, metavar="TEXT", help="Only jobs whose name contains TEXT.")
@click.option(
    "--max",
    "max_results",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    help="At most this many jobs, newest first.",
)
@click.option(
    "--kind", type=click.Choice(KINDS), multiple=True, help="Only jobs of this kind (repeatable; default: every kind)."
)
@REGION
@OUTPUT
def list_(name_contains: str | None, max_results: int, kind: tuple[str, ...], region: str | None, output: str) -> None:
    """List recent jobs of every kind, newest first."""
    _list_jobs(name_contains, max_results, kind, region, output)


def _list_jobs(
    name_contains: str | None, max_results: int, kind: tuple[str, ...], region: str | None, output: str
) -> None:
    backends = _backends()
    jobs = [
        job
        for name in (kind or KINDS)
        for job in backends.backend_for(name, "sagemaker").jobs.list_jobs(
            region, name_contains=name_contains, max_results=max_results
        )
    ]
    jobs = sorted(jobs, key=lambda job: str(job.get("created") or ""), reverse=True)[:max_results]
    if output == "json":
        _echo_json(jobs)
        return
    if not jobs:
        click.echo("no jobs" + (f" whose name contains {name_contains!r}" if name_contains else ""))
        return
    width = max(len(job["job_name"]) for job in jobs)
    click.echo(f"{'JOB':<{width}}  {'KIND':<10}  {'STATUS':<10}  {'CREATED':<25}  ENDED")
    for job in jobs:
        click.echo(
            f"{job['job_name']:<{width}}  {job['kind']:<10}  {job['status']:<10}  {str(job['created'] or '-'):<25}  "
            f"{job['ended'] or '-'}"
        )


COMMANDS: list = [status, logs, stop, list_]
