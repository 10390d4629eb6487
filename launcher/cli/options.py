"""Options shared by several commands, defined once."""

from __future__ import annotations

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


def positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A click callback: an integer option of at least 1."""
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value
