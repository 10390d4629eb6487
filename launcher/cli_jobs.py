"""Commands about submitted jobs: status, logs, stop, list.

The backend is imported inside each command: `dfm --help` stays free of boto3, and none of these
commands needs the SageMaker SDK at all (plain boto3 clients).
"""

from __future__ import annotations

import json

import click

from launcher.cli_options import OUTPUT, REGION


def _backend():
    from launcher import sagemaker_backend

    return sagemaker_backend


def _echo_json(value) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def _instances_text(summary: dict) -> str:
    groups = summary.get("instance_groups") or [
        {"group": None, "instance_type": summary.get("instance_type"), "instance_count": summary.get("instance_count")}]
    text = " + ".join(f"{g['instance_count']} x {g['instance_type']}" + (f" ({g['group']})" if g["group"] else "")
                      for g in groups)
    return text + (" (spot)" if summary.get("spot") else "")


def _status_text(summary: dict) -> str:
    status = summary["status"]
    if summary.get("secondary_status") and summary["secondary_status"] != status:
        status += f" ({summary['secondary_status']})"
    rows = [
        ("job", summary["job_name"]),
        ("status", status),
        ("message", summary.get("status_message")),
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


@click.command()
@click.argument("job_name", metavar="JOB")
@REGION
@OUTPUT
def status(job_name: str, region: str | None, output: str) -> None:
    """Show a training job's state. Exits 1 when it failed or was stopped."""
    backend = _backend()
    summary = backend.describe(job_name, region)
    if output == "json":
        _echo_json(summary)
    else:
        click.echo(_status_text(summary))
    backend.raise_for_outcome(summary)


@click.command()
@click.argument("job_name", metavar="JOB")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the job ends (exit 1 if it fails).")
@click.option("--poll", "poll_seconds", type=click.FloatRange(min=0.0), default=10.0, show_default=True,
              help="Seconds between polls with --follow.")
@REGION
@OUTPUT
def logs(job_name: str, follow: bool, poll_seconds: float, region: str | None, output: str) -> None:
    """Print a training job's CloudWatch log lines, from every instance, in time order.

    With --output json: one JSON object per line (timestamp in ms, host, message).
    """
    backend = _backend()
    final = backend.stream_logs(job_name, region, follow=follow, echo=click.echo, poll_seconds=poll_seconds,
                                as_json=output == "json")
    if follow:
        backend.raise_for_final_status(job_name, region, final)


@click.command()
@click.argument("job_name", metavar="JOB")
@REGION
@OUTPUT
def stop(job_name: str, region: str | None, output: str) -> None:
    """Ask SageMaker to stop a running training job."""
    result = _backend().stop(job_name, region)
    if output == "json":
        _echo_json(result)
    else:
        click.echo(f"stopping {result['job_name']}\n{result['console_url']}")


@click.command(name="list")
@click.option("--name-contains", default=None, metavar="TEXT", help="Only jobs whose name contains TEXT.")
@click.option("--max", "max_results", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="At most this many jobs, newest first.")
@REGION
@OUTPUT
def list_(name_contains: str | None, max_results: int, region: str | None, output: str) -> None:
    """List recent training jobs, newest first."""
    jobs = _backend().list_jobs(region, name_contains=name_contains, max_results=max_results)
    if output == "json":
        _echo_json(jobs)
        return
    if not jobs:
        click.echo("no training jobs" + (f" whose name contains {name_contains!r}" if name_contains else ""))
        return
    width = max(len(job["job_name"]) for job in jobs)
    click.echo(f"{'JOB':<{width}}  {'STATUS':<10}  {'CREATED':<25}  ENDED")
    for job in jobs:
        click.echo(f"{job['job_name']:<{width}}  {job['status']:<10}  {str(job['created'] or '-'):<25}  "
                   f"{job['ended'] or '-'}")


COMMANDS: list = [status, logs, stop, list_]
