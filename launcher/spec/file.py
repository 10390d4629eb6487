"""Reading spec files: safe YAML with line numbers, `${ENV}` interpolation, `extends:` and `--set`.

`read_spec_data(path, overrides)` returns plain data plus a map `path tuple -> Location` (file and line),
so every later check can point at the line that set a field. The loader refuses what a job spec never
needs and an attacker might use: anchors and aliases (alias bombs), tags (`!!python/...`), merge keys,
duplicate keys, several documents, binary and non-UTF-8 files, files over 1 MiB.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from launcher.errors import DfmError

MAX_SPEC_BYTES = 1 << 20


# ---------------------------------------------------------------------------------------------- errors
@dataclass(frozen=True)
class Location:
    file: str  # a spec file, or "--set" for a command-line override
    line: int | None = None

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Problem:
    location: Location
    field: str  # dotted path; "" for the file as a whole
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.field}: {self.message}" if self.field else f"{self.location}: {self.message}"


class SpecError(DfmError):
    """One or more problems in a spec; `lines()` gives one `file:line: field: message` per problem."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems), exit_code=2)

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ---------------------------------------------------------------------------------------------- YAML
_ENV = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ONLY_ENV = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")
_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class _Refused(Exception):
    def __init__(self, line: int | None, message: str):
        self.line, self.message = line, message


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases (no alias bombs; `extends:` shares settings instead)."""

    def compose_node(self, parent, index):  # noqa: ANN001 (PyYAML's signature)
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _Refused(event.start_mark.line + 1, "YAML anchors and aliases (&x, *x) are not allowed: use extends:")
        return super().compose_node(parent, index)


class _Problem(Exception):
    def __init__(self, problem: Problem):
        self.problem = problem


def _interpolate(text: str, line: int, field: str, file: str, env: Mapping[str, str]) -> str:
    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        if name in env and (env[name] != "" or default is None):
            return env[name]
        if default is not None:
            return default
        raise _Problem(
            Problem(
                Location(file, line),
                field,
                f"environment variable {name} is not set: export it, or write ${{{name}:-default}}",
            )
        )

    return _ENV.sub(replace, text)


class _Builder:
    """Turns a composed YAML node tree into plain Python values plus a map: path -> Location."""

    def __init__(self, loader: _Loader, file: str, env: Mapping[str, str] | None):
        self.loader, self.file, self.env = loader, file, env
        self.lines: dict[tuple, Location] = {}

    def build(self, node: yaml.Node, path: tuple) -> Any:
        where = Location(self.file, node.start_mark.line + 1)
        field = ".".join(str(p) for p in path)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _COLLECTION_TAGS:
            raise _Problem(Problem(where, field, f"tag {node.tag} is not allowed: only plain YAML values"))
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Problem(Problem(where, field, "merge keys (<<) are not allowed: use extends:"))
                key = self.scalar(key_node, path)
                if not isinstance(key, str):
                    raise _Problem(
                        Problem(
                            Location(self.file, key_node.start_mark.line + 1),
                            field,
                            f"key {key!r} is not a string: quote it",
                        )
                    )
                if key in out:
                    raise _Problem(
                        Problem(
                            Location(self.file, key_node.start_mark.line + 1),
                            ".".join(map(str, path + (key,))),
                            "duplicate key",
                        )
                    )
                self.lines[path + (key,)] = Location(self.file, key_node.start_mark.line + 1)
                out[key] = self.build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.lines[path + (i,)] = Location(self.file, item.start_mark.line + 1)
                items.append(self.build(item, path + (i,)))
            return items
        value = self.scalar(node, path)
        if self.env is not None and isinstance(value, str) and "$" in value:
            whole = node.style is None and _ONLY_ENV.fullmatch(value) is not None
            value = _interpolate(value, where.line, field, self.file, self.env)
            if whole:  # an unquoted `${N:-2}` is typed like any plain scalar: 2 is an int
                value = _retype(value)
        return value

    def scalar(self, node: yaml.Node, path: tuple) -> Any:
        where = Location(self.file, node.start_mark.line + 1)
        field = ".".join(str(p) for p in path)
        if not isinstance(node, yaml.ScalarNode):
            raise _Problem(Problem(where, field, "a key must be a plain string"))
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value  # dates stay the text written
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError:
            raise _Problem(Problem(where, field, f"tag {node.tag} is not allowed: only plain YAML values")) from None
        if not (value is None or isinstance(value, (str, int, float, bool))):
            raise _Problem(Problem(where, field, f"tag {node.tag} is not allowed: only plain YAML values"))
        return value


def _retype(text: str) -> Any:
    value = yaml.safe_load(text) if text.strip() else None
    return value if value is None or isinstance(value, (str, int, float, bool)) else text


def _parse(text: str, file: str, env: Mapping[str, str] | None) -> tuple[Any, dict[tuple, Location]]:
    """(plain data or None, path -> Location); `env` None leaves `${...}` as written."""
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        raise SpecError(
            [Problem(Location(file, line), "", f"not a YAML text file: character #x{err.character:04x} is not allowed")]
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        builder = _Builder(loader, file, env)
        return builder.build(node, ()), builder.lines
    except _Refused as refused:
        raise SpecError([Problem(Location(file, refused.line), "", refused.message)]) from None
    except _Problem as problem:
        raise SpecError([problem.problem]) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        message = " ".join(str(p) for p in (err.context, err.problem) if p)
        raise SpecError([Problem(Location(file, line), "", f"YAML syntax: {message}")]) from None
    except yaml.YAMLError as err:
        raise SpecError([Problem(Location(file), "", f"not a YAML text file: {err}")]) from None
    except RecursionError:
        raise SpecError([Problem(Location(file), "", "nesting too deep")]) from None
    finally:
        loader.dispose()


def _read_capped(path: Path) -> bytes:
    """At most MAX_SPEC_BYTES + 1 bytes of a regular file, whatever size it claims.

    Opened non-blocking and checked with fstat before any read, so a FIFO or a device is refused at
    once instead of blocking (a FIFO with no writer) or streaming forever (/dev/zero).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise _NotAFile("a folder, not a spec file")
        if not stat.S_ISREG(mode):
            raise _NotAFile("not a regular file (a FIFO, device or socket), not a spec file")
        chunks, size = [], 0
        while size <= MAX_SPEC_BYTES:
            chunk = os.read(fd, MAX_SPEC_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _NotAFile(Exception):
    pass


def _read_text(path: Path, shown: str) -> str:
    try:
        raw = _read_capped(path)
    except FileNotFoundError:
        raise SpecError([Problem(Location(shown), "", "no such file")]) from None
    except _NotAFile as err:
        raise SpecError([Problem(Location(shown), "", str(err))]) from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise SpecError([Problem(Location(shown), "", f"cannot read: {reason}")]) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(
            [Problem(Location(shown), "", f"over {MAX_SPEC_BYTES} bytes: a spec is at most {MAX_SPEC_BYTES}")]
        )
    if b"\0" in raw:
        raise SpecError([Problem(Location(shown), "", "binary file, not a YAML spec")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError([Problem(Location(shown), "", "not UTF-8 text, not a YAML spec")]) from None


def _deep_merge(base: dict, child: dict, base_lines: dict, path: tuple = ()) -> dict:
    """Mappings merge key by key, anything else in `child` replaces; `base_lines` loses what is replaced."""
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _deep_merge(base[key], value, base_lines, path + (key,))
        else:
            merged[key] = value
            prefix = path + (key,)
            for stale in [p for p in base_lines if p[: len(prefix)] == prefix]:
                del base_lines[stale]
    return merged


def _load_file(path: Path, shown: str, env: Mapping[str, str], chain: tuple[Path, ...]) -> tuple[dict, dict]:
    data, lines = _parse(_read_text(path, shown), shown, env)
    if data is None:
        raise SpecError(
            [Problem(Location(shown), "", "the file is empty: a spec is a YAML mapping (name:, role:, ...)")]
        )
    if not isinstance(data, dict):
        raise SpecError([Problem(Location(shown, 1), "", "a spec is a YAML mapping (name:, role:, ...)")])
    base_ref = data.pop("extends", None)
    if base_ref is None:
        return data, lines
    where = lines.get(("extends",), Location(shown))
    if not isinstance(base_ref, str) or not base_ref:
        raise SpecError([Problem(where, "extends", "expected the path of a base spec")])
    try:
        base_path = (path.parent / base_ref).resolve()
        found = base_path.exists()
    except (OSError, ValueError) as err:  # a name too long for the file system, a NUL in it
        reason = getattr(err, "strerror", None) or str(err)
        raise SpecError([Problem(where, "extends", f"base spec cannot be read: {reason}")]) from None
    if base_path in chain:
        cycle = " -> ".join(p.name for p in (*chain, base_path))
        raise SpecError([Problem(where, "extends", f"cycle: {cycle}")])
    if not found:
        raise SpecError([Problem(where, "extends", f"base spec {base_ref} not found (relative to {shown})")])
    base_shown = os.path.relpath(base_path) if not os.path.isabs(shown) else str(base_path)
    base_data, base_lines = _load_file(base_path, base_shown, env, (*chain, base_path))
    merged = _deep_merge(base_data, data, base_lines)
    return merged, {**base_lines, **{k: v for k, v in lines.items() if k != ("extends",)}}


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """`a.b=value` -> (("a", "b"), value parsed as YAML: 3 is an int, [1, 2] a list, empty is null)."""
    key, sep, raw = text.partition("=")
    parts = tuple(key.strip().split("."))
    if not sep or not all(parts):
        raise DfmError(f"--set {text}: expected dotted.key=value, e.g. --set instance.count=1")
    try:
        value, _ = _parse(raw, "--set", None)  # the shell has expanded variables already
    except SpecError as err:
        raise DfmError(f"--set {text}: {err.problems[0].message}") from None
    return parts, value


def _apply_override(data: dict, lines: dict, text: str) -> None:
    parts, value = parse_override(text)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise DfmError(f"--set {text}: {'.'.join(parts[: i + 1])} is not a mapping")
        node = child
    node[parts[-1]] = value
    for stale in [p for p in lines if p[: len(parts)] == parts]:
        del lines[stale]
    for i in range(1, len(parts) + 1):
        lines.setdefault(parts[:i], Location("--set"))
    lines[parts] = Location("--set")


def read_spec_data(
    source: str | os.PathLike | Mapping[str, Any], overrides: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[tuple, Location]]:
    """The merged, interpolated, overridden data of a spec file, and where each field came from. A mapping is
    taken as already-read data (no file: no lines, no `extends:` or `${VAR}`; relative paths from the current
    directory)."""
    if isinstance(source, Mapping):
        data, lines = copy.deepcopy(dict(source)), {}
    else:
        resolved = Path(source).resolve()
        data, lines = _load_file(resolved, str(source), os.environ if env is None else env, (resolved,))
    for text in overrides:
        _apply_override(data, lines, text)
    return data, lines
