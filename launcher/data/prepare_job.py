"""What `dfm data prepare` asks of its Spark application (launcher/data/prepare_app.py), derived from a spec. Pure.

The training job's own shape decides the output layout (`prepared_layout`): hosts = instance.count (the hosts
that read data), workers = processes per host, one channel folder per training path. `split.Layout` turns that
into the number and names of the files, the same layout `dfm data split` writes, so that with ShardedByS3Key,
Pipe or File mode and the shard table of the bundled scripts (entrypoints/deepfm_input.py) no worker is idle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from launcher.facts import catalog
from launcher.facts import contract
from launcher.facts import conventions
from launcher.data.split import Layout
from launcher.spec import Spec

APP = Path(__file__).with_name("prepare_app.py")  # the Spark application (submit_app)
# What the application imports, shipped beside it (--py-files).
APP_MODULES = tuple(
    Path(__file__).with_name(f"{name}.py")
    for name in ("prepare_codec", "prepare_encode", "prepare_app_stats", "prepare_app_write")
)
CONTAINER_OUTPUT = "/opt/ml/processing/output"  # ProcessingOutput sources: one folder per channel, and the report
REPORT = "report"
JOB_FILE = "prepare-job.json"


@dataclass(frozen=True)
class Fit:
    """How the prepared files meet the training job: files each worker reads, per the shard table."""

    files_per_channel: int
    channels: int
    min_files_per_worker: int
    max_files_per_worker: int


def cluster_vcpus(spec: Spec) -> int:
    """The processing cluster's vCPUs (an unknown instance type counts 4)."""
    kind = catalog.INSTANCES.get(spec.prepare.instance.type)
    return (kind.vcpus if kind is not None else 4) * spec.prepare.instance.count


def prepared_layout(spec: Spec) -> Layout:
    """The training job's layout; files_per_worker auto: the fewest that give the write stage (one task per file)
    a task per vCPU of the processing cluster, so the write follows the cluster, not the training job's size."""
    multi_path = len(spec.train_sources) > 1
    layout = Layout(
        hosts=spec.instance.count,
        workers=spec.processes_per_host,
        multi_path=multi_path,
        channels=len(spec.train_sources) if multi_path else 0,
    )
    wanted = spec.prepare.files_per_worker if spec.prepare is not None else 1
    if wanted == "auto":
        unit = layout.files_per_channel() * layout.channel_count  # files per unit of files_per_worker
        wanted = -(-cluster_vcpus(spec) // unit)
    return dataclasses.replace(layout, files_per_worker=wanted)


def eval_files(spec: Spec) -> int:
    """Evaluation is sharded over every worker too, with as many files each as training (its write is as wide)."""
    return spec.instance.count * spec.processes_per_host * prepared_layout(spec).files_per_worker


def write_tasks(spec: Spec) -> dict[str, int]:
    """Tasks of the write stages (one per file) against the cluster's vCPUs: what the dry run and the bench show."""
    layout = prepared_layout(spec)
    return {
        "train_files": len(layout.paths(Path("."))),
        "eval_files": eval_files(spec) if wants_eval(spec) else 0,
        "files_per_worker": layout.files_per_worker,
        "cluster_vcpus": cluster_vcpus(spec),
    }


def fit(layout: Layout, s3_shard: bool, shard_for) -> Fit:
    """Files each (host, local worker) reads, following ShardedByS3Key (objects dealt to hosts) and the bundled
    scripts' `shard_for` (file-level sharding when there are at least as many files as shards)."""
    per_channel = layout.files_per_channel()
    counts = []
    for host in range(layout.hosts):
        for rank in range(layout.workers):
            channels = (
                [i for i in range(layout.channel_count) if i % layout.workers == rank] if layout.multi_path else [0]
            )
            files = 0
            for _ in channels:
                on_host = len(range(host, per_channel, layout.hosts)) if s3_shard else per_channel
                shards, index = shard_for(layout.hosts, host, layout.workers, rank, layout.multi_path, s3_shard)
                files += len(range(index, on_host, shards)) if on_host >= shards else 0
            counts.append(files)
    return Fit(per_channel, layout.channel_count, min(counts), max(counts))


def shard_table() -> Callable:
    """The bundled scripts' own `shard_for` (entrypoints/deepfm_shards.py, which their input pipeline uses)."""
    return contract.bundled_shards().shard_for


def _features(spec: Spec) -> dict[str, Any] | None:
    section = spec.features
    if section is None:
        return None
    bags = section.get("multi_hot") or {}
    return {
        "label": section.get("label"),
        "numeric": list(section.get("numeric") or {}),
        "categorical": list(section.get("categorical") or {}),
        "multi_hot": {name: (entry or {}).get("separator", "|") for name, entry in bags.items()},
    }


def _sizes(spec: Spec) -> tuple[int, int | None]:
    """(field_size, feature_size) the training reads: the spec's, else the bundled scripts' defaults, so that a
    row the model could not embed (too many pairs, an id past the table) is a bad row here, not a failed job."""
    defaults = contract.bundled_hparams().DEFAULTS if spec.entry_point in contract.BUNDLED_ENTRY_POINTS else {}
    found = []
    for name in ("field_size", "feature_size"):
        value = spec.hyperparameters.get(name, defaults.get(name))
        found.append(value if isinstance(value, int) and not isinstance(value, bool) else None)
    return found[0] or 39, found[1]


def local_folders(spec: Spec) -> dict[str, str]:
    """channel -> local folder (`local.channels`; relative to the current directory, as `launch --local` reads them)."""
    return dict(spec.local.channels)


def job_description(spec: Spec, *, local: bool, stats_only: bool = False) -> dict[str, Any]:
    """The app's JSON job: input, split, balance, the exact output paths. local: this machine's folders;
    else the processing container's (uploaded by ProcessingOutputs to the spec's data.train / data.eval)."""
    prepare = spec.prepare
    assert prepare is not None
    layout = prepared_layout(spec)
    relative = [p.relative_to(Path(".")) for p in layout.paths(Path("."))]
    eval_names = [f"part-{k:05d}.tfrecord" for k in range(eval_files(spec))] if wants_eval(spec) else []
    if local:
        folders = local_folders(spec)
        train_paths = [str(Path(folders[p.parts[0]]) / p.name) for p in relative]
        eval_paths = [str(Path(folders[conventions.EVAL_CHANNEL]) / n) for n in eval_names]
        report_dir = str(Path(folders[conventions.TRAIN_CHANNEL]).parent / "prepare")
        source, eval_source = (
            _local(spec, "prepare.input.local", prepare.input.local),
            (_local(spec, "prepare.eval.local", prepare.eval.local) if prepare.eval is not None else None),
        )
    else:
        train_paths = [f"{CONTAINER_OUTPUT}/{p.parts[0]}/{p.name}" for p in relative]
        eval_paths = [f"{CONTAINER_OUTPUT}/{conventions.EVAL_CHANNEL}/{n}" for n in eval_names]
        report_dir = f"{CONTAINER_OUTPUT}/{REPORT}"
        source, eval_source = prepare.input.uri, prepare.eval.uri if prepare.eval is not None else None
    return {
        "input": {
            "uri": source,
            "format": prepare.input.format,
            "columns": prepare.input.columns or [],
            "header": prepare.input.header,
        },
        "eval_uri": eval_source,
        "eval_fraction": prepare.eval_fraction or 0.0,
        "shuffle": prepare.shuffle,
        "seed": prepare.seed,
        "negative_rate": prepare.balance.negative_rate if prepare.balance is not None else None,
        "bad_rows": prepare.bad_rows,
        "field_size": _sizes(spec)[0],
        "feature_size": _sizes(spec)[1],
        "features": _features(spec),
        "train_paths": train_paths,
        "eval_paths": eval_paths,
        "report_dir": report_dir,
        "stats": prepare.stats or stats_only,
        "stats_only": stats_only,
    }


def wants_eval(spec: Spec) -> bool:
    prepare = spec.prepare
    return spec.data.eval is not None and (prepare.eval is not None or bool(prepare.eval_fraction))


def _local(spec: Spec, field: str, value: str | None) -> str:
    if value is None:
        from launcher.errors import DfmError

        raise DfmError(f"{spec.where(field)}: {field}: --local reads a folder on this machine: set {field}", 2)
    return value  # relative to the current directory, like local.channels


def channel_uris(spec: Spec) -> dict[str, str]:
    """Channel -> the S3 prefix the prepared files go to (the training job's own inputs)."""
    names = conventions.training_channel_names(len(spec.train_sources))
    uris = {name: source for name, source in zip(names, spec.train_sources) if isinstance(source, str)}
    if wants_eval(spec) and isinstance(spec.data.eval, str):
        uris[conventions.EVAL_CHANNEL] = spec.data.eval
    return uris


def report_uri(spec: Spec, job_name: str) -> str:
    if spec.prepare.report is not None:
        return spec.prepare.report
    return f"{spec.output.rstrip('/')}/prepare/{job_name}/"
