"""Options shared by several commands, defined once; where commands differ in a default or a help line, a
function takes those and gives the option."""

from __future__ import annotations

import json

import click

OUTPUT = click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Human-readable text, or JSON for scripts.",
)
REGION = click.option(
    "--region",
    default=None,
    metavar="REGION",
    help="AWS region of the job [default: AWS_REGION, AWS_DEFAULT_REGION or the profile's].",
)
SET = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec field, e.g. instance.count=1 (value parsed as YAML).",
)

WARM_START_FROM = click.option(
    "--warm-start-from",
    "warm_start_from",
    default=None,
    metavar="JOB_OR_URI",
    help="Start from an earlier training job (its name), an S3 checkpoint prefix or model.tar.gz; with --local a run "
    "folder, a checkpoint folder or a model (= --set warm_start.from=...).",
)


def warm_start_override(source: str | None) -> list[str]:
    """`--warm-start-from X` as the --set line it stands for (the spec's other warm_start keys kept)."""
    return [] if source is None else [f"warm_start.from={json.dumps(source)}"]


def positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A click callback: an integer option of at least 1."""
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value


def files(help: str):
    """`--files N` (at least 1, default 1): how many files a data command writes; `help` says how rows go into them."""
    return click.option("--files", type=int, default=1, show_default=True, callback=positive, help=help)


def field_size(default: int, help: str):
    """`--field-size N` (at least 1): the fields of every row."""
    return click.option("--field-size", type=int, default=default, show_default=True, callback=positive, help=help)


def feature_size(help: str, default: int | None = None):
    """`--feature-size N` (at least 1): the id space; with no default, nothing is checked against it."""
    return click.option(
        "--feature-size",
        type=int,
        default=default,
        show_default=default is not None,
        callback=positive,
        help=help,
    )
