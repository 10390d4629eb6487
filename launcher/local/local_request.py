"""A local run as data: everything `dfm launch --local` will do, computed before anything starts.

`build_request(plan)` gives, per simulated host, its /opt/ml tree, its config files and how each channel is
fed; per process, its host, role, command, environment, working directory and log file; plus the runtime
and the time limits, and the plan itself, stored in the run folder (`PLAN_FILE`, read back by `stored_plan`).
It reads (channel folders, the runtime's package metadata) and binds free loopback ports to pick them, but
writes nothing and starts nothing: runner.py executes the request, `--local --dry-run` prints it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from launcher.facts import contract
from launcher.facts import conventions
from launcher.plans import hosts
from launcher.errors import DfmError
from launcher.local import channels as ch
from launcher.local import mpi
from launcher.local import runtime as runtimes
from launcher.local.container import (
    HostTree,
    channel_mode,
    config_files,
    host_channels,
    host_cores,
    plan_hosts,
    to_host_path,
)
from launcher.local import host_memory, local_processes, warm_source
from launcher.local.local_processes import INHERITS, LocalProcess
from launcher.local.runtime import Runtime
from launcher.plans.training_plan import Plan

PLAN_FILE = "plan.json"  # in the run folder: the plan the run ran (Plan.to_dict)
DEFAULT_RUN_DIR = "runs"
PS_GRACE_S = 5.0  # how long stopped ps servers get to exit once every script has finished
SUPPORTED_DISTRIBUTIONS = ("none", "parameter_server", "horovod", "multi_worker_mirrored")


@dataclass(frozen=True)
class ChannelFeed:
    """How one channel reaches one host: `link` (File/FastFile: the host's files symlinked under their keys),
    `pipe` (a feeder writes the host's files into FIFOs `<target>_0`, `_1`, ...) or `mount` (EFS/FSx: the
    folder itself, shared by every host)."""

    name: str
    mode: str  # the container's TrainingInputMode: File | FastFile | Pipe
    feed: str  # link | pipe | mount
    distribution: str  # FullyReplicated | ShardedByS3Key
    source: str | None  # the local folder standing in for the S3 prefix or file system (None: not usable)
    target: str  # <root>/input/data/<name>
    files: tuple[tuple[str, str], ...] = ()  # (key, local file) this host gets, in key order (link, pipe)


@dataclass(frozen=True)
class LocalHost:
    name: str  # algo-1 ...
    root: str  # the folder that plays /opt/ml (SAGEMAKER_BASE_DIR)
    config_files: Mapping[str, Any]  # input/config/<name> -> its JSON content
    channels: tuple[ChannelFeed, ...]
    checkpoint_dir: str | None = None  # synced with the run's checkpoint store (checkpoint_s3_uri)
    cpus: tuple[int, ...] = ()  # the cores every process of this host runs on (empty: not confined)
    memory_group: str = ""  # the memory cgroup every process of this host runs in (empty: none, the sampler)


@dataclass(frozen=True)
class LocalRequest:
    job_name: str
    job_dir: str
    log_dir: str
    source_dir: str  # copied into every host's code/
    runtime: Runtime
    hosts: tuple[LocalHost, ...]
    processes: tuple[LocalProcess, ...]
    master: str  # the process whose end the other hosts' scripts have master_grace_s to follow
    timeout_s: float | None
    master_grace_s: float
    ps_grace_s: float = PS_GRACE_S
    checkpoint_store: str | None = None  # where this machine keeps what SageMaker syncs to checkpoint_s3_uri
    stall_timeout_s: float | None = None  # stop the run after this long without a metric line (spec stall_timeout)
    files: Mapping[str, Any] = field(default_factory=dict)  # more files written before the start: path -> JSON
    source_files: Mapping[str, str] = field(default_factory=dict)  # added to every host's code/ (plan.source_files)
    cores_per_host: int = 1  # each host's SM_NUM_CPUS
    memory_per_host: int | None = None  # bytes each host's processes may hold together (None: no limit)
    warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # why it cannot run (yet): shown by the dry run, refused by the runner

    def started(self) -> tuple[LocalProcess, ...]:
        """The processes the launcher starts itself (mpirun starts the ranks)."""
        return tuple(p for p in self.processes if p.supervision != "rank")

    def process(self, label: str) -> LocalProcess:
        return next(p for p in self.processes if p.label == label)

    def host(self, name: str) -> LocalHost:
        return next(h for h in self.hosts if h.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "inherits": INHERITS}


def stored_plan(job_dir: str | Path) -> Plan:
    """The plan a local run ran, as its run folder stores it."""
    path = Path(job_dir) / PLAN_FILE
    try:
        return Plan.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise DfmError(f"{path}: no stored plan (not the folder of a local run?)") from None
    except ValueError as err:  # JSON or the plan's fields
        raise DfmError(f"{path}: {err}") from None


def checkpoint_store(plan, root: Path) -> Path | None:
    """Where `--local` keeps what SageMaker would sync to checkpoint_s3_uri (None: no sync), per URI."""
    uri = plan.checkpoint_s3_uri
    if not uri:
        return None
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in uri.split("://", 1)[-1].strip("/"))
    return root / "checkpoints" / slug


def request_plan(request: LocalRequest) -> Plan:
    """The plan a request was built from (among its files: the run folder's plan.json)."""
    return Plan.from_dict(request.files[str(Path(request.job_dir) / PLAN_FILE)])


def build_request(
    plan: Plan,
    *,
    environ: Mapping[str, str] | None = None,
    runtime: Runtime | None = None,
    cpus: Sequence[int] | None = None,
) -> LocalRequest:
    """The local run of `plan` (under its local.run_dir, stopped after local.timeout_s); DfmError for what no run
    of this plan could do. `environ`: the launcher's environment (default os.environ); `runtime`: the Python of
    the job (default: the image's runtime); `cpus`: the cores the hosts share out (default: this machine's)."""
    environ = dict(os.environ if environ is None else environ)
    kind = plan.distribution.kind
    if kind not in SUPPORTED_DISTRIBUTIONS:
        raise DfmError(f"--local cannot run distribution '{kind}'")
    if kind == "horovod":
        mpi.parse_custom_mpi_options(plan.distribution.mpi_options)  # refuses what the toolkit cannot read
    runtime = runtime or runtimes.for_plan(plan)
    root = Path(plan.local.run_dir or DEFAULT_RUN_DIR).resolve()
    job_dir = root / plan.job_name
    trees = [HostTree(name, job_dir / "hosts" / name) for name in plan_hosts(plan)]
    store = checkpoint_store(plan, root)
    plan = warm_source.resolve(plan, checkpoint_store, store)
    owned = host_cores(plan, cpus)
    warnings: list[str] = [owned.warning] if owned.warning else []
    limit = plan.local.memory_per_host
    warnings += host_memory.limit_warnings(limit, len(trees), host_memory.machine_memory())
    groups = host_memory.host_groups(str(job_dir), [t.host for t in trees], host_memory.own_group())
    problems: list[str] = [p for p in [bfloat16_problem(plan, environ)] if p]
    sources = _channel_sources(plan, problems)
    host_requests = tuple(
        replace(_host(plan, tree, sources, store, warnings, owned.cpus[tree.host]), memory_group=groups[tree.host])
        for tree in trees
    )
    processes, master, files = local_processes.processes(plan, trees, runtime, environ, job_dir, owned, groups)
    files = {str(job_dir / PLAN_FILE): plan.to_dict(), **files}
    return LocalRequest(
        job_name=plan.job_name,
        job_dir=str(job_dir),
        log_dir=str(job_dir / "logs"),
        source_dir=plan.source_dir,
        runtime=runtime,
        hosts=host_requests,
        processes=processes,
        master=master,
        timeout_s=plan.local.timeout_s,
        master_grace_s=plan.local.master_grace_s,
        checkpoint_store=str(store) if store else None,
        files=files,
        stall_timeout_s=plan.operations.stall_timeout_s,
        source_files=dict(plan.source_files),
        cores_per_host=owned.per_host,
        memory_per_host=limit,
        warnings=tuple(warnings),
        problems=tuple(problems),
    )


def bfloat16_problem(plan, environ: Mapping[str, str]) -> str | None:
    """A bundled script told to compute in bfloat16 on this machine, whose CPU lacks the instructions (the
    emulation runs several times slower than float32): the problem, or None."""
    value = plan.hyperparameters.get("mixed_precision") if plan.bundled else None
    if value is None or contract.bundled_hparams().convert("mixed_precision", str(value)) != "bfloat16":
        return None
    precision = contract.bundled_precision()
    if precision.cpu_bfloat16_flag(environ):
        return None
    return (
        f"hyperparameters.mixed_precision: bfloat16, but this machine's CPU has no bfloat16 instructions "
        f"({' or '.join(precision.BFLOAT16_FLAGS)} in /proc/cpuinfo): use auto or false for --local runs here"
    )


# ---- hosts and channels ----
def _channel_sources(plan, problems: list[str]) -> dict[str, tuple[str, list[tuple[str, Path]]] | None]:
    """channel -> (local source, its objects in key order); None where the channel has no usable source."""
    found: dict[str, tuple[str, list[tuple[str, Path]]] | None] = {}
    for channel in plan.channels:
        try:
            source = ch.channel_source(channel)
        except DfmError as err:
            problems.append(err.message)
            found[channel.name] = None
            continue
        objects = [] if channel.kind in ("efs", "fsx") else ch.list_objects(source)
        if channel.kind == "s3" and not objects:
            problems.append(ch.empty_channel_problem(channel, source))
            found[channel.name] = None
            continue
        skipped = ch.only_skipped_files_problem(channel, source, objects) if plan.bundled else None
        if skipped:
            problems.append(skipped)
            found[channel.name] = None
            continue
        found[channel.name] = (str(source), objects)
    return found


def _host(plan, tree: HostTree, sources, store: Path | None, warnings: list[str], cpus: tuple[int, ...]) -> LocalHost:
    feeds = []
    group_hosts = hosts.host_names(plan.instance_groups)[hosts.group_of(plan.instance_groups, tree.host).name]
    index, count = group_hosts.index(tree.host), len(group_hosts)  # ShardedByS3Key splits among the group's hosts
    for channel in host_channels(plan, tree.host):
        source = sources[channel.name]
        mode = channel_mode(plan, channel)
        if channel.kind in ("efs", "fsx"):  # a mounted file system: shared by the hosts, writable
            feeds.append(
                ChannelFeed(
                    channel.name,
                    mode,
                    "mount",
                    channel.distribution,
                    source and source[0],
                    str(tree.channel_dir(channel.name)),
                )
            )
            continue
        files = ch.files_for_host(source[1], channel.distribution, index, count) if source else []
        if source and not files:
            warnings.append(f"{tree.host}: channel '{channel.name}' has no files on this host")
        feeds.append(
            ChannelFeed(
                channel.name,
                mode,
                "pipe" if mode == "Pipe" else "link",
                channel.distribution,
                source and source[0],
                str(tree.channel_dir(channel.name)),
                tuple((key, str(path)) for key, path in files),
            )
        )
    return LocalHost(
        tree.host,
        str(tree.base),
        config_files(plan, tree),
        tuple(feeds),
        _checkpoint_dir(plan, tree) if store is not None else None,
        cpus,
    )


def _checkpoint_dir(plan, tree: HostTree) -> str:
    """The host folder SageMaker syncs with checkpoint_s3_uri (checkpoint_local_path, /opt/ml/checkpoints by
    default)."""
    local_path = plan.checkpoint_local_path or conventions.CONTAINER_CHECKPOINT_DIR
    mapped = to_host_path(local_path, tree)
    if mapped == local_path:
        raise DfmError(f"--local can only emulate checkpoint_local_path under /opt/ml, not {local_path}")
    return mapped


# ---- processes ----
