"""The one way a command prints what compiling a spec found: `error: ` and `warning: ` lines on stderr, and with
`--output json` the same as objects `{"file", "line", "field", "message"}` on stdout; errors exit 2. `dfm validate`,
`launch`, `tune` and `data prepare` all print them here."""

from __future__ import annotations

import json
import re
from typing import Iterable, NoReturn

import click

# A rendered finding: `file:line: field: message`, `file: message`, or `--option: message`.
_PLACE = re.compile(r"^(?P<file>[^:]+?)(?::(?P<line>\d+))?: (?P<rest>.*)$", re.DOTALL)
_FIELD = re.compile(r"^(?P<field>[A-Za-z_][\w.\-]*): (?P<message>.*)$", re.DOTALL)


def as_object(line: str) -> dict:
    """A rendered `file:line: field: message` line as {"file", "line", "field", "message"} (None where absent)."""
    place = _PLACE.match(line)
    if place is None:
        return {"file": None, "line": None, "field": None, "message": line}
    file, number, rest = place["file"], place["line"], place["rest"]
    if file.startswith("--") and file != "--set":  # a command-line option: no file
        return {"file": None, "line": None, "field": file, "message": rest}
    field = _FIELD.match(rest)
    return {
        "file": file,
        "line": int(number) if number else None,
        "field": field["field"] if field else None,
        "message": field["message"] if field else rest,
    }


def as_objects(lines: Iterable[str]) -> list[dict]:
    return [as_object(line) for line in lines]


def echo_findings(errors: Iterable[str] = (), warnings: Iterable[str] = ()) -> None:
    """Each rendered `file:line: field: message` line, errors first, on stderr."""
    for line in errors:
        click.echo(f"error: {line}", err=True)
    for line in warnings:
        click.echo(f"warning: {line}", err=True)


def refuse(errors: Iterable[str], warnings: Iterable[str] = (), output: str = "text") -> NoReturn:
    """A spec that does not compile: its errors and warnings (also as JSON objects on stdout with --output json);
    exit 2."""
    errors, warnings = list(errors), list(warnings)
    echo_findings(errors, warnings)
    if output == "json":
        click.echo(json.dumps({"errors": as_objects(errors), "warnings": as_objects(warnings)}, indent=2))
    raise SystemExit(2)
