"""The job spec: its schema (pydantic v2) and its loader.

Loading is YAML (safe, line-tracking, no aliases, no custom tags) -> `${ENV}` interpolation per file ->
`extends:` (deep merge onto the base, relative path, cycles refused) -> `--set dotted.key=value`
overrides -> schema validation. Every problem is reported as `file:line: field: message`.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Union

import yaml
from annotated_types import MinLen
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StringConstraints,
    Tag,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

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


# ---------------------------------------------------------------------------------------------- schema
def _custom(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)


def _pattern(regex: str, kind: str, example: str):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise _custom(kind, f"'{value}' is not {example}")
        return value

    return AfterValidator(check)


_S3 = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?")
S3Uri = Annotated[str, _pattern(_S3.pattern, "s3_uri", "an S3 URI like s3://bucket/prefix/")]


def _s3_or_auto(value: str) -> str:
    if value != "auto" and not _S3.fullmatch(value):
        raise _custom("s3_uri", f"'{value}' is neither auto nor an S3 URI like s3://bucket/prefix/")
    return value


S3OrAuto = Annotated[str, AfterValidator(_s3_or_auto)]
RoleArn = Annotated[
    str,
    _pattern(r"arn:aws[a-z\-]*:iam::\d{12}:role/\S+", "role_arn", "an IAM role ARN like arn:aws:iam::123456789012:role/Name"),
]
Region = Annotated[str, _pattern(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d", "region", "an AWS region like us-east-1")]
InstanceTypeName = Annotated[
    str, _pattern(r"ml\.[a-z0-9\-]+\.[a-z0-9]+", "instance_type", "a SageMaker instance type like ml.c5.18xlarge")
]
FileSystemId = Annotated[str, _pattern(r"fs-[0-9a-f]{8,17}", "file_system_id", "a file system id like fs-0123456789abcdef0")]
SubnetId = Annotated[str, _pattern(r"subnet-[0-9a-f]{8,17}", "subnet", "a subnet id like subnet-0123456789abcdef0")]
SecurityGroupId = Annotated[str, _pattern(r"sg-[0-9a-f]{8,17}", "security_group", "a security group id like sg-0123456789abcdef0")]
ChannelName = Annotated[
    str, _pattern(r"[A-Za-z0-9.\-_]{1,64}", "channel_name", "a channel name (letters, digits, . - _; at most 64)")
]
EnvName = Annotated[str, _pattern(r"[A-Za-z_][A-Za-z0-9_]{0,511}", "env_name", "an environment variable name")]


def _shape(value: Any) -> str | None:
    if isinstance(value, bool):
        return "~bool"
    if isinstance(value, str):
        return "~text"
    if isinstance(value, Mapping):
        return "~mapping"
    if isinstance(value, list):
        return "~list"
    return None


def _by_shape(expected: str) -> Discriminator:
    """A union chosen by the YAML shape of the value, so errors come from the one branch meant."""
    return Discriminator(_shape, custom_error_type="wrong_shape", custom_error_message=f"expected {expected}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Framework(_Strict):
    """The SageMaker TensorFlow training image to use."""

    version: str = Field(description='TensorFlow version, e.g. "2.14" or "2.14.1" (quote it in YAML)')
    python: str | None = Field(None, description="e.g. py310; default: the one the SDK has for that version")


class Instance(_Strict):
    type: InstanceTypeName = Field(description="e.g. ml.c5.18xlarge")
    count: int = Field(1, ge=1, le=1000, description="number of hosts")
    volume_gb: int = Field(30, ge=1, le=16384, description="EBS volume per host (File mode downloads data here)")


class Horovod(_Strict):
    processes_per_host: int = Field(1, ge=1, description="MPI ranks per host: GPUs per host on GPU instances")
    mpi_options: str = Field("", description="extra mpirun options (SDK custom_mpi_options)")


class HorovodDistribution(_Strict):
    horovod: Horovod


DistributionName = Literal["parameter_server", "multi_worker_mirrored", "horovod", "none"]
Distribution = Annotated[
    Union[Annotated[DistributionName, Tag("~text")], Annotated[HorovodDistribution, Tag("~mapping")]],
    _by_shape("parameter_server, multi_worker_mirrored, horovod, none, or {horovod: {processes_per_host: N}}"),
]


class FileSystem(_Strict):
    """An EFS or FSx for Lustre directory mounted as a channel (needs `vpc`)."""

    file_system_id: FileSystemId
    type: Literal["EFS", "FSxLustre"] = "EFS"
    directory_path: Annotated[str, _pattern(r"/.*", "absolute_path", "an absolute path (starting with /)")] = Field(
        description="absolute path on the file system (FSx: /<mount name>/...)"
    )
    access_mode: Literal["ro", "rw"] = "ro"


Source = Annotated[
    Union[Annotated[S3Uri, Tag("~text")], Annotated[FileSystem, Tag("~mapping")]],
    _by_shape("an S3 URI or a file system {file_system_id, directory_path}"),
]
TrainSource = Annotated[
    Union[
        Annotated[S3Uri, Tag("~text")],
        Annotated[FileSystem, Tag("~mapping")],
        Annotated[list[Source], MinLen(1), Tag("~list")],
    ],
    _by_shape("an S3 URI, a file system, or a list of them (one channel each: train, train-1, ...)"),
]


class Data(_Strict):
    mode: Literal["File", "Pipe", "FastFile"] = Field("File", description="input mode of the S3 channels")
    s3_shard: bool = Field(False, description="ShardedByS3Key on the training channels (objects split across hosts)")
    train: TrainSource
    eval: Source | None = None
    channels: dict[ChannelName, Source] = Field(default_factory=dict, description="more named channels")


class Checkpoints(_Strict):
    s3: S3OrAuto | None = Field(
        None, description="S3 prefix synced with local_path; auto = <output>/<job name>/checkpoints"
    )
    file_system: FileSystem | None = Field(None, description="EFS/FSx directory mounted as channel 'checkpoints'")
    local_path: Annotated[str, _pattern(r"/.*", "absolute_path", "an absolute path (starting with /)")] = Field(
        "/opt/ml/checkpoints", description="container path synced to s3"
    )

    @model_validator(mode="after")
    def _one_location(self) -> Checkpoints:
        if self.s3 is not None and self.file_system is not None:
            raise _custom("checkpoint_location", "give either s3 or file_system, not both")
        return self

    @property
    def s3_uri_or_auto(self) -> str | None:
        return self.s3 if self.s3 is not None else (None if self.file_system else "auto")


CheckpointsField = Annotated[
    Union[
        Annotated[bool, Tag("~bool")],
        Annotated[S3OrAuto, Tag("~text")],
        Annotated[Checkpoints, Tag("~mapping")],
    ],
    _by_shape("false, auto, an S3 URI, or {s3: ..., local_path: ...} / {file_system: {...}}"),
]


class Spot(_Strict):
    max_wait: int = Field(ge=1, le=2419200, description="seconds to wait for spot capacity plus run; >= max_run")


class Vpc(_Strict):
    subnets: list[SubnetId] = Field(min_length=1, max_length=16)
    security_group_ids: list[SecurityGroupId] = Field(min_length=1, max_length=5)


class Local(_Strict):
    """How `dfm launch --local` runs this spec on this machine (paths relative to the current directory)."""

    channels: dict[ChannelName, str] = Field(default_factory=dict, description="channel -> local folder")
    run_dir: str = Field("runs", description="where local runs write their $SAGEMAKER_BASE_DIR trees")
    timeout_s: int | None = Field(None, ge=1, description="stop the local run after this many seconds")


_SCALAR = (bool, int, float, str)


def _check_hyperparameter(value: Any) -> Any:
    if isinstance(value, _SCALAR) or (isinstance(value, list) and all(isinstance(v, _SCALAR) for v in value)):
        return value
    if value is None:
        raise _custom("hyperparameter", "null would reach the script as an empty string: give a value or drop it")
    raise _custom("hyperparameter", "expected a number, string, boolean or list of them (mappings arrive as k=v,...)")


HyperparameterValue = Annotated[
    Any,
    AfterValidator(_check_hyperparameter),
    WithJsonSchema({"anyOf": [{"type": ["number", "string", "boolean"]}, {"type": "array"}]}),
]


def _check_env_value(value: Any) -> str:
    if isinstance(value, bool):
        raise _custom("env_value", "quote it: environment values are strings ('true' or 'True'?)")
    if isinstance(value, (int, float, str)):
        return str(value)
    raise _custom("env_value", "expected a string")


EnvValue = Annotated[Any, AfterValidator(_check_env_value), WithJsonSchema({"type": ["string", "number"]})]


class Spec(_Strict):
    """A dfm job spec. See docs/readme/spec.md."""

    extends: str | None = Field(None, description="a base spec (path relative to this file) to deep-merge onto")
    name: str = Field(min_length=1, description="base job name; dfm appends a timestamp (at most 39 characters)")
    role: RoleArn = Field(description="the SageMaker execution role ARN")
    region: Region
    entry_point: str = Field(
        min_length=1, description="deepfm-ps | deepfm-horovod | deepfm-mirrored, or your script (relative to source_dir)"
    )
    source_dir: str | None = Field(None, description="folder shipped with your script (relative to this file)")
    framework: Framework | None = None
    image_uri: str | None = Field(None, min_length=1, description="an explicit training image instead of framework")
    instance: Instance
    distribution: Distribution = "none"
    data: Data
    output: S3Uri = Field(description="S3 prefix; each job writes under <output>/<job name>/")
    checkpoints: CheckpointsField = "auto"
    spot: Spot | None = None
    max_run: int = Field(86400, ge=1, le=2419200, description="seconds before SageMaker stops the job")
    hyperparameters: dict[str, HyperparameterValue] = Field(default_factory=dict)
    vpc: Vpc | None = None
    warm_pool_seconds: int = Field(0, ge=0, le=3600, description="keep the hosts warm this long after the job")
    environment: dict[EnvName, EnvValue] = Field(default_factory=dict)
    tags: dict[Annotated[str, StringConstraints(min_length=1, max_length=128)], Annotated[str, StringConstraints(max_length=256)]] = Field(
        default_factory=dict, max_length=50
    )
    local: Local = Field(default_factory=Local)

    _path: str = PrivateAttr("<spec>")
    _lines: dict[tuple, Location] = PrivateAttr(default_factory=dict)

    # -- derived views used by rules and plan --------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    @property
    def distribution_kind(self) -> str:
        return "horovod" if isinstance(self.distribution, HorovodDistribution) else self.distribution

    @property
    def processes_per_host(self) -> int:
        return self.distribution.horovod.processes_per_host if isinstance(self.distribution, HorovodDistribution) else 1

    @property
    def train_sources(self) -> list[str | FileSystem]:
        return list(self.data.train) if isinstance(self.data.train, list) else [self.data.train]

    @property
    def checkpoint_config(self) -> Checkpoints | None:
        """None when checkpoints are off; `s3: auto` by default."""
        if self.checkpoints is False:
            return None
        if self.checkpoints is True:
            return Checkpoints(s3="auto")
        if isinstance(self.checkpoints, str):
            return Checkpoints(s3=self.checkpoints)
        if self.checkpoints.s3 is None and self.checkpoints.file_system is None:
            return self.checkpoints.model_copy(update={"s3": "auto"})
        return self.checkpoints

    def where(self, field: str) -> Location:
        """The location of `field` (dotted), or of its nearest ancestor present in the files."""
        path = tuple(int(p) if p.isdigit() else p for p in field.split(".")) if field else ()
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return Location(self._path, 1)

    def resolve_path(self, field: str, value: str) -> str:
        """A relative path in the spec is relative to the file that set it (the current directory for --set)."""
        where = self.where(field)
        base = Path.cwd() if where.file == "--set" else Path(where.file).resolve().parent
        return str((base / value).resolve())


def json_schema() -> dict[str, Any]:
    schema = Spec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "dfm job spec", **schema}


# ---------------------------------------------------------------------------------------------- YAML
_ENV = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ONLY_ENV = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")


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
            Problem(Location(file, line), field, f"environment variable {name} is not set: export it, or write ${{{name}:-default}}")
        )

    return _ENV.sub(replace, text)


class _Problem(Exception):
    def __init__(self, problem: Problem):
        self.problem = problem


class _Builder:
    """Turns a composed YAML node tree into plain Python values plus a map: path -> Location."""

    def __init__(self, loader: _Loader, file: str, env: Mapping[str, str]):
        self.loader, self.file, self.env = loader, file, env
        self.lines: dict[tuple, Location] = {}

    def build(self, node: yaml.Node, path: tuple) -> Any:
        where = Location(self.file, node.start_mark.line + 1)
        field = ".".join(str(p) for p in path)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Problem(Problem(where, field, "merge keys (<<) are not allowed: use extends:"))
                key = self.scalar(key_node, path)
                if not isinstance(key, str):
                    raise _Problem(Problem(Location(self.file, key_node.start_mark.line + 1), field, f"key {key!r} is not a string: quote it"))
                if key in out:
                    raise _Problem(Problem(Location(self.file, key_node.start_mark.line + 1), ".".join(map(str, path + (key,))), "duplicate key"))
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
        if isinstance(value, str) and "$" in value:
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


def _parse(text: str, file: str, env: Mapping[str, str]) -> tuple[Any, dict[tuple, Location]]:
    loader = _Loader(text)
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
    except yaml.YAMLError as err:  # ReaderError: control characters
        raise SpecError([Problem(Location(file), "", f"not a YAML text file: {err}")]) from None
    except RecursionError:
        raise SpecError([Problem(Location(file), "", "nesting too deep")]) from None
    finally:
        loader.dispose()


def _read_text(path: Path, shown: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError([Problem(Location(shown), "", "no such file")]) from None
    except OSError as err:
        raise SpecError([Problem(Location(shown), "", f"cannot read: {err.strerror}")]) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError([Problem(Location(shown), "", f"{len(raw)} bytes: a spec is at most {MAX_SPEC_BYTES}")])
    if b"\0" in raw:
        raise SpecError([Problem(Location(shown), "", "binary file, not a YAML spec")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError([Problem(Location(shown), "", "not UTF-8 text, not a YAML spec")]) from None


def _deep_merge(base: dict, child: dict, base_lines: dict, child_lines: dict, path: tuple = ()) -> dict:
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _deep_merge(base[key], value, base_lines, child_lines, path + (key,))
        else:
            merged[key] = value
            prefix = path + (key,)
            for stale in [p for p in base_lines if p[: len(prefix)] == prefix]:
                del base_lines[stale]
    return merged


def _load_file(path: Path, shown: str, env: Mapping[str, str], chain: tuple[Path, ...]) -> tuple[dict, dict]:
    data, lines = _parse(_read_text(path, shown), shown, env)
    if data is None:
        raise SpecError([Problem(Location(shown), "", "the file is empty: a spec is a YAML mapping (name:, role:, ...)")])
    if not isinstance(data, dict):
        raise SpecError([Problem(Location(shown, 1), "", "a spec is a YAML mapping (name:, role:, ...)")])
    base_ref = data.pop("extends", None)
    if base_ref is None:
        return data, lines
    where = lines.get(("extends",), Location(shown))
    if not isinstance(base_ref, str) or not base_ref:
        raise SpecError([Problem(where, "extends", "expected the path of a base spec")])
    base_path = (path.parent / base_ref).resolve()
    if base_path in chain:
        cycle = " -> ".join(p.name for p in (*chain, base_path))
        raise SpecError([Problem(where, "extends", f"cycle: {cycle}")])
    if not base_path.is_file():
        raise SpecError([Problem(where, "extends", f"base spec {base_ref} not found (relative to {shown})")])
    base_shown = os.path.relpath(base_path) if not os.path.isabs(shown) else str(base_path)
    base_data, base_lines = _load_file(base_path, base_shown, env, (*chain, base_path))
    merged = _deep_merge(base_data, data, base_lines, lines)
    return merged, {**base_lines, **{k: v for k, v in lines.items() if k != ("extends",)}}


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """`a.b=value` -> (("a", "b"), value parsed as YAML: 3 is an int, [1, 2] a list, empty is null)."""
    key, sep, raw = text.partition("=")
    parts = tuple(key.strip().split("."))
    if not sep or not all(parts):
        raise DfmError(f"--set {text}: expected dotted.key=value, e.g. --set instance.count=1")
    try:
        value, _ = _parse(raw, "--set", {})
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


def _schema_problems(err: ValidationError, lines: dict, shown: str) -> list[Problem]:
    problems = []
    schema = Spec.model_json_schema()
    for item in err.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("~")))
        field = ".".join(str(p) for p in loc)
        where = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), Location(shown, 1))
        kind = item["type"]
        if kind == "extra_forbidden":
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
        problems.append(Problem(where, field, message))
    return sorted(problems, key=lambda p: (p.location.file, p.location.line or 0))


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


def load_spec(path: str | os.PathLike, overrides: Iterable[str] = (), env: Mapping[str, str] | None = None) -> Spec:
    """Read, merge, override and validate a spec file. Raises SpecError (exit 2) listing every problem."""
    shown = str(path)
    data, lines = _load_file(Path(path).resolve(), shown, os.environ if env is None else env, (Path(path).resolve(),))
    for text in overrides:
        _apply_override(data, lines, text)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_schema_problems(err, lines, shown)) from None
    spec._path = shown
    spec._lines = lines
    return spec
