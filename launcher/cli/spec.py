"""Commands that read specs: validate, schema, launch (dry run / submit / --local).

Only click and the error type are imported at module level: the spec loader, the rules and the plan are
imported inside the commands that use them, and the SageMaker backend and the local runner only once
the spec is known to be valid.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Callable

import click

from launcher.cli.compile_errors import as_objects, echo_findings, refuse
from launcher.cli.options import OUTPUT, SET, WARM_START_FROM, warm_start_override
from launcher.errors import DfmError

if TYPE_CHECKING:
    from launcher.backends import Backend


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


def _warnings(compiled: Any, *, offline: bool = False) -> list[str]:
    """The rules' warnings, and a placeholder role or bucket still in the spec; `offline` (a command that looks
    at neither the bucket nor local files): the ShardedByS3Key file-count warning too."""
    from launcher.cli.placeholders import placeholder_warnings
    from launcher.compile import shard_warnings

    found = [*compiled.warnings, *(placeholder_warnings(compiled.spec) if compiled.spec is not None else [])]
    if offline and compiled.plan is not None:
        found += shard_warnings(compiled.spec, compiled.plan)
    return found


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@SET
@OUTPUT
def validate(specs: tuple[str, ...], overrides: tuple[str, ...], output: str) -> None:
    """Check job specs offline: exit 0 if all are valid, 2 with `file:line: field: message` lines if not."""
    from launcher.compile import compile_spec

    results = []
    for path in specs:
        compiled = compile_spec(path, overrides)
        results.append(
            {
                "path": path,
                "valid": compiled.ok,
                "errors": list(compiled.errors),
                "warnings": _warnings(compiled, offline=True),
            }
        )
    valid = all(r["valid"] for r in results)
    if output == "json":
        files = [{**r, "errors": as_objects(r["errors"]), "warnings": as_objects(r["warnings"])} for r in results]
        click.echo(json.dumps({"valid": valid, "files": files}, indent=2))
    else:
        for result in results:
            echo_findings(result["errors"], result["warnings"])
            status = "ok" if result["valid"] else f"{len(result['errors'])} error(s)"
            click.echo(
                f"{result['path']}: {status}"
                + (f", {len(result['warnings'])} warning(s)" if result["warnings"] else "")
            )
    if not valid:
        raise SystemExit(2)


@click.command()
def schema() -> None:
    """Print the JSON Schema of a job spec (for YAML editors: yaml-language-server: $schema=...)."""
    from launcher.spec import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


def local_overrides(
    channels: tuple[str, ...], run_dir: str | None, timeout: float | None, memory_per_host: str | None = None
) -> list[str]:
    """`--channel NAME=PATH`, `--run-dir`, `--timeout`, `--memory-per-host` of a local run as the --set lines they
    stand for (local.*)."""
    overrides = []
    for item in channels:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise DfmError(f"--channel {item}: expected NAME=PATH, e.g. --channel train=data/sample/train")
        overrides.append(f"local.channels.{name}={json.dumps(path)}")
    if run_dir is not None:
        overrides.append(f"local.run_dir={json.dumps(run_dir)}")
    if timeout is not None:
        overrides.append(f"local.timeout_s={int(timeout)}")
    if memory_per_host is not None:
        overrides.append(f"local.memory_per_host={json.dumps(memory_per_host)}")
    return overrides


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be sent to SageMaker (with --local: what would run here); no network call.",
)
@click.option("--wait", is_flag=True, help="After submitting, stream the logs and exit with the job's outcome.")
@SET
@OUTPUT
@click.option(
    "--local", "local", is_flag=True, help="Run the same plan on this machine (processes emulating the hosts)."
)
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="--local: where runs are written (spec local.run_dir)."
)
@click.option("--channel", "channels", multiple=True, metavar="NAME=PATH", help="--local: read channel NAME from PATH.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), metavar="SECONDS", help="--local: stop the run after this many seconds."
)
@click.option(
    "--memory-per-host",
    metavar="SIZE",
    help="--local: memory each simulated host's processes may hold together, e.g. 6GiB (spec local.memory_per_host).",
)
@click.option(
    "--verbose", is_flag=True, help="--local: also show TensorFlow's INFO log lines (the logs/ files always have them)."
)
@click.option("--job-name", help="The full job name (default: spec name + timestamp).")
@WARM_START_FROM
@click.option(
    "--show-secrets",
    is_flag=True,
    help="Print environment values whose names look secret (*KEY*, *TOKEN*, *PASSWORD*...) instead of ****.",
)
@click.option(
    "--yes", "-y", is_flag=True, help="Submit without asking (dfm asks only on a terminal, with text output)."
)
def launch(
    spec_path: str,
    dry_run: bool,
    wait: bool,
    overrides: tuple[str, ...],
    output: str,
    local: bool,
    run_dir: str | None,
    channels: tuple[str, ...],
    timeout: float | None,
    memory_per_host: str | None,
    verbose: bool,
    job_name: str | None,
    warm_start_from: str | None,
    show_secrets: bool,
    yes: bool,
) -> None:
    """Launch a job spec on SageMaker (or --dry-run it, or run it --local)."""
    from launcher.compile import compile_spec

    if dry_run and wait:
        raise DfmError("--wait has nothing to wait for in a --dry-run")
    if not local and (channels or run_dir or timeout or memory_per_host or verbose):
        raise DfmError("--channel, --run-dir, --timeout, --memory-per-host and --verbose apply to --local runs")
    compiled = compile_spec(
        spec_path,
        (
            *overrides,
            *local_overrides(channels, run_dir, timeout, memory_per_host),
            *warm_start_override(warm_start_from),
        ),
        job_name,
    )
    warnings = _warnings(compiled, offline=dry_run and not local)
    if not compiled.ok:
        refuse(compiled.errors, warnings, output)
    from launcher.backends import backend_named

    backend = backend_named("training", local)
    if local and not dry_run:
        _echo_warnings(warnings, output)
    request = backend.dryrun(compiled.plan)
    if dry_run and local:
        _local_dry_run(backend, request, output, show_secrets, warnings)
    elif dry_run:
        _dry_run(backend, request, output, show_secrets, warnings)
    elif local:
        _run_local(backend, request, output, verbose)
    else:
        _submit(backend, request, wait, output, warnings, ask=not yes and output == "text" and on_terminal())


def on_terminal() -> bool:
    """Someone is there to answer: stdin and stdout are a terminal (never in CI or a pipe)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _echo_warnings(warnings: list[str], output: str) -> None:
    if output == "text":
        echo_findings(warnings=warnings)


def _training_document(backend: Backend, request: Any, warnings: list[str]) -> dict:
    """The dry run's document, its warnings the spec's (placeholders too) and the upload's."""
    document = backend.document(request)
    document["warnings"] = [*warnings, *(w for w in document["warnings"] if w not in warnings)]
    return document


def show_dry_run(document: dict, render: Callable[[dict], str], output: str, show_secrets: bool) -> None:
    """Every dry run, of every job kind and backend: its document, secret-looking environment values masked
    (CI logs keep dry runs), printed as JSON or as the backend's text rendering of that same document."""
    from launcher.cli.secrets import mask_document

    document = mask_document(document, show_secrets)
    click.echo(json.dumps(document, indent=2, default=str) if output == "json" else render(document))


def _dry_run(backend: Backend, request: Any, output: str, show_secrets: bool, warnings: list[str]) -> None:
    from launcher.cli.render import render_dry_run

    document = _training_document(backend, request, warnings)
    _echo_warnings(document["warnings"], output)
    show_dry_run(document, render_dry_run, output, show_secrets)


def _local_dry_run(backend: Backend, request: Any, output: str, show_secrets: bool, warnings: list[str]) -> None:
    from launcher.local.describe import render_request

    # Refusals first, on stderr, before the long listing.
    echo_findings([f"--local: {problem}" for problem in request.problems], warnings if output == "text" else ())
    show_dry_run(backend.document(request), render_request, output, show_secrets)
    if request.problems:  # the run would refuse to start: say so in the exit code too, as validate does
        raise SystemExit(2)


def _run_local(backend: Backend, request: Any, output: str, verbose: bool = False) -> None:
    echo = click.echo if output == "text" else _echo_err
    code = backend.execute(request, echo=echo, verbose=verbose)
    if output == "json":
        click.echo(json.dumps({"job_name": request.job_name, "exit_code": code}))
    raise SystemExit(code)


def _submit(backend: Backend, request: Any, wait: bool, output: str, warnings: list[str], ask: bool) -> None:
    from launcher import sagemaker_backend
    from launcher.cli.render import summary_lines

    document = _training_document(backend, request, warnings)
    _echo_warnings(document["warnings"], output)
    if ask:
        click.echo("\n".join(summary_lines(document, sent=True)))
        if not click.confirm("Submit this job?", default=False):
            raise DfmError("not submitted", 1)
    echo = click.echo if output == "text" else _echo_err

    job_name = backend.execute(request, wait=wait, echo=echo, warn=lambda line: _echo_err(f"warning: {line}"))
    if output == "json":
        click.echo(
            json.dumps({"job_name": job_name, "console_url": sagemaker_backend.console_url(job_name, request.region)})
        )


COMMANDS: list = [validate, schema, launch]
