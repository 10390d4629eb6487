"""Spec -> Plan: everything a job is, as one immutable value of typed fields. Pure: no I/O, no SageMaker import.

The dry run, the SageMaker backend and the local backend all read the same Plan, so they cannot disagree:
the SageMaker backend derives its estimator arguments and request from it, the local backend its processes.
A Plan round-trips through plain JSON data (`to_dict` / `from_dict`): a local run stores the plan it ran.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, TypeVar

from launcher.facts import catalog
from launcher.facts import contract
from launcher.facts import conventions
from launcher.plans import hosts
from launcher.plans import warm_start as warm
from launcher.facts import images
from launcher.facts import service_model
from launcher.spec import size_bytes

if TYPE_CHECKING:
    from launcher.spec import Spec


@dataclass(frozen=True)
class Channel:
    name: str  # SageMaker channel name: "train", "train-1", "eval", or the spec's name for EFS/FSx
    uri: str  # s3://... ; file://... or a local path; for EFS/FSx the directory path on the file system
    kind: str = "s3"  # "s3" | "efs" | "fsx"
    input_mode: str = "File"  # File | Pipe | FastFile
    distribution: str = "FullyReplicated"  # or "ShardedByS3Key" (S3 only)
    file_system_id: str | None = None  # EFS/FSx
    access_mode: str = "ro"  # EFS/FSx
    local_path: str | None = None  # where `--local` reads this channel from (spec `local:` or --channel)
    instance_groups: tuple[str, ...] | None = None  # the groups that get it (InstanceGroupNames); None: every host


@dataclass(frozen=True)
class Distribution:
    kind: str = "none"  # "none" | "parameter_server" | "horovod" | "multi_worker_mirrored"
    processes_per_host: int = 1
    mpi_options: str = ""


@dataclass(frozen=True)
class LocalOptions:
    """The spec's `local:` section, for `dfm launch --local` only."""

    run_dir: str = "runs"
    timeout_s: int | None = None
    master_grace_s: float = 60.0
    cores_per_host: int | None = None  # None: this machine's cores divided among the hosts
    memory_per_host: int | None = None  # bytes each simulated host's processes may hold together (None: no limit)


@dataclass(frozen=True)
class Recovery:
    """The spec's `recover:`: resubmissions after a capacity failure, while `dfm launch --wait` watches."""

    max_restarts: int = 3
    backoff_s: float = 60.0
    instance_types: tuple[str, ...] = ()  # the worker group moves along these, in order, after a capacity failure


@dataclass(frozen=True)
class Operations:
    """How the job survives and is watched: SageMaker's retry, dfm's recovery and stall watchdog, TensorBoard,
    MLflow."""

    retry_attempts: int | None = None  # RetryStrategy.MaximumRetryAttempts
    recovery: Recovery | None = None
    stall_timeout_s: int | None = None  # seconds without a metric line from the chief
    tensorboard_s3_uri: str | None = None  # TensorBoardOutputConfig.S3OutputPath
    mlflow: Mapping[str, str] | None = None  # MlflowConfig, as the request names its fields


@dataclass(frozen=True)
class Vpc:
    subnets: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    job_name: str  # base name + timestamp, <= 63 chars, SageMaker's pattern
    region: str
    role: str
    entry_point: str  # script file name, relative to source_dir
    source_dir: str  # absolute local folder (or an s3:// tarball) shipped as the source dir
    bundled: bool  # entry_point is one of dfm's bundled scripts
    # The hosts: one group of identical hosts, or workers then parameter servers (hosts.layout).
    instance_groups: tuple[hosts.InstanceGroup, ...]
    volume_gb: int
    max_run: int  # seconds
    distribution: Distribution
    input_mode: str  # the job's input mode: File | Pipe | FastFile
    channels: tuple[Channel, ...]
    hyperparameters: Mapping[str, Any]  # what the container sees: the spec's (plus derived ones) and model_dir
    environment: Mapping[str, str]
    output_path: str  # s3:// prefix; the job writes under <output_path>/<job_name>/, the source dir goes there too
    framework_version: str | None = None
    py_version: str | None = None
    image_uri: str | None = None  # set when the SDK cannot name the image itself
    checkpoint_s3_uri: str | None = None
    checkpoint_local_path: str | None = None  # container folder synced with checkpoint_s3_uri
    spot_max_wait: int | None = None  # seconds; set for managed spot training
    vpc: Vpc | None = None
    warm_pool_seconds: int = 0
    tags: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    cost: Mapping[str, Any] | None = None  # {"instance_hourly_usd", "max_hours", "max_usd", "spot", ...}
    local: LocalOptions = field(default_factory=LocalOptions)
    operations: Operations = field(default_factory=Operations)
    # Files added to the source dir's root as it is shipped (name -> text): a `features:` section too long
    # for a hyperparameter value. Both backends add them; the dry run lists them.
    source_files: Mapping[str, str] = field(default_factory=dict)
    # Where the first weights come from (spec `warm_start:`); resolved by the backend when named by a job or path.
    warm_start: warm.WarmStart | None = None

    @property
    def instance_type(self) -> str:
        """The training (first) group's instance type."""
        return self.instance_groups[0].instance_type

    @property
    def instance_count(self) -> int:
        """The training (first) group's host count."""
        return self.instance_groups[0].count

    @property
    def argv(self) -> tuple[str, ...]:
        """The script's argv exactly as the container renders it from the hyperparameters."""
        return tuple(conventions.render_argv(self.hyperparameters))

    def sharded_hosts(self) -> dict[str, int]:
        """channel name -> the hosts ShardedByS3Key deals its objects to, for every sharded channel that reaches
        at least 2 hosts (its instance groups', or every host)."""
        found = {}
        for channel in self.channels:
            if channel.distribution != "ShardedByS3Key":
                continue
            reached = sum(
                g.count
                for g in self.instance_groups
                if not channel.instance_groups or g.name in channel.instance_groups
            )
            if reached >= 2:
                found[channel.name] = reached
        return found

    @property
    def toolkit_cluster(self) -> bool:
        """True: SageMaker's TensorFlow toolkit sets the cluster up (TF_CONFIG and a ps per host, or mpirun), told
        by the sagemaker_*_enabled hyperparameters. False: parameter servers on their own group (two groups), where
        the script builds the cluster itself from resourceconfig.json and the toolkit is told no distribution."""
        return len(self.instance_groups) == 1

    @property
    def toolkit_distribution(self) -> str:
        """The distribution SageMaker's TensorFlow toolkit is told about."""
        return self.distribution.kind if self.toolkit_cluster else "none"

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain JSON data; `Plan.from_dict` gives it back, equal."""
        return to_data(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """The plan `to_dict` gave `data`; ValueError naming the first field that does not fit."""
        return from_data(cls, data)


# ------------------------------------------------------------------------------------ as plain data
Value = TypeVar("Value")


@functools.lru_cache(maxsize=None)
def _adapter(cls: type) -> Any:
    from pydantic import TypeAdapter  # the spec's schema library reads the dataclasses' own type hints

    return TypeAdapter(cls)


def to_data(value: Any) -> dict[str, Any]:
    """A frozen plan value (Plan, or one holding a Plan) as plain JSON data: dicts, lists, strings, numbers."""
    return _adapter(type(value)).dump_python(value, mode="json")


def from_data(cls: type[Value], data: Mapping[str, Any]) -> Value:
    """The `cls` value whose `to_data` is `data` (tuples and nested dataclasses typed again)."""
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or cls.__name__
        raise ValueError(f"not a stored {cls.__name__}: {where}: {first['msg']}") from None


# ------------------------------------------------------------------------------------------- building
JOB_TIMESTAMP = "%y%m%d-%H%M%S"  # every job kind's suffix; short enough for tuning's 32-character names


def job_timestamp(now: float | None = None) -> str:
    """`YYMMDD-HHMMSS` in UTC: the suffix of every job name dfm makes (training, tuning, prepare)."""
    return time.strftime(JOB_TIMESTAMP, time.gmtime(time.time() if now is None else now))


def _channel(spec: Spec, name: str, source: Any, *, training: bool) -> Channel:
    local = spec.local.channels.get(name)
    local_path = os.path.abspath(os.path.expanduser(local)) if local else None
    if isinstance(source, str):
        sharded = training and spec.data.s3_shard
        groups = hosts.channel_instance_groups("s3") if spec.ps_group is not None else None
        return Channel(
            name=name,
            uri=source,
            kind="s3",
            input_mode=spec.data.mode,
            distribution="ShardedByS3Key" if sharded else "FullyReplicated",
            local_path=local_path,
            instance_groups=tuple(groups) if groups else None,
        )
    return Channel(
        name=name,
        uri=source.directory_path,
        kind="efs" if source.type == "EFS" else "fsx",
        input_mode="File",  # file systems are mounted; the job's input mode is File when any is present
        file_system_id=source.file_system_id,
        access_mode=source.access_mode,
        local_path=local_path,
    )


def _channels(spec: Spec) -> list[Channel]:
    channels = []
    for found in conventions.channel_sources(spec):
        source = found.source
        if found.name == conventions.CHECKPOINT_CHANNEL and "access_mode" not in source.model_fields_set:
            source = source.model_copy(update={"access_mode": "rw"})  # checkpoints are written
        channels.append(_channel(spec, found.name, source, training=found.training))
    return channels


def _has_gpu(instance_type: str) -> bool:
    """From the catalogue; for a type it lacks, SageMaker's GPU families are ml.p* and ml.g*."""
    info = catalog.instance(instance_type)
    return bool(info.gpus) if info is not None else instance_type.split(".")[1][:1] in ("p", "g")


def _max_hyperparameter_value() -> int:
    try:
        return service_model.limit("HyperParameterValue", "max") or 2500
    except service_model.ModelUnavailable:
        return 2500  # botocore 1.44's value


def instance_groups(spec: Spec) -> tuple[hosts.InstanceGroup, ...]:
    """The job's hosts: workers then the parameter servers' own group, or one group of identical hosts."""
    ps = spec.ps_group
    if ps is None:
        return hosts.one_group(spec.instance.type, spec.instance.count)
    return hosts.layout(spec.instance.type, spec.instance.count, ps.type, ps.count)


def build_plan(spec: Spec, *, job_name: str | None = None, warnings: Iterable[str] = ()) -> Plan:
    """Turn a validated Spec into a Plan. `job_name` fixes the timestamped name (tests, resubmits).

    Pure apart from the clock (the default job name) and the path of the bundled source dir. Run the
    rules first: build_plan assumes a spec they accept, and stores the rendered warning lines the
    caller got from them (`warnings`) rather than running the rules again.
    """
    job_name = job_name or f"{spec.name}-{job_timestamp()}"
    kind = spec.distribution_kind
    output_path = spec.output.rstrip("/")
    bundled = contract.BUNDLED_ENTRY_POINTS.get(spec.entry_point)

    if bundled is not None:
        entry_point, source_dir = bundled.script, contract.bundled_source_dir()
    elif spec.source_dir is not None:
        entry_point = spec.entry_point
        source_dir = (
            spec.source_dir if spec.source_dir.startswith("s3://") else spec.resolve_path("source_dir", spec.source_dir)
        )
    else:
        script = spec.resolve_path("entry_point", spec.entry_point)
        entry_point, source_dir = os.path.basename(script), os.path.dirname(script)

    channels = _channels(spec)
    job_input_mode = "File" if any(c.kind != "s3" for c in channels) else spec.data.mode
    model_dir = conventions.model_dir(output_path, job_name, distribution=kind, bundled=bundled is not None)

    checkpoint_s3_uri = checkpoint_local_path = checkpoint_dir = None
    config = spec.checkpoint_config
    if config is not None and config.file_system is not None:
        checkpoint_dir = f"{conventions.container_channel_dir(conventions.CHECKPOINT_CHANNEL)}/{job_name}"
    elif config is not None:
        checkpoint_s3_uri = f"{output_path}/{job_name}/checkpoints" if config.s3 == "auto" else config.s3
        checkpoint_local_path = config.local_path

    groups = instance_groups(spec)
    hyperparameters = dict(spec.hyperparameters)
    if spec.ps_group is not None and bundled is not None:
        hyperparameters.update(hosts.script_hyperparameters(spec.ps_group.per_host))
    if bundled is not None and config is not None:  # where the script writes what SageMaker syncs or mounts
        hyperparameters["checkpoint_dir"] = checkpoint_dir or checkpoint_local_path
    if bundled is not None and spec.prepare is not None and spec.prepare.balance is not None:
        # The export undoes the negative downsampling dfm data prepare applied (calibrated probabilities).
        hyperparameters["negative_rate"] = spec.prepare.balance.negative_rate
    source_files: dict[str, str] = {}
    if spec.features is not None:
        hyperparameters["features"], source_files = contract.features_delivery(
            spec.features, _max_hyperparameter_value()
        )
    warm_start = (
        warm.from_spec(
            spec.warm_start.source,
            spec.warm_start.restore,
            spec.warm_start.steps,
            None
            if spec.warm_start.source.startswith("s3://")
            else spec.resolve_path("warm_start", spec.warm_start.source),
        )
        if (spec.warm_start is not None)
        else None
    )
    if bundled is not None and warm_start is not None:
        hyperparameters.update(warm.script_hyperparameters(warm_start))
    # What the container sees: the SDK adds model_dir to the hyperparameters of every TensorFlow job.
    hyperparameters["model_dir"] = model_dir

    framework_version = spec.framework.version if spec.framework else None
    py_version = spec.framework.python if spec.framework else None
    image_uri = spec.image_uri
    image = images.find(spec.framework.version) if spec.framework is not None and spec.image_uri is None else None
    if image is not None:
        py_version = py_version or image.python
        if not image.sdk_v2:  # SDK v2 cannot resolve it: dfm writes the DLC URI; the version still informs the SDK
            gpu = any(_has_gpu(g.instance_type) for g in groups)
            image_uri = images.image_uri(image, spec.region, "gpu" if gpu else "cpu")
            framework_version = image.version

    mpi_options = spec.distribution.horovod.mpi_options if kind == "horovod" else ""
    tensorboard_s3_uri = _tensorboard_uri(spec.tensorboard, output_path, job_name)
    if bundled is not None and tensorboard_s3_uri is not None:  # where the chief writes its summaries
        hyperparameters["tensorboard_dir"] = conventions.TENSORBOARD_LOCAL_PATH
    local = LocalOptions(
        run_dir=os.path.abspath(os.path.expanduser(spec.local.run_dir)),
        timeout_s=spec.local.timeout_s,
        master_grace_s=spec.local.master_grace_s,
        cores_per_host=spec.local.cores_per_host,
        memory_per_host=size_bytes(spec.local.memory_per_host) if spec.local.memory_per_host else None,
    )
    plan = Plan(
        job_name=job_name,
        region=spec.region,
        role=spec.role,
        entry_point=entry_point,
        source_dir=source_dir,
        bundled=bundled is not None,
        instance_groups=groups,
        volume_gb=spec.instance.volume_gb,
        max_run=spec.max_run,
        distribution=Distribution(kind=kind, processes_per_host=spec.processes_per_host, mpi_options=mpi_options),
        input_mode=job_input_mode,
        channels=tuple(channels),
        hyperparameters=hyperparameters,
        environment=dict(spec.environment),
        output_path=output_path,
        framework_version=framework_version,
        py_version=py_version,
        image_uri=image_uri,
        checkpoint_s3_uri=checkpoint_s3_uri,
        checkpoint_local_path=checkpoint_local_path,
        spot_max_wait=spec.spot.max_wait if spec.spot is not None else None,
        vpc=Vpc(tuple(spec.vpc.subnets), tuple(spec.vpc.security_group_ids)) if spec.vpc is not None else None,
        warm_pool_seconds=spec.warm_pool_seconds or 0,
        tags=dict(spec.tags),
        warnings=tuple(warnings),
        cost=hosts.costs(groups, spec.max_run, spec.warm_pool_seconds, spot=spec.spot is not None),
        local=local,
        operations=operations(spec, tensorboard_s3_uri),
        source_files=source_files,
        warm_start=warm_start,
    )
    if warm_start is not None and warm_start.resolved:
        name = conventions.WARM_START_CHANNEL if warm_start.kind == warm.CHECKPOINT else conventions.MODEL_CHANNEL
        local = spec.local.channels.get(name)
        plan = with_warm_start(
            plan, warm_start.kind, warm_start.uri, os.path.abspath(os.path.expanduser(local)) if local else None
        )
    return plan


def with_warm_start(plan: Plan, kind: str, uri: str, local_path: str | None = None) -> Plan:
    """`plan` with its warm-start source resolved: a checkpoint (the `warmstart` channel) or a model artifact (the
    `model` channel, which the SageMaker backend sends as the SDK's model_uri). File mode and FullyReplicated: every
    host gets the whole source. `local_path`: what `--local` links into every host's channel folder."""
    name = conventions.WARM_START_CHANNEL if kind == warm.CHECKPOINT else conventions.MODEL_CHANNEL
    channel = Channel(name=name, uri=uri, kind="s3", input_mode="File", local_path=local_path)
    channels = tuple(c for c in plan.channels if c.name != name) + (channel,)
    return dataclasses.replace(
        plan, channels=channels, warm_start=dataclasses.replace(plan.warm_start, kind=kind, uri=uri)
    )


def _tensorboard_uri(setting: Any, output_path: str, job_name: str) -> str | None:
    if setting is False:
        return None
    return f"{output_path}/{job_name}/tensorboard" if setting in (True, "auto") else setting


def operations(spec: Spec, tensorboard_s3_uri: str | None) -> Operations:
    recover = spec.recover
    mlflow = None
    if spec.mlflow is not None:
        mlflow = {"MlflowResourceArn": spec.mlflow.tracking_server_arn}
        if spec.mlflow.experiment:
            mlflow["MlflowExperimentName"] = spec.mlflow.experiment
        if spec.mlflow.run:
            mlflow["MlflowRunName"] = spec.mlflow.run
    return Operations(
        retry_attempts=spec.retry.max_attempts if spec.retry is not None else None,
        recovery=Recovery(recover.max_restarts, float(recover.backoff_s), tuple(recover.instance_types))
        if recover is not None
        else None,
        stall_timeout_s=spec.stall_timeout,
        tensorboard_s3_uri=tensorboard_s3_uri,
        mlflow=mlflow,
    )
