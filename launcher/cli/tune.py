"""`dfm tune SPEC`: the spec's `tune:` section as a SageMaker tuning job (--dry-run, submit) or as a local
study (--local, --resume). Submitted tuning jobs are followed with `dfm status / logs / stop / list`, which
dispatch on the job's kind (`sagemaker_backend.kinds`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING


import click

from launcher.cli.options import OUTPUT, SET
from launcher.cli.compile_errors import echo_findings, refuse
from launcher.errors import DfmError

if TYPE_CHECKING:
    from launcher.backends import Backend
    from launcher.plans.tuning_plan import TuningPlan


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


def compile_tuning(spec_path: str, overrides: tuple[str, ...], job_name: str | None, *, local: bool = True):
    """(spec, TuningPlan) of a valid spec with a tune: section; prints the errors and exits 2 otherwise. Not
    `local`: with the warning of S3 sharding that nothing checks before SageMaker's trials start."""
    from launcher.compile import compile_spec, shard_warnings
    from launcher.plans.training_plan import build_plan
    from launcher.plans.tuning_plan import build_tuning_plan, tuning_job_name
    from launcher.rules.tuning_objective import objective_schedule

    compiled = compile_spec(spec_path, overrides)
    errors = list(compiled.errors)
    if compiled.spec is not None and compiled.spec.tune is None and not errors:
        errors.append(f"{spec_path}: no tune: section: add one (docs/tune.md), or run the job with dfm launch")
    if job_name is not None:
        from launcher.rules.tuning_limits import check_tuning_job_name_override

        errors += [f"--job-name: {f.message}" for f in check_tuning_job_name_override(job_name)]
    if errors:
        refuse(errors)
    spec = compiled.spec
    name = job_name or tuning_job_name(spec)
    training = build_plan(spec, job_name=name, warnings=compiled.warnings)
    if not local:
        training = dataclasses.replace(training, warnings=(*training.warnings, *shard_warnings(spec, training)))
    return spec, build_tuning_plan(spec, training, name=name, schedule=objective_schedule(spec))


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the CreateHyperParameterTuningJob request, the ranges and the cost ceiling; no network call.",
)
@click.option(
    "--local",
    "local",
    is_flag=True,
    help="Run the search on this machine: each trial a local run on the spec's local: channels.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="--local: continue the study of --job-name (default: the newest of this spec) after a Ctrl-C.",
)
@click.option("--job-name", help="The tuning job's name (default: tune.name or the spec's name + -YYMMDD-HHMMSS).")
@click.option(
    "--wait",
    is_flag=True,
    help="After submitting, follow the tuning job to its end: its trials, the best "
    "as a `dfm launch` line and the plot; exit 1 if it failed or was stopped.",
)
@click.option(
    "--poll",
    "poll_seconds",
    type=click.FloatRange(min=0.0),
    default=30.0,
    show_default=True,
    help="Seconds between polls with --wait.",
)
@click.option(
    "--warm-start-from",
    "warm_start_from",
    multiple=True,
    metavar="STUDY_OR_JOB",
    help="Start from earlier searches: tuning job names (tune.warm_start.parents, at most 5; repeat the option), or "
    "with --local a study's folder, whose completed trials seed the new study.",
)
@SET
@OUTPUT
def tune(
    spec_path: str,
    dry_run: bool,
    local: bool,
    resume: bool,
    job_name: str | None,
    wait: bool,
    poll_seconds: float,
    overrides: tuple[str, ...],
    output: str,
    warm_start_from: tuple[str, ...],
) -> None:
    """Tune a spec's hyperparameters: SageMaker automatic model tuning, or (--local) the same search here."""
    if resume and not local:
        raise DfmError("--resume continues a --local study")
    if wait and (dry_run or local):
        raise DfmError("--wait follows a submitted tuning job: drop --dry-run / --local")
    if dry_run and local:
        raise DfmError("--local --dry-run is not supported: `dfm launch SPEC --local --dry-run` shows one trial's run")
    if resume and warm_start_from:
        raise DfmError("--warm-start-from seeds a new study: drop it with --resume")
    if warm_start_from and not local:  # tuning job names: the parents of WarmStartConfig
        overrides = (*overrides, f"tune.warm_start.parents={json.dumps(list(warm_start_from))}")
    if resume and job_name is None:
        job_name = _newest_study(spec_path, overrides)
    spec, tplan = compile_tuning(spec_path, overrides, job_name, local=local)
    resume_line = shlex.join(
        [
            "dfm",
            "tune",
            spec_path,
            "--local",
            "--resume",
            "--job-name",
            tplan.name,
            *(arg for override in overrides for arg in ("--set", override)),
        ]
    )
    if output == "text":
        echo_findings(warnings=tplan.training.warnings)
    from launcher.backends import backend_named

    backend = backend_named("tuning", local)
    if local:
        _local(backend, spec, tplan, output, resume, resume_line, seed_folders(tplan, warm_start_from))
        return
    request = backend.dryrun(tplan)
    if dry_run:
        _dry_run(backend, request, tplan, output)
        return
    echo = click.echo if output == "text" else _echo_err
    name = backend.execute(request, echo=echo)
    if wait:
        _wait(spec, tplan, output, poll_seconds)
    elif output == "json":
        from launcher.sagemaker_backend.tuning_jobs import console_url

        click.echo(
            json.dumps(
                {
                    "job_name": name,
                    "kind": "tuning",
                    "console_url": console_url(name, tplan.training.region),
                }
            )
        )


def _wait(spec, tplan, output: str, poll_seconds: float) -> None:
    """Follow the submitted job; at its end the same report as a local study's: study.json and study.png in
    <local.run_dir>/<tuning job>/, the trials and the best trial's `dfm launch` line."""
    from launcher.cli import tune_report
    from launcher.sagemaker_backend import tuning_jobs
    from launcher.sagemaker_backend.training_jobs import raise_for_outcome

    bar = _trial_bar(output, tplan.max_jobs)
    with bar or contextlib.nullcontext():
        summary = tuning_jobs.wait(
            tplan.name,
            tplan.training.region,
            echo=_echo_err,
            poll_seconds=poll_seconds,
            watch=(lambda s: show_sagemaker_counts(bar, s)) if bar is not None else None,
        )
    document = tune_report.sagemaker_document(summary, spec.path)
    folder = Path(tplan.training.local.run_dir) / tplan.name
    folder.mkdir(parents=True, exist_ok=True)
    tune_report.write_plot(document, folder / tune_report.PLOT_FILE, _echo_err)
    (folder / "study.json").write_text(json.dumps(document, indent=1, default=str))
    summary = {**summary, "launch": document["launch"], "plot": document["plot"]}
    click.echo(
        json.dumps(summary, indent=2, default=str) if output == "json" else tune_report.render_sagemaker(summary)
    )
    raise_for_outcome(summary)


def _dry_run(backend: Backend, request, tplan: TuningPlan, output: str) -> None:
    from launcher.cli import tune_report

    document = {
        "tuning_job": tplan.name,
        **backend.document(request),
        "ranges": tune_report.ranges_rows(tplan),
        "cost": tplan.cost,
        "warnings": list(tplan.training.warnings),
    }
    if output == "json":
        click.echo(json.dumps(document, indent=2, default=str))
    else:
        click.echo(tune_report.render_dry_run(document, tplan))


def _newest_study(spec_path: str, overrides: tuple[str, ...]) -> str:
    from launcher.local.tuning_study import PLAN_FILE
    from launcher.spec import SpecError, load_spec
    from launcher.plans.tuning_plan import tuning_base_name

    try:
        spec = load_spec(spec_path, overrides)
    except SpecError as err:
        for line in err.lines():
            _echo_err(f"error: {line}")
        raise SystemExit(2) from None
    if spec.tune is None:
        raise DfmError(f"{spec_path}: no tune: section to resume")
    base = tuning_base_name(spec)
    run_dir = Path(os.path.abspath(os.path.expanduser(spec.local.run_dir)))  # as plan.local.run_dir
    found = sorted(p.parent.name for p in run_dir.glob(f"{base}-*/{PLAN_FILE}"))
    if not found:
        raise DfmError(f"no study of {base} in {run_dir} to resume: run `dfm tune {spec_path} --local` first")
    return found[-1]  # the names end in -YYMMDD-HHMMSS: the newest sorts last


def seed_folders(tplan: TuningPlan, given: tuple[str, ...]) -> list[Path]:
    """The parent studies of a local study: --warm-start-from folders, else tune.warm_start.parents as the studies of
    those names in the run dir."""
    if given:
        return [Path(folder).expanduser().resolve() for folder in given]
    run_dir = Path(tplan.training.local.run_dir)
    return [run_dir / parent for parent in tplan.warm_start_parents]


def _local(
    backend: Backend,
    spec,
    tplan: TuningPlan,
    output: str,
    resume: bool,
    resume_line: str,
    seed_from: list[Path] | None = None,
) -> None:
    from launcher.cli import tune_report
    from launcher.local.tuning_study import INTERRUPTED

    try:
        import optuna  # noqa: F401
    except ImportError:
        raise DfmError("dfm tune --local needs Optuna: pip install 'dfm[tune]'") from None
    echo = click.echo if output == "text" else _echo_err
    bar = _trial_bar(output, tplan.max_jobs)
    status = _status_line(output) if bar is None else (lambda line: None)
    from launcher.compile import compile_trial

    with bar or contextlib.nullcontext():
        tuning, study = backend.execute(
            backend.dryrun(tplan),
            spec=spec,
            compile_trial=compile_trial,
            echo=echo,
            status=status,
            resume=resume,
            seed_from=seed_from or [],
            counts=(lambda c: show_local_counts(bar, c)) if bar is not None else None,
        )
    status("")
    rows = tune_report.trial_rows(study)
    document = tune_report.study_document(tplan, rows, tuning.folder, spec.path)
    tune_report.write_plot(document, tuning.folder / tune_report.PLOT_FILE, echo)
    (tuning.folder / "study.json").write_text(json.dumps(document, indent=1, default=str))
    if output == "json":
        click.echo(json.dumps(document, indent=2, default=str))
    else:
        click.echo(tune_report.render_study(document))
    if tuning.stopping == INTERRUPTED:
        echo(f"[dfm tune] interrupted: `{resume_line}` continues {tplan.name}")
        raise SystemExit(130)
    if document["best"] is None:
        raise DfmError(tune_report.no_trial_completed(document), exit_code=1)


def _trial_bar(output: str, max_jobs: int):
    """The trials on a bar (done of max_jobs, running, failed, the best so far) on a terminal with text output;
    None otherwise (the plain lines)."""
    from launcher.watching import CountBar, on_terminal

    return CountBar("trials", max_jobs) if output == "text" and on_terminal() else None


def show_local_counts(bar, counts: dict) -> None:
    """A local study's counts (tuning_study.trial_counts) on the bar."""
    detail = f"{counts['running']} running, {counts['failed']} failed, {counts['pruned']} pruned"
    if counts["best"] is not None:
        detail += f", best {counts['objective']}={counts['best'][0]:.4f} (trial {counts['best'][1]})"
    bar.update(counts["done"], detail)


def show_sagemaker_counts(bar, summary: dict) -> None:
    """A tuning job's counts (tuning_jobs.describe) on the bar."""
    trials = summary["trials"]
    detail = f"{summary['status']}: {trials['running']} running, {trials['failed']} failed, {trials['stopped']} stopped"
    if summary.get("best"):
        detail += f", best {summary['objective']['metric']}={summary['best']['objective']}"
    bar.update(trials["completed"] + trials["stopped"] + trials["failed"], detail, summary.get("max_jobs"))


def _status_line(output: str):
    """The live progress line: rewritten in place on a terminal, otherwise only when it changes."""
    tty = output == "text" and sys.stdout.isatty()
    last = [""]

    def show(line: str) -> None:
        if line == last[0]:
            return
        if tty:
            click.echo("\r\033[K" + line, nl=not line)
        elif line:
            _echo_err(line)
        last[0] = line

    return show


COMMANDS: list = [tune]
