"""A spec's schema errors in dfm's words: each on the line that set the field, unknown keys with the
allowed ones and a "did you mean", YAML's number-for-string slips named."""

from __future__ import annotations

import re

from pydantic import ValidationError

from launcher.spec.file import Location, Problem, did_you_mean
from launcher.spec.sdk_words import distribution_problem, sdk_key


def schema_problems(err: ValidationError, lines: dict, shown: str, schema: dict) -> list[Problem]:
    """pydantic's errors as `Problem`s on the line that set each field, with the fix where one is known."""
    problems = []
    for item in err.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("~")))
        field = ".".join(str(p) for p in loc)
        where = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), Location(shown, 1))
        kind = item["type"]
        sdk = _sdk_spelling(kind, loc, item.get("input"))
        if sdk is not None:
            message = sdk
        elif kind == "extra_forbidden":
            allowed = _allowed_keys(schema, loc[:-1])
            message = f"unknown key{did_you_mean(str(loc[-1]), allowed)}"
            if allowed:
                message += f"; allowed: {', '.join(sorted(allowed))}"
        elif kind == "missing":
            message = "required, missing"
        elif kind.startswith("literal_error") or kind == "enum":
            got = item.get("input")
            expected = item.get("ctx", {}).get("expected", "")
            hint = did_you_mean(str(got), re.findall(r"'([^']*)'", expected))
            message = f"'{got}' is not one of {expected}{hint}"
        else:
            message = item["msg"]
            if kind.endswith("_type") or kind.endswith("_parsing"):
                message += f", got {item.get('input')!r}"
            if kind == "string_type" and isinstance(item.get("input"), (int, float)):
                message += ": quote it (YAML reads 2.10 as the number 2.1)"
        problems.append(Problem(where, field, message))
    return sorted(problems, key=lambda p: (p.location.file, p.location.line or 0))


def _sdk_spelling(kind: str, loc: tuple, value: object) -> str | None:
    """The dfm spelling of what the SageMaker SDK calls it, where the user wrote the SDK's."""
    if kind == "extra_forbidden":
        return sdk_key(".".join(str(p) for p in loc[:-1]), str(loc[-1]))
    if loc == ("distribution",) and (kind == "wrong_shape" or kind.startswith("literal_error")):
        return distribution_problem(value)
    return None


def _allowed_keys(schema: dict, loc: tuple) -> set[str]:
    """The keys the JSON Schema allows at `loc` (union branches merged), for "did you mean" hints."""
    defs = schema.get("$defs", {})

    def expand(node: dict) -> list[dict]:
        if "$ref" in node:
            return expand(defs[node["$ref"].split("/")[-1]])
        branches = node.get("anyOf") or node.get("oneOf") or node.get("allOf")
        return [leaf for b in branches for leaf in expand(b)] if branches else [node]

    nodes = [schema]
    for part in loc:
        following = []
        for node in (leaf for n in nodes for leaf in expand(n)):
            if isinstance(part, str) and part in node.get("properties", {}):
                following.append(node["properties"][part])
            elif isinstance(part, str) and isinstance(node.get("additionalProperties"), dict):
                following.append(node["additionalProperties"])
            elif isinstance(part, int) and isinstance(node.get("items"), dict):
                following.append(node["items"])
        nodes = following
    return {key for n in nodes for leaf in expand(n) for key in leaf.get("properties", {})}
