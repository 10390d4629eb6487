"""Spec -> Plan: everything a job is, as one immutable value. Pure: no I/O, no SageMaker import.

The dry run, the SageMaker backend and the local backend all read the same Plan, so they cannot disagree.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from launcher import catalog, contract, images


@dataclass(frozen=True)
class Channel:
    name: str  # SageMaker channel name: "train", "train-1", "eval", or the spec's name for EFS/FSx
    uri: str  # s3://... ; file://... or a local path; for EFS/FSx the directory path on the file system
    kind: str = "s3"  # "s3" | "file" | "efs" | "fsx"
    input_mode: str = "File"  # File | Pipe | FastFile
    distribution: str = "FullyReplicated"  # or "ShardedByS3Key" (S3 only)
    file_system_id: str | None = None  # EFS/FSx
    access_mode: str = "ro"  # EFS/FSx
    local_path: str | None = None  # where `--local` reads this channel from (spec `local:` or --channel)

    @property
    def is_training(self) -> bool:
        return self.name == "train" or self.name.startswith("train-")


@dataclass(frozen=True)
class Distribution:
    kind: str = "none"  # "none" | "parameter_server" | "horovod" | "multi_worker_mirrored"
    processes_per_host: int = 1
    mpi_options: str = ""


@dataclass(frozen=True)
class LocalOptions:
    """The spec's `local:` section, for `dfm launch --local` only."""

    channels: Mapping[str, str] = field(default_factory=dict)  # channel -> local folder (absolute)
    run_dir: str = "runs"
    timeout_s: int | None = None
    master_grace_s: float = 60.0


@dataclass(frozen=True)
class Plan:
    spec_path: str
    job_name: str  # base name + timestamp, <= 63 chars, SageMaker's pattern
    region: str
    role: str
    entry_point: str  # script file name, relative to source_dir
    source_dir: str  # absolute local folder shipped as the source dir
    instance_type: str
    instance_count: int
    distribution: Distribution
    input_mode: str  # the job's input mode: File | Pipe | FastFile
    channels: tuple[Channel, ...]
    hyperparameters: Mapping[str, Any]  # Python values, as the spec gives them (plus derived ones)
    argv: tuple[str, ...]  # the script's argv exactly as the container renders it
    environment: Mapping[str, str]
    estimator_kwargs: Mapping[str, Any]  # JSON-able kwargs for sagemaker.tensorflow.TensorFlow(...)
    framework_version: str | None = None
    py_version: str | None = None
    image_uri: str | None = None
    output_path: str | None = None
    checkpoint_s3_uri: str | None = None
    metric_definitions: tuple[Mapping[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    cost: Mapping[str, Any] | None = None  # {"instance_hourly_usd", "max_hours", "max_usd", "spot"}
    local: LocalOptions = field(default_factory=LocalOptions)
    model_dir: str | None = None  # the --model_dir: <output>/<job>/model (SDK default), /opt/ml/model for MPI and bundled
    code_location: str | None = None  # the SDK uploads <code_location>/<job>/source/sourcedir.tar.gz
    checkpoint_local_path: str | None = None  # container folder synced with checkpoint_s3_uri
    checkpoint_dir: str | None = None  # container folder the bundled scripts checkpoint to (EFS/FSx channel)

    @property
    def training_channels(self) -> tuple[Channel, ...]:
        return tuple(c for c in self.channels if c.is_training)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------- building
DISABLED_SDK_EXTRAS = {
    # SageMaker Debugger/Profiler hooks are on by default in TF images; dfm's scripts do not use them and
    # they add a Debugger rule job and hook overhead. Off keeps the request to what the spec says.
    "disable_profiler": True,
    "debugger_hook_config": False,
}


def job_timestamp(now: float | None = None) -> str:
    """`YYYY-MM-DD-HH-MM-SS-mmm` in UTC, the suffix sagemaker.utils.name_from_base appends."""
    now = time.time() if now is None else now
    millis = int(round(now * 1000)) % 1000
    return time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(now)) + f"-{millis:03d}"


def _sdk_distribution(spec: Any) -> dict[str, Any] | None:
    kind = spec.distribution_kind
    if kind == "parameter_server":
        return {"parameter_server": {"enabled": True}}
    if kind == "multi_worker_mirrored":
        return {"multi_worker_mirrored_strategy": {"enabled": True}}
    if kind == "horovod":
        mpi: dict[str, Any] = {"enabled": True, "processes_per_host": spec.processes_per_host}
        if isinstance(spec.distribution, str) or not spec.distribution.horovod.mpi_options:
            return {"mpi": mpi}
        return {"mpi": {**mpi, "custom_mpi_options": spec.distribution.horovod.mpi_options}}
    return None


def _channel(spec: Any, name: str, source: Any, *, training: bool) -> Channel:
    local = spec.local.channels.get(name)
    local_path = os.path.abspath(os.path.expanduser(local)) if local else None
    if isinstance(source, str):
        sharded = training and spec.data.s3_shard
        return Channel(
            name=name,
            uri=source,
            kind="s3",
            input_mode=spec.data.mode,
            distribution="ShardedByS3Key" if sharded else "FullyReplicated",
            local_path=local_path,
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


def _channels(spec: Any) -> list[Channel]:
    names = contract.training_channel_names(len(spec.train_sources))
    channels = [_channel(spec, n, s, training=True) for n, s in zip(names, spec.train_sources)]
    if spec.data.eval is not None:
        channels.append(_channel(spec, contract.EVAL_CHANNEL, spec.data.eval, training=False))
    channels += [_channel(spec, n, s, training=False) for n, s in spec.data.channels.items()]
    config = spec.checkpoint_config
    if config is not None and config.file_system is not None:
        file_system = config.file_system
        if "access_mode" not in file_system.model_fields_set:
            file_system = file_system.model_copy(update={"access_mode": "rw"})  # checkpoints are written
        channels.append(_channel(spec, contract.CHECKPOINT_CHANNEL, file_system, training=False))
    return channels


def _has_gpu(instance_type: str) -> bool:
    """From the catalogue; for a type it lacks, SageMaker's GPU families are ml.p* and ml.g*."""
    info = catalog.instance(instance_type)
    return bool(info.gpus) if info is not None else instance_type.split(".")[1][:1] in ("p", "g")


def _cost(spec: Any) -> dict[str, Any]:
    info = catalog.instance(spec.instance.type)
    info = info if info is not None and info.usd_per_hour is not None else None  # no price, no estimate
    run_hours = spec.max_run / 3600
    warm_hours = spec.warm_pool_seconds / 3600
    cost: dict[str, Any] = {
        "instance_type": spec.instance.type,
        "instance_count": spec.instance.count,
        "instance_hourly_usd": info.usd_per_hour if info else None,
        "max_hours": round(run_hours, 3),
        "warm_pool_hours": round(warm_hours, 3),
        "max_usd": round(info.usd_per_hour * spec.instance.count * (run_hours + warm_hours), 2) if info else None,
        "spot": spec.spot is not None,
    }
    if info is None:
        cost["note"] = f"{spec.instance.type} is not in dfm's price table"
    elif spec.spot is not None:
        cost["note"] = "on-demand ceiling: spot bills the spot price (often 60-90% less) for the time actually trained"
    else:
        cost["note"] = "ceiling: on-demand us-east-1 list price x count x (max_run + warm pool); billed per second used"
    return cost


def build_plan(spec: Any, *, job_name: str | None = None, warnings: Iterable[str] = ()) -> Plan:
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
        source_dir = spec.source_dir if spec.source_dir.startswith("s3://") else spec.resolve_path("source_dir", spec.source_dir)
    else:
        script = spec.resolve_path("entry_point", spec.entry_point)
        entry_point, source_dir = os.path.basename(script), os.path.dirname(script)

    channels = _channels(spec)
    job_input_mode = "File" if any(c.kind != "s3" for c in channels) else spec.data.mode
    # The SDK passes an s3:// model_dir to non-MPI jobs, and the toolkit then calls S3 GetBucketLocation before
    # the script starts. The bundled scripts save to SM_MODEL_DIR anyway: give them the local folder.
    model_dir = "/opt/ml/model" if kind == "horovod" or bundled is not None else f"{output_path}/{job_name}/model"

    checkpoint_s3_uri = checkpoint_local_path = checkpoint_dir = None
    config = spec.checkpoint_config
    if config is not None and config.file_system is not None:
        checkpoint_dir = f"{contract.container_channel_dir(contract.CHECKPOINT_CHANNEL)}/{job_name}"
    elif config is not None:
        checkpoint_s3_uri = f"{output_path}/{job_name}/checkpoints" if config.s3 == "auto" else config.s3
        checkpoint_local_path = config.local_path

    script_hyperparameters = dict(spec.hyperparameters)
    if checkpoint_dir is not None and bundled is not None:
        script_hyperparameters.setdefault("checkpoint_dir", checkpoint_dir)
    # What the container sees: the SDK adds model_dir to the hyperparameters of every TensorFlow job.
    hyperparameters = {**script_hyperparameters, "model_dir": model_dir}

    framework_version = spec.framework.version if spec.framework else None
    py_version = spec.framework.python if spec.framework else None
    image_uri = spec.image_uri
    image = images.find(spec.framework.version) if spec.framework is not None and spec.image_uri is None else None
    if image is not None:
        py_version = py_version or image.python
        if not image.sdk_v2:  # SDK v2 cannot resolve it: dfm writes the DLC URI; the version still informs the SDK
            image_uri = images.image_uri(image, spec.region, "gpu" if _has_gpu(spec.instance.type) else "cpu")
            framework_version = image.version

    kwargs: dict[str, Any] = {
        "base_job_name": spec.name,
        "entry_point": entry_point,
        "source_dir": source_dir,
        "role": spec.role,
        "instance_type": spec.instance.type,
        "instance_count": spec.instance.count,
        "volume_size": spec.instance.volume_gb,
        "max_run": spec.max_run,
        "input_mode": job_input_mode,
        "output_path": output_path,
        "code_location": output_path,
        "hyperparameters": script_hyperparameters,
        **DISABLED_SDK_EXTRAS,
    }
    if bundled is not None:  # a user's script keeps the SDK's own default (the value predicted above)
        kwargs["model_dir"] = model_dir
    if image_uri is not None:
        kwargs["image_uri"] = image_uri
    if framework_version is not None:
        kwargs["framework_version"] = framework_version
    if py_version is not None:
        kwargs["py_version"] = py_version
    distribution = _sdk_distribution(spec)
    if distribution is not None:
        kwargs["distribution"] = distribution
    if checkpoint_s3_uri is not None:
        kwargs["checkpoint_s3_uri"] = checkpoint_s3_uri
        kwargs["checkpoint_local_path"] = checkpoint_local_path
    if spec.spot is not None:
        kwargs["use_spot_instances"] = True
        kwargs["max_wait"] = spec.spot.max_wait
    if spec.vpc is not None:
        kwargs["subnets"] = list(spec.vpc.subnets)
        kwargs["security_group_ids"] = list(spec.vpc.security_group_ids)
    if spec.warm_pool_seconds:
        kwargs["keep_alive_period_in_seconds"] = spec.warm_pool_seconds
    if spec.environment:
        kwargs["environment"] = dict(spec.environment)
    if spec.tags:
        kwargs["tags"] = [{"Key": k, "Value": v} for k, v in spec.tags.items()]
    metric_definitions = tuple(dict(m) for m in contract.METRIC_DEFINITIONS) if bundled is not None else ()
    if metric_definitions:
        kwargs["metric_definitions"] = [dict(m) for m in metric_definitions]

    local = LocalOptions(
        channels={c.name: c.local_path for c in channels if c.local_path},
        run_dir=os.path.abspath(os.path.expanduser(spec.local.run_dir)),
        timeout_s=spec.local.timeout_s,
        master_grace_s=spec.local.master_grace_s,
    )
    return Plan(
        spec_path=spec.path,
        job_name=job_name,
        region=spec.region,
        role=spec.role,
        entry_point=entry_point,
        source_dir=source_dir,
        instance_type=spec.instance.type,
        instance_count=spec.instance.count,
        distribution=Distribution(
            kind=kind,
            processes_per_host=spec.processes_per_host,
            mpi_options=distribution["mpi"].get("custom_mpi_options", "") if kind == "horovod" else "",
        ),
        input_mode=job_input_mode,
        channels=tuple(channels),
        hyperparameters=hyperparameters,
        argv=tuple(contract.render_argv(hyperparameters)),
        environment=dict(spec.environment),
        estimator_kwargs=kwargs,
        framework_version=framework_version,
        py_version=py_version,
        image_uri=image_uri,
        output_path=output_path,
        checkpoint_s3_uri=checkpoint_s3_uri,
        metric_definitions=metric_definitions,
        warnings=tuple(warnings),
        cost=_cost(spec),
        local=local,
        model_dir=model_dir,
        code_location=output_path,
        checkpoint_local_path=checkpoint_local_path,
        checkpoint_dir=checkpoint_dir,
    )
