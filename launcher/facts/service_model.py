"""SageMaker's own limits on a CreateTrainingJob request, read from botocore's service model.

botocore's client-side validator checks types, required members and minimums only; the service also
refuses values outside an enum, longer or larger than a maximum, or not matching a pattern. This module
checks those, shape by shape, from the model botocore ships (the same file its clients use).

Fast and light on purpose (`dfm validate` uses it): botocore is found with importlib, never imported,
and the shapes CreateTrainingJob uses (~130 of 3200) are cached as a small JSON file under
$XDG_CACHE_HOME/dfm (~/.cache/dfm), keyed by the model file's path, size and mtime.

Patterns are Java regular expressions (the service runs on Java) matched against the whole value: the
service refuses `a_b` as a job name although its pattern has no `$`. `java_regex` translates them for the
`regex` package (which knows Unicode categories such as `\\p{L}`): `.` stops at Java's line terminators,
and `\\w \\d \\s` and the POSIX classes stay ASCII as in Java; a construct it cannot translate leaves that
pattern unchecked.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

REQUEST_SHAPE = "CreateTrainingJobRequest"
# Also kept: the shapes of a tuning job request (its trials' definition and its limits) and of dfm data
# prepare's Spark processing job.
PROCESSING_SHAPE = "CreateProcessingJobRequest"
# And the requests that serve a model: a transform job and an endpoint (dfm transform, dfm deploy).
MODEL_SHAPES = {
    "CreateModel": "CreateModelInput",
    "CreateTransformJob": "CreateTransformJobRequest",
    "CreateEndpointConfig": "CreateEndpointConfigInput",
    "CreateEndpoint": "CreateEndpointInput",
}
ROOT_SHAPES = (REQUEST_SHAPE, "CreateHyperParameterTuningJobRequest", PROCESSING_SHAPE, *MODEL_SHAPES.values())
CACHE_FORMAT = 5
# Java's `.` matches anything but these (without DOTALL / UNIX_LINES).
_JAVA_DOT = "[^\\n\\r\\u0085\\u2028\\u2029]"
# Java's POSIX classes and \w \d \s are US-ASCII (without UNICODE_CHARACTER_CLASS). Unicode categories
# (\p{L}, \p{IsN}, \P{Z}) are left to the `regex` package, which knows them.
_ASCII_CLASSES = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
    "w": "a-zA-Z0-9_",
    "d": "0-9",
    "s": " \\t\\n\\x0b\\f\\r",
}
_UNTRANSLATED_ESCAPES = set("QEGZRXHVek")  # no equivalent worth emulating here
_JAVA_ESCAPES = {
    "z": "\\Z",
    "h": "[ \\t\\xa0\\u1680\\u180e\\u2000-\\u200a\\u202f\\u205f\\u3000]",
    "v": "[\\n\\x0b\\f\\r\\x85\\u2028\\u2029]",
}


class ModelUnavailable(Exception):
    """botocore's SageMaker model is not installed here."""


# ---------------------------------------------------------------------------------------------- Java regex
def _complement(body: str) -> str:
    """A class body matching every code point but the ASCII ones `body` matches (for \\S, \\P{Alpha} inside [])."""
    inside = [code for code in range(128) if re.fullmatch(f"[{body}]", chr(code))]
    ranges, start = [], 0
    for code in [*inside, sys.maxunicode + 1]:
        if code > start:
            ranges.append(f"\\x{start:02x}" if code - 1 == start else f"\\U{start:08x}-\\U{code - 1:08x}")
        start = code + 1
    return "".join(ranges)


def _class(name: str, negated: bool, in_class: bool) -> str:
    """Java's `\\p{name}` / `\\P{name}` (or `\\w`-style shorthand) in `regex` syntax."""
    if name in _ASCII_CLASSES:
        body = _ASCII_CLASSES[name]
        if in_class:
            return _complement(body) if negated else body
        return f"[{'^' if negated else ''}{body}]"
    category = name[2:] if name.startswith("Is") else name
    if not re.fullmatch(r"[LMNPSZC][a-z]?", category):
        raise ValueError(f"unsupported property \\p{{{name}}}")
    return f"\\{'P' if negated else 'p'}{{{category}}}"


def _property(pattern: str, start: int) -> tuple[str, int]:
    """The name after `\\p` at `start` (`{Name}` or one letter) and the index after it."""
    if pattern.startswith("{", start):
        end = pattern.find("}", start)
        if end < 0:
            raise ValueError("unclosed \\p{")
        return pattern[start + 1 : end], end + 1
    if start >= len(pattern):
        raise ValueError("\\p without a name")
    return pattern[start], start + 1


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The translation of the escape at `pattern[i]` (a backslash) and the index after it."""
    if i + 1 >= len(pattern):
        raise ValueError("trailing backslash")
    following = pattern[i + 1]
    if following in "pP":
        name, end = _property(pattern, i + 2)
        return _class(name, following == "P", in_class), end
    if following.lower() in "wds":
        return _class(following.lower(), following.isupper(), in_class), i + 2
    if following in _UNTRANSLATED_ESCAPES or (following in _JAVA_ESCAPES and in_class):
        raise ValueError(f"unsupported escape \\{following}")
    return _JAVA_ESCAPES.get(following, pattern[i : i + 2]), i + 2


def java_regex(pattern: str) -> str:
    """A pattern for the `regex` package (to use with fullmatch) equivalent to Java's `pattern`.

    Raises ValueError for what it does not translate (nested or intersected classes, \\Q..\\E, ...).
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            translated, i = _escape(pattern, i, in_class)
            out.append(translated)
        elif in_class:
            if char == "[" or pattern.startswith("&&", i):
                raise ValueError("nested or intersected character class")
            in_class = char != "]"
            out.append(char)
            i += 1
        elif char == "[":
            in_class = True
            head = "[^" if pattern.startswith("[^", i) else "["
            i += len(head)
            if pattern.startswith("]", i):  # a leading ] is a literal in both languages
                head += "\\]"
                i += 1
            out.append(head)
        else:
            out.append(_JAVA_DOT if char == "." else char)
            i += 1
    if in_class:
        raise ValueError("unclosed character class")
    return "".join(out)


def _python_pattern(pattern: str) -> str | None:
    import regex

    try:
        translated = java_regex(pattern)
        regex.compile(translated)
    except (ValueError, regex.error):
        return None
    return translated


@functools.lru_cache(maxsize=None)
def compiled(python_pattern: str):
    import regex  # only when a value is checked against a pattern

    return regex.compile(python_pattern)


# ---------------------------------------------------------------------------------------------- the model
def model_file() -> Path:
    """botocore's SageMaker service model (the newest API version it ships), found without importing it."""
    spec = importlib.util.find_spec("botocore")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        root = Path(location) / "data" / "sagemaker"
        versions = sorted((p for p in root.iterdir() if p.is_dir()), reverse=True) if root.is_dir() else []
        for folder in versions:
            for name in ("service-2.json", "service-2.json.gz"):
                if (folder / name).is_file():
                    return folder / name
    raise ModelUnavailable("botocore's SageMaker model was not found: install boto3/botocore")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dfm"


def _extract(source: Path) -> dict[str, dict]:
    """The shapes reachable from the request, documentation dropped, each pattern translated."""
    raw = source.read_bytes()
    model = json.loads(gzip.decompress(raw) if source.suffix == ".gz" else raw)
    everything, kept = model["shapes"], {}
    pending = list(ROOT_SHAPES)
    while pending:
        name = pending.pop()
        if name in kept:
            continue
        shape = {k: v for k, v in everything[name].items() if k != "documentation"}
        if "members" in shape:
            shape["members"] = {member: {"shape": ref["shape"]} for member, ref in shape["members"].items()}
            pending += [ref["shape"] for ref in shape["members"].values()]
        for part in ("member", "key", "value"):
            if part in shape:
                shape[part] = {"shape": shape[part]["shape"]}
                pending.append(shape[part]["shape"])
        if "pattern" in shape:
            shape["python_pattern"] = _python_pattern(shape["pattern"])
        kept[name] = shape
    return kept


def _write_atomically(path: Path, content: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            out.write(content)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: the next run extracts again


@functools.lru_cache(maxsize=1)
def shapes() -> dict[str, dict]:
    """Name -> shape for every shape a CreateTrainingJob, CreateHyperParameterTuningJob, CreateProcessingJob or
    model-serving (MODEL_SHAPES) request uses."""
    source = model_file()
    stat = source.stat()
    key = hashlib.sha256(f"{CACHE_FORMAT}:{source}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = _cache_dir() / f"sagemaker-training-shapes-{key}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    extracted = _extract(source)
    _write_atomically(cached, json.dumps(extracted))
    return extracted


def shape(name: str) -> dict:
    return shapes()[name]


def shape_at(path: str) -> str:
    """The shape name at a dotted request path: member names, `member` for list items, `key`/`value` in maps."""
    name = REQUEST_SHAPE
    for part in path.split("."):
        current = shape(name)
        if part in ("member", "key", "value") and part in current:
            name = current[part]["shape"]
        else:
            name = current["members"][part]["shape"]
    return name


def enum(name: str) -> list[str]:
    return list(shape(name).get("enum", []))


def limit(name: str, bound: str) -> int | None:
    """A shape's `max` or `min` (length for strings, count for lists and maps, value for numbers)."""
    return shape(name).get(bound)


# ---------------------------------------------------------------------------------------------- checking
def value_problems(name: str, value: Any) -> list[str]:
    """What the service would refuse in `value` against shape `name` itself (members are not walked)."""
    current = shape(name)
    kind, low, high = current.get("type"), current.get("min"), current.get("max")
    problems = []
    if kind == "string" and isinstance(value, str):
        if current.get("enum") and value not in current["enum"]:
            problems.append("enum")
        if high is not None and len(value) > high:
            problems.append(f"{len(value)} characters, SageMaker allows at most {high}")
        if low is not None and len(value) < low:
            problems.append(f"{len(value)} characters, SageMaker needs at least {low}")
        pattern = current.get("python_pattern")
        if pattern is not None and not compiled(pattern).fullmatch(value):
            problems.append(f"does not match SageMaker's pattern {current['pattern']}")
    elif kind in ("integer", "long") and isinstance(value, int) and not isinstance(value, bool):
        if high is not None and value > high:
            problems.append(f"{value} is more than SageMaker's maximum {high}")
        if low is not None and value < low:
            problems.append(f"{value} is less than SageMaker's minimum {low}")
    elif kind in ("list", "map") and isinstance(value, (list, dict)):
        if high is not None and len(value) > high:
            problems.append(f"{len(value)} entries, SageMaker allows at most {high}")
        if low is not None and len(value) < low:
            problems.append(f"{len(value)} entries, SageMaker needs at least {low}")
    return problems


def enum_message(name: str, value: str, where: str, did_you_mean: str = "") -> str:
    values = enum(name)
    listed = f": use one of {', '.join(values)}" if len(values) <= 12 else ""
    return f"'{value}' is not a value SageMaker accepts for {where}{did_you_mean}{listed}"


def walk(value: Any, name: str = REQUEST_SHAPE, path: str = "") -> Iterator[tuple[str, str]]:
    """(request path, message) for every refused value in a whole request, members included."""
    for problem in value_problems(name, value):
        yield path, enum_message(name, value, path) if problem == "enum" else problem
    current = shape(name)
    if isinstance(value, dict) and "members" in current:
        for member, item in value.items():
            if member in current["members"]:
                yield from walk(item, current["members"][member]["shape"], f"{path}.{member}".lstrip("."))
    elif isinstance(value, dict) and "key" in current:
        for key, item in value.items():
            yield from walk(key, current["key"]["shape"], f"{path}.{key} (name)")
            yield from walk(item, current["value"]["shape"], f"{path}.{key}")
    elif isinstance(value, list) and "member" in current:
        for index, item in enumerate(value):
            yield from walk(item, current["member"]["shape"], f"{path}.{index}")
