"""SageMaker's own limits on a CreateTrainingJob request, read from botocore's service model.

botocore's client-side validator checks types, required members and minimums only; the service also
refuses values outside an enum, longer or larger than a maximum, or not matching a pattern. This module
checks those, shape by shape, from the model botocore ships (the same file its clients use).

Fast and light on purpose (`dfm validate` uses it): botocore is found with importlib, never imported,
and the shapes CreateTrainingJob uses (~130 of 3200) are cached as a small JSON file under
$XDG_CACHE_HOME/dfm (~/.cache/dfm), keyed by the model file's path, size and mtime.

Patterns are Java regular expressions (the service runs on Java) matched against the whole value: the
service refuses `a_b` as a job name although its pattern has no `$`. `java_regex` translates them for
Python's `re`: `\\p{L}`-style classes become explicit ranges, `.` stops at Java's line terminators, and
`\\w \\d \\s` stay ASCII as in Java; a construct it cannot translate leaves that pattern unchecked.
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
import unicodedata
from pathlib import Path
from typing import Any, Iterator

REQUEST_SHAPE = "CreateTrainingJobRequest"
CACHE_FORMAT = 1
# Java's `.` matches anything but these (without DOTALL / UNIX_LINES).
_JAVA_DOT = "[^\\n\\r\\u0085\\u2028\\u2029]"
_POSIX = {  # Java's POSIX classes are US-ASCII unless UNICODE_CHARACTER_CLASS is set
    "Lower": "a-z", "Upper": "A-Z", "ASCII": "\\x00-\\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
    "Alnum": "a-zA-Z0-9", "Punct": "!-/:-@\\[-`{-~", "Graph": "!-~", "Print": " -~", "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f", "XDigit": "0-9a-fA-F", "Space": " \\t\\n\\x0b\\f\\r",
}
_UNTRANSLATED_ESCAPES = set("QEGZRXHVek")  # no Python `re` equivalent worth emulating here
_JAVA_ESCAPES = {"z": "\\Z", "h": "[ \\t\\xa0\\u1680\\u180e\\u2000-\\u200a\\u202f\\u205f\\u3000]",
                 "v": "[\\n\\x0b\\f\\r\\x85\\u2028\\u2029]"}


class ModelUnavailable(Exception):
    """botocore's SageMaker model is not installed here."""


# ---------------------------------------------------------------------------------------------- Java regex
def _escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@functools.lru_cache(maxsize=1)
def _category_runs() -> tuple[tuple[int, int, str], ...]:
    """(first, last, category) for each run of code points of one Unicode general category."""
    runs: list[list] = []
    for code in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if runs and runs[-1][2] == category:
            runs[-1][1] = code
        else:
            runs.append([code, code, category])
    return tuple((lo, hi, category) for lo, hi, category in runs)


@functools.lru_cache(maxsize=None)
def _category_ranges(category: str, negated: bool) -> str:
    """The body of a character class for a Unicode general category (`L`, `Lu`, ...), as ranges."""
    ranges: list[tuple[int, int]] = []
    for lo, hi, name in _category_runs():
        if name.startswith(category) != negated:
            if ranges and ranges[-1][1] == lo - 1:
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
    return "".join(_escape(lo) if lo == hi else f"{_escape(lo)}-{_escape(hi)}" for lo, hi in ranges)


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


def _property_class(name: str, negated: bool, in_class: bool) -> str:
    if name in _POSIX:
        body = _POSIX[name]
        if negated and in_class:
            raise ValueError(f"\\P{{{name}}} inside a class")
        return body if in_class else f"[{'^' if negated else ''}{body}]"
    category = name[2:] if name.startswith("Is") else name
    if not re.fullmatch(r"[LMNPSZC][a-z]?", category):
        raise ValueError(f"unsupported property \\p{{{name}}}")
    body = _category_ranges(category, negated and in_class)
    return body if in_class else f"[{'^' if negated else ''}{body}]"


def java_regex(pattern: str) -> str:
    """A Python `re` pattern (to use with re.ASCII and fullmatch) equivalent to Java's `pattern`.

    Raises ValueError for what it does not translate (nested or intersected classes, \\Q..\\E, ...).
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern):
                raise ValueError("trailing backslash")
            following = pattern[i + 1]
            if following in "pP":
                name, i = _property(pattern, i + 2)
                out.append(_property_class(name, following == "P", in_class))
                continue
            if following in _UNTRANSLATED_ESCAPES:
                raise ValueError(f"unsupported escape \\{following}")
            if following in _JAVA_ESCAPES and not in_class:
                out.append(_JAVA_ESCAPES[following])
            elif following in _JAVA_ESCAPES:
                raise ValueError(f"\\{following} inside a class")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if char == "[" or pattern.startswith("&&", i):
                raise ValueError("nested or intersected character class")
            if char == "]":
                in_class = False
            out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            head = "[^" if pattern.startswith("[^", i) else "["
            out.append(head)
            i += len(head)
            if pattern.startswith("]", i):  # a leading ] is a literal in both languages
                out.append("\\]")
                i += 1
            continue
        out.append(_JAVA_DOT if char == "." else char)
        i += 1
    if in_class:
        raise ValueError("unclosed character class")
    return "".join(out)


def _python_pattern(pattern: str) -> str | None:
    try:
        translated = java_regex(pattern)
        re.compile(translated, re.ASCII)
    except (ValueError, re.error):
        return None
    return translated


@functools.lru_cache(maxsize=None)
def _compiled(python_pattern: str) -> re.Pattern:
    return re.compile(python_pattern, re.ASCII)


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
    pending = [REQUEST_SHAPE]
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
    """Name -> shape for every shape a CreateTrainingJob request uses."""
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
        compiled = current.get("python_pattern")
        if compiled is not None and not _compiled(compiled).fullmatch(value):
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
