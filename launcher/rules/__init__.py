"""Cross-field checks on a Spec, run before anything is built.

Each rule is a small function `rule(spec) -> list[Finding]`; every message says what is wrong and how to
fix it. Errors stop `validate` and `launch` (exit 2); warnings are printed and carried into the Plan.
Neither the SageMaker SDK nor the API rejects most of these mistakes, so dfm must. This module holds the
rules about the job itself and RULES, the one list of every rule; the image rules are in `rules.image_rules`
and the request-limit rules in `rules.request_rules`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from launcher.facts import catalog
from launcher.facts import contract
from launcher.facts import conventions
from launcher.rules.findings import Finding, error, warning
from launcher.rules.operations_rules import check_recover, check_stall_timeout
from launcher.rules.image_rules import check_framework, check_horovod_in_image, check_mirrored, check_pipe_mode
from launcher.rules.features import check_features
from launcher.rules.ps_group import check_ps_group
from launcher.rules.hparams import (
    check_boolean_hyperparameters,
    check_bundled_hyperparameters,
    check_evaluation_schedule,
)
from launcher.rules.tuning_rules import TUNE_RULES
from launcher.rules.warm_start_rules import check_warm_start
from launcher.rules.prepare_rules import check_prepare, check_prepared_layout
from launcher.rules.gpu import (
    check_gpu_memory,
    check_mixed_precision_on_cpu,
    check_one_host_ps_gpus,
    check_ps_pipe_channels,
    one_host_ps_gpus,
)
from launcher.rules.memory import check_host_memory, check_local_memory
from launcher.rules.precision import check_bfloat16_hardware
from launcher.rules.recovery_types import check_recovery_types
from launcher.rules.request_rules import (
    check_channels,
    check_hyperparameter_limits,
    check_instance_known,
    check_job_name,
    check_job_name_override,
    check_request_limits,
)
from launcher.spec import FileSystem, Spec, did_you_mean


def channel_names(spec: Spec) -> list[str]:
    return [channel.name for channel in conventions.channel_sources(spec)]


def check_entry_point(spec: Spec) -> list[Finding]:
    bundled = contract.BUNDLED_ENTRY_POINTS.get(spec.entry_point)
    kind = spec.distribution_kind
    if bundled is not None:
        problems = []
        if spec.source_dir is not None:
            problems.append(
                error(
                    "source_dir",
                    f"{spec.entry_point} ships its own source dir: drop source_dir, or give your own script as "
                    "entry_point",
                )
            )
        if kind not in bundled.distributions:
            problems.append(
                error(
                    "distribution",
                    f"{spec.entry_point} runs with distribution {' or '.join(bundled.distributions)}, not {kind}",
                )
            )
        return problems
    if spec.entry_point.startswith("deepfm"):
        hint = did_you_mean(spec.entry_point, contract.BUNDLED_ENTRY_POINTS)
        return [
            error(
                "entry_point",
                f"no bundled entry point '{spec.entry_point}'{hint}; bundled: "
                f"{', '.join(contract.BUNDLED_ENTRY_POINTS)}",
            )
        ]
    if spec.source_dir is not None and spec.source_dir.startswith("s3://"):
        return []
    field = "entry_point"
    try:
        if spec.source_dir is not None:
            field = "source_dir"
            source_dir = Path(spec.resolve_path("source_dir", spec.source_dir))
            if not source_dir.is_dir():
                return [error("source_dir", f"{source_dir} is not a folder")]
            field, script = "entry_point", source_dir / spec.entry_point
        else:
            script = Path(spec.resolve_path("entry_point", spec.entry_point))
        found = script.is_file()
    except (OSError, ValueError) as err:  # a name too long for the file system, a NUL in it
        return [error(field, f"not a usable path: {getattr(err, 'strerror', None) or err}")]
    if not found:
        return [
            error(
                "entry_point",
                f"{script} not found: give a bundled name ({', '.join(contract.BUNDLED_ENTRY_POINTS)}) or your "
                "script's path",
            )
        ]
    return []


def check_pipe_channels_per_worker(spec: Spec) -> list[Finding]:
    """Each Horovod rank on a host reads its own FIFO; with fewer channels than ranks, ranks wait forever."""
    if spec.data.mode != "Pipe" or spec.distribution_kind != "horovod":
        return []
    channels, ranks = len(spec.train_sources), spec.processes_per_host
    if channels >= ranks:
        return []
    return [
        error(
            "data.train",
            f"Pipe mode with {ranks} processes per host needs at least {ranks} training paths (one FIFO per process), "
            f"got {channels}: list {ranks} paths (the same path may repeat), or use File/FastFile",
        )
    ]


def check_processes_per_host(spec: Spec) -> list[Finding]:
    if spec.distribution_kind != "horovod":
        return []
    info = catalog.instance(spec.instance.type)
    if info is None:
        return []
    ranks = spec.processes_per_host
    if info.gpus and ranks > info.gpus:
        return [
            error(
                "distribution.horovod.processes_per_host",
                f"{ranks} processes, but {spec.instance.type} has {info.gpus} GPUs: use at most {info.gpus}",
            )
        ]
    if not info.gpus and ranks > info.vcpus:
        return [
            error(
                "distribution.horovod.processes_per_host",
                f"{ranks} processes, but {spec.instance.type} has {info.vcpus} vCPUs: use at most {info.vcpus}",
            )
        ]
    if info.gpus and ranks < info.gpus:
        return [
            warning(
                "distribution.horovod.processes_per_host",
                f"{ranks} processes on {info.gpus} GPUs leaves {info.gpus - ranks} idle: use {info.gpus}",
            )
        ]
    return []


def check_parameter_server(spec: Spec) -> list[Finding]:
    if spec.distribution_kind != "parameter_server":
        return []
    problems = []
    hosts = spec.instance.count + (spec.ps_group.count if spec.ps_group is not None else 0)
    if hosts == 1 and one_host_ps_gpus(spec) <= 1:  # with several GPUs check_one_host_ps_gpus says more
        problems.append(
            warning(
                "instance.count",
                "a parameter server on one host only adds overhead: use count >= 2, or distribution: none",
            )
        )
    info = catalog.instance(spec.instance.type)
    if info is not None and info.gpus > 1 and spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        problems.append(
            warning(
                "instance.type",
                "SageMaker starts one worker per host, so unless your script starts one worker task per GPU (as "
                f"deepfm-ps does), {info.gpus - 1} of {info.gpus} GPUs idle",
            )
        )
    if hosts > 1 and spec.checkpoint_config is None:
        problems.append(
            error(
                "checkpoints",
                "a multi-host parameter server needs a shared model/checkpoint location: remove `checkpoints: false`, "
                "or give checkpoints.file_system (EFS)",
            )
        )
    return problems


def check_spot(spec: Spec) -> list[Finding]:
    if spec.spot is None:
        return []
    problems = []
    if spec.spot.max_wait < spec.max_run:
        problems.append(
            error(
                "spot.max_wait",
                f"{spec.spot.max_wait} is less than max_run {spec.max_run}: max_wait counts the run too; use max_wait "
                f">= {spec.max_run}",
            )
        )
    if spec.checkpoint_config is None:
        problems.append(
            error("checkpoints", "spot jobs are interrupted and resume from checkpoints: remove `checkpoints: false`")
        )
    if spec.warm_pool_seconds:
        problems.append(
            error(
                "warm_pool_seconds",
                "SageMaker managed warm pools cannot be used with spot instances: drop warm_pool_seconds, or spot",
            )
        )
    return problems


def check_s3_shard(spec: Spec) -> list[Finding]:
    """s3_shard with no S3 training channel. Whether sharded channels hold enough files is a question about the
    data, asked where it can be answered (`compile.shard_warnings`)."""
    if spec.data.s3_shard and not any(isinstance(s, str) for s in spec.train_sources):
        return [warning("data.s3_shard", "no S3 training channel to shard: it has no effect on file systems")]
    return []


def check_file_systems(spec: Spec) -> list[Finding]:
    used = [channel.field for channel in conventions.channel_sources(spec) if isinstance(channel.source, FileSystem)]
    if not used or spec.vpc is not None:
        return []
    return [
        error(
            used[0],
            "EFS/FSx channels are reached inside your VPC: add vpc: {subnets: [...], security_group_ids: [...]}",
        )
    ]


def check_local_channels(spec: Spec) -> list[Finding]:
    names = channel_names(spec)
    if spec.warm_start is not None and spec.warm_start.source.startswith("s3://"):  # its channel, read locally
        model = spec.warm_start.source.endswith(".tar.gz")
        names.append(conventions.MODEL_CHANNEL if model else conventions.WARM_START_CHANNEL)
    return [
        error(
            f"local.channels.{name}",
            f"no channel '{name}' in this spec{did_you_mean(name, names)}; channels: {', '.join(names)}",
        )
        for name in spec.local.channels
        if name not in names
    ]


# Every rule but the job name's, which `check` runs on the name the job will really have.
RULES: tuple[Callable[[Spec], list[Finding]], ...] = (
    check_channels,
    check_hyperparameter_limits,
    check_request_limits,
    check_bundled_hyperparameters,
    check_features,
    check_boolean_hyperparameters,
    check_evaluation_schedule,
    check_entry_point,
    check_framework,
    check_horovod_in_image,
    check_pipe_mode,
    check_pipe_channels_per_worker,
    check_processes_per_host,
    check_instance_known,
    check_parameter_server,
    check_ps_group,
    check_mixed_precision_on_cpu,
    check_bfloat16_hardware,
    check_gpu_memory,
    check_host_memory,
    check_one_host_ps_gpus,
    check_ps_pipe_channels,
    check_spot,
    check_mirrored,
    check_s3_shard,
    check_file_systems,
    check_local_channels,
    check_local_memory,
    check_recover,
    check_stall_timeout,
    check_warm_start,
    *TUNE_RULES,
    check_prepare,
    check_prepared_layout,
)


# The rules that read the instance type: they run again for each type of recover.instance_types.
INSTANCE_TYPE_RULES: tuple[Callable[[Spec], list[Finding]], ...] = (
    check_processes_per_host,
    check_instance_known,
    check_parameter_server,
    check_ps_group,
    check_mixed_precision_on_cpu,
    check_bfloat16_hardware,
    check_gpu_memory,
    check_host_memory,
    check_one_host_ps_gpus,
    check_ps_pipe_channels,
)


def check(spec: Spec, job_name: str | None = None) -> list[Finding]:
    """Every finding of every rule, errors and warnings, in rule order, then the instance type's rules on each
    recovery type. The job name checked is `job_name` (--job-name, the full name) when given, else the spec's base
    name with the timestamp dfm appends."""
    name = check_job_name(spec) if job_name is None else check_job_name_override(job_name)
    return (
        name + [finding for rule in RULES for finding in rule(spec)] + check_recovery_types(spec, INSTANCE_TYPE_RULES)
    )


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "warning"]
