"""The job spec schema (pydantic v2) and `load_spec`.

`launcher.spec.file` reads the file (safe YAML, `${ENV}`, `extends:`, `--set`) with line numbers; this
module validates the result against the schema, reporting every problem as `file:line: field: message`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Union

from annotated_types import MinLen
from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    StringConstraints,
    Tag,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from launcher.facts.conventions import CONTAINER_CHECKPOINT_DIR
from launcher.spec.distribution_spec import (
    Distribution,
    Horovod,
    HorovodDistribution,
    ParameterServer,
    ParameterServerDistribution,
    PsGroup,
)
from launcher.spec.spec_errors import schema_problems
from launcher.spec.operations_spec import Mlflow, Recover, Retry, TensorBoard
from launcher.spec.prepare_spec import Prepare
from launcher.spec.probe_spec import Probe
from launcher.spec.tuning_spec import Tune
from launcher.spec.warm_start_spec import WarmStart
from launcher.spec.value_types import (
    ChannelName,
    EnvName,
    FileSystemId,
    InstanceTypeName,
    MemorySize,
    Region,
    RoleArn,
    S3OrAuto,
    S3Uri,
    SecurityGroupId,
    SubnetId,
    _by_shape,
    _custom,
    _pattern,
    _Strict,
    size_bytes,
)
from launcher.spec.file import Location, Problem, SpecError, did_you_mean, parse_override, read_spec_data

__all__ = [
    "Spec",
    "SpecError",
    "Location",
    "Problem",
    "load_spec",
    "json_schema",
    "did_you_mean",
    "parse_override",
    "size_bytes",
]


# ---------------------------------------------------------------------------------------------- schema
class Framework(_Strict):
    """The SageMaker TensorFlow training image to use."""

    version: str = Field(description='TensorFlow version, e.g. "2.14" or "2.14.1" (quote it in YAML)')
    python: str | None = Field(None, description="e.g. py310; default: the one the SDK has for that version")


class Instance(_Strict):
    type: InstanceTypeName = Field(description="e.g. ml.c5.18xlarge")
    count: int = Field(1, ge=1, le=1000, description="number of hosts")
    volume_gb: int = Field(30, ge=1, le=16384, description="EBS volume per host (File mode downloads data here)")


ImageFeature = Literal["horovod", "pipe_mode"]


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
        CONTAINER_CHECKPOINT_DIR, description="container path synced to s3"
    )

    @model_validator(mode="after")
    def _one_location(self) -> Checkpoints:
        if self.s3 is not None and self.file_system is not None:
            raise _custom("checkpoint_location", "give either s3 or file_system, not both")
        return self


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
    master_grace_s: float = Field(
        60,
        gt=0,
        description="fail the run when another host's script is still running this long after the master's ended",
    )
    cores_per_host: int | None = Field(
        None,
        ge=1,
        description="cores each simulated host owns (its processes run only on them; its SM_NUM_CPUS); "
        "default: this machine's cores divided among the hosts",
    )
    memory_per_host: MemorySize | None = Field(
        None,
        description="memory each simulated host's processes may hold together, as an instance's memory "
        "(e.g. 6GiB, 512MiB, 8GB); a host over it is killed and fails the run. Default: no limit",
    )


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
    """A dfm job spec. See docs/spec.md."""

    extends: str | None = Field(None, description="a base spec (path relative to this file) to deep-merge onto")
    name: str = Field(min_length=1, description="base job name; dfm appends a timestamp (at most 49 characters)")
    role: RoleArn = Field(description="the SageMaker execution role ARN")
    region: Region
    entry_point: str = Field(
        min_length=1,
        description="deepfm-ps | deepfm-horovod | deepfm-mirrored, or your script (relative to source_dir)",
    )
    source_dir: str | None = Field(None, description="folder shipped with your script (relative to this file)")
    framework: Framework | None = None
    image_uri: str | None = Field(None, min_length=1, description="an explicit training image instead of framework")
    image_provides: list[ImageFeature] | None = Field(
        None,
        description="with image_uri: what that image holds (horovod, pipe_mode), so dfm can check the job against it",
    )
    instance: Instance
    distribution: Distribution = "none"
    data: Data
    output: S3Uri = Field(description="S3 prefix; each job writes under <output>/<job name>/")
    checkpoints: CheckpointsField = "auto"
    spot: Spot | None = None
    max_run: int = Field(86400, ge=1, le=2419200, description="seconds before SageMaker stops the job")
    hyperparameters: dict[str, HyperparameterValue] = Field(default_factory=dict)
    features: dict[str, Any] | None = Field(
        None,
        description="raw features for the bundled DeepFM (format, label, columns, numeric, categorical, multi_hot, "
        "bad_rows)",
    )
    vpc: Vpc | None = None
    warm_pool_seconds: int = Field(
        0,
        ge=0,
        description="keep the hosts warm this long after the job (at most the API's KeepAlivePeriodInSeconds maximum)",
    )
    environment: dict[EnvName, EnvValue] = Field(default_factory=dict)
    tags: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=128)],
        Annotated[str, StringConstraints(max_length=256)],
    ] = Field(default_factory=dict, max_length=50)
    retry: Retry | None = Field(
        None, description="SageMaker retries a job that failed with an internal error (RetryStrategy)"
    )
    recover: Recover | None = Field(
        None, description="dfm launch --wait resubmits a job that lost its capacity, resuming from its checkpoints"
    )
    stall_timeout: int | None = Field(
        None,
        ge=1,
        le=2419200,
        description="seconds without a metric line from the chief before the job is stopped as stalled",
    )
    tensorboard: TensorBoard = Field(
        False, description="true/auto (<output>/<job>/tensorboard) or an S3 URI: the scripts' summaries synced there"
    )
    mlflow: Mlflow | None = Field(
        None, description="SageMaker managed MLflow tracking (MlflowConfig; SageMaker side only)"
    )
    local: Local = Field(default_factory=Local)
    warm_start: WarmStart | None = Field(
        None, description="start from an earlier job's checkpoint or model (dfm launch --warm-start-from)"
    )
    tune: Tune | None = Field(
        None, description="automatic model tuning over this job (dfm tune); ignored by dfm launch"
    )
    prepare: Prepare | None = Field(None, description="dfm data prepare: click logs -> this job's data on Spark")
    probe: Probe | None = Field(None, description="dfm probe: candidate setups to measure; ignored by dfm launch")

    @field_validator("distribution")
    @classmethod
    def _distribution_in_full(cls, value: Any) -> Any:
        """`horovod` and `parameter_server` written as a word become their mappings with the defaults, so
        everything after the schema reads one form (`spec.distribution.horovod.processes_per_host`)."""
        if value == "horovod":
            return HorovodDistribution(horovod=Horovod())
        if value == "parameter_server":
            return ParameterServerDistribution(parameter_server=ParameterServer())
        return value

    _path: str = PrivateAttr("<spec>")
    _lines: dict[tuple, Location] = PrivateAttr(default_factory=dict)

    # -- derived views used by rules and plan --------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    @property
    def distribution_kind(self) -> str:
        if isinstance(self.distribution, HorovodDistribution):
            return "horovod"
        if isinstance(self.distribution, ParameterServerDistribution):
            return "parameter_server"
        return self.distribution

    @property
    def ps_group(self) -> PsGroup | None:
        """The parameter servers' own instance group, when the job is a heterogeneous cluster."""
        return (
            self.distribution.parameter_server.ps
            if isinstance(self.distribution, ParameterServerDistribution)
            else None
        )

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

    @property
    def may_restore(self) -> bool:
        """Whether the training processes may restore a checkpoint: the job keeps checkpoints (a restart resumes
        from them) or warm-starts."""
        return self.checkpoint_config is not None or self.warm_start is not None

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


@functools.cache
def json_schema() -> dict[str, Any]:
    schema = Spec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": "dfm job spec"}


def load_spec(
    source: str | os.PathLike | Mapping[str, Any], overrides: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> Spec:
    """Read, merge, override and validate a spec file (or a mapping of spec data: tests, programs). Raises
    SpecError (exit 2) listing every problem."""
    data, lines = read_spec_data(source, overrides, env)
    path = "<spec>" if isinstance(source, Mapping) else str(source)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(schema_problems(err, lines, path, json_schema())) from None
    spec._path = path
    spec._lines = lines
    return spec
