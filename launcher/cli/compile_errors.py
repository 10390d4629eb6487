"""The one way a command prints what compiling a spec found: `error: ` and `warning: ` lines on stderr, and with
`--output json` the same as a document on stdout; errors exit 2. `dfm validate`, `launch`, `tune` and
`data prepare` all print them here."""

from __future__ import annotations

import json
from typing import Iterable, NoReturn

import click


def echo_findings(errors: Iterable[str] = (), warnings: Iterable[str] = ()) -> None:
    """Each rendered `file:line: field: message` line, errors first, on stderr."""
    for line in errors:
        click.echo(f"error: {line}", err=True)
    for line in warnings:
        click.echo(f"warning: {line}", err=True)


def refuse(errors: Iterable[str], warnings: Iterable[str] = (), output: str = "text") -> NoReturn:
    """A spec that does not compile: its errors and warnings (also as JSON on stdout with --output json); exit 2."""
    errors, warnings = list(errors), list(warnings)
    echo_findings(errors, warnings)
    if output == "json":
        click.echo(json.dumps({"errors": errors, "warnings": warnings}, indent=2))
    raise SystemExit(2)
