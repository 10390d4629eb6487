"""Readable text of the SageMaker dry runs (`dfm launch`, `dfm data prepare`), each from its document alone (the
JSON form is that document as it is)."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _table(*headers: str, show_header: bool = True) -> Table:
    # Values wrap instead of being cut with an ellipsis: people check these URIs before paying.
    table = Table(box=None, pad_edge=False, show_header=show_header)
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def _inputs_table(channels: list[dict[str, Any]], job_input_mode: str) -> Table:
    table = _table("channel", "source", "input mode", "distribution", "groups", "--local reads")
    for channel in channels:
        s3 = channel["kind"] == "s3"
        source = (
            channel["uri"]
            if s3
            else f"{channel['kind']}:{channel['file_system_id']}:{channel['uri']} ({channel['access_mode']})"
        )
        mode = channel["input_mode"] if s3 else f"{job_input_mode} (job)"
        groups = ", ".join(channel["instance_groups"] or ["all"])
        table.add_row(
            channel["name"], source, mode, channel["distribution"] if s3 else "-", groups, channel["local_path"] or "-"
        )
    return table


def _groups_table(groups: list[dict[str, Any]], cost: dict[str, Any]) -> Table:
    usd = {row["group"]: row.get("max_usd") for row in cost.get("groups", [])}
    table = _table("group", "instances", "host", "runs", "max cost")
    for group in groups:
        first = True
        for host, processes in group["hosts"].items():
            price = usd.get(group["group"])
            table.add_row(
                group["group"] if first else "",
                f"{group['instance_count']} x {group['instance_type']}" if first else "",
                host,
                ", ".join(processes),
                (f"${price:,.2f}" if price is not None else "?") if first else "",
            )
            first = False
    return table


def _kwargs_table(kwargs: dict[str, Any]) -> Table:
    table = _table("kwarg", "value", show_header=False)
    for key in sorted(kwargs):
        if key not in ("hyperparameters", "metric_definitions"):
            table.add_row(key, _value(kwargs[key]))
    if "hyperparameters" in kwargs:
        table.add_row("hyperparameters", f"{len(kwargs['hyperparameters'])} (see the script's argv)")
    if "metric_definitions" in kwargs:
        names = ", ".join(m["Name"] for m in kwargs["metric_definitions"])
        table.add_row("metric_definitions", names)
    return table


def _cost_line(cost: dict[str, Any]) -> str:
    if cost.get("max_usd") is None:
        return cost.get("note", "no estimate")
    hours = cost["max_hours"] + cost["warm_pool_hours"]
    parts = " + ".join(f"${g['instance_hourly_usd']}/h x {g['instance_count']} ({g['group']})" for g in cost["groups"])
    head = f"at most ${cost['max_usd']:,.2f} = ({parts}) x {hours:g} h"
    return f"{head}{' (spot)' if cost['spot'] else ''}; {cost['note']}"


def _watch_lines(watch: dict[str, Any]) -> list[str]:
    """What dfm itself does while `dfm launch --wait` watches the job (the request carries the rest)."""
    lines = []
    recovery = watch.get("recovery")
    if recovery:
        types = ", then ".join(recovery["instance_types"]) or "the same type"
        lines.append(
            f"Recovery: after a capacity failure or a spot job out of max_wait, up to {recovery['max_restarts']} "
            f"resubmissions (<job>-r1, ...) on {types}, first after {recovery['backoff_s']:.0f} s (doubling), "
            "resuming from the same checkpoints; with --wait only"
        )
    if watch.get("stall_timeout_s"):
        lines.append(
            f"Stall watchdog: the job is stopped after {watch['stall_timeout_s']} s without a metric line; "
            "with --wait only"
        )
    return lines


def console_width() -> int:
    """The terminal's width; piped or redirected, wide enough that no line is wrapped and no URI split."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else 100_000


def _size(size: int) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size / 1024:.1f} GB" if size >= 1024 else f"{size:.1f} MB"


def _hosts_line(group: dict[str, Any]) -> str:
    hosts = [f"{host} {', '.join(processes)}" for host, processes in group["hosts"].items()]
    more = f"; {len(hosts) - 2} more hosts (below)" if len(hosts) > 2 else ""
    name = "" if group["group"] == "homogeneousCluster" else f" ({group['group']})"
    return f"{group['instance_count']} x {group['instance_type']}{name}: {'; '.join(hosts[:2])}{more}"


def _channel_line(channel: dict[str, Any]) -> str:
    if channel["kind"] != "s3":
        return f"{channel['name']} {channel['kind']}:{channel['file_system_id']}:{channel['uri']}"
    sharded = ", sharded by object" if channel["distribution"] == "ShardedByS3Key" else ""
    return f"{channel['name']} {channel['uri']} ({channel['input_mode']}{sharded})"


def summary_lines(document: dict[str, Any], sent: bool = False) -> list[str]:
    """What a training job costs and ships, in at most 15 lines: the head of the dry run and of `dfm launch`'s
    question."""
    rows = [
        ("Job", document["job_name"] + ("" if sent else " (dry run: nothing was sent)")),
        ("Image", document["image_uri"]),
    ]
    rows += [("Hosts" if i == 0 else "", _hosts_line(group)) for i, group in enumerate(document["instance_groups"])]
    channels = [_channel_line(channel) for channel in document["channels"]]
    if len(channels) > 4:
        channels = [*channels[:3], f"... and {len(channels) - 3} more (below)"]
    rows += [("Channels" if i == 0 else "", line) for i, line in enumerate(channels)]
    checkpoints = (document["request"].get("CheckpointConfig") or {}).get("S3Uri")
    rows.append(("Checkpoints", checkpoints or "none"))
    start = document.get("warm_start")
    if start:
        resolved = "" if start["uri"].rstrip("/") == start["from"].rstrip("/") else f" = {start['uri']}"
        rows.append(
            (
                "Warm start",
                f"{start['from']}{resolved} ({start['kind']}, channel {start['channel']}; restore {start['restore']}, "
                f"steps {start['steps']}"
                + (f"; read with {start['read_with']}" if start.get("read_with") else "")
                + ")",
            )
        )
    cost = document["cost"]
    rows.append(
        (
            "Cost",
            f"at most ${cost['max_usd']:,.2f} ({cost['max_hours'] + cost['warm_pool_hours']:g} h"
            f"{', spot' if cost['spot'] else ''})"
            if cost.get("max_usd") is not None
            else "no estimate",
        )
    )
    source = document.get("source")
    if source:
        biggest = ", ".join(f"{item['path']} {_size(item['bytes'])}" for item in source["biggest"])
        rows.append(
            (
                "Upload",
                f"{source['files']} files, {_size(source['bytes'])} from {source['directory']} "
                f"(biggest: {biggest})" + (f"; left out: {len(source['skipped'])}" if source["skipped"] else ""),
            )
        )
    elif document.get("uploads") == []:
        rows.append(("Upload", "nothing (the source dir is on S3 already)"))
    if document.get("warnings"):
        rows.append(("Warnings", f"{len(document['warnings'])} (the warning: lines on stderr)"))
    return [f"{label:<12}{value}" for label, value in rows]


def render_dry_run(document: dict[str, Any]) -> str:
    out = io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True, width=console_width())
    estimator = document["estimator"]
    for line in summary_lines(document):
        console.print(line, markup=False)
    console.print("\n[bold]Details[/bold]")
    console.print(f"[bold]Estimator[/bold] {estimator['class']}")
    console.print(_kwargs_table(estimator["kwargs"]))
    console.print("\n[bold]Hosts[/bold] (numbered across the instance groups in this order)")
    console.print(_groups_table(document["instance_groups"], document["cost"]))
    console.print("\n[bold]Channels[/bold]")
    console.print(_inputs_table(document["channels"], estimator["kwargs"]["input_mode"]))
    console.print("\n[bold]Script argv[/bold]")
    console.print(shlex.join(["python", document["entry_point"], *document["argv"]]), markup=False)
    for name, size in document.get("source_files", {}).items():
        console.print(
            f"\n[bold]Added to the source dir[/bold] {name} ({size}: the features section, too long "
            "for a hyperparameter value)"
        )
    console.print(f"\n[bold]Image[/bold] {document['image_uri']}")
    for uri in document.get("uploads", []):
        console.print(f"[bold]Uploaded at submit[/bold] {escape(uri)}")
    for path in document.get("source", {}).get("skipped", []):
        console.print(f"  left out: {escape(path)}")
    console.print(f"[bold]Cost[/bold] {_cost_line(document['cost'])}")
    for line in _watch_lines(document.get("watch") or {}):
        console.print(line, markup=False)
    console.print("\n[bold]CreateTrainingJob request[/bold]")
    console.print(json.dumps(document["request"], indent=2, default=str), markup=False)
    return _trimmed(out.getvalue())


def _trimmed(text: str) -> str:
    """Without the spaces tables pad their last column with."""
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())


def render_processing_dry_run(document: dict[str, Any]) -> str:
    """The text of `dfm data prepare --dry-run`, from its document alone."""
    out = io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True, width=console_width())
    console.print(f"[bold]Dry run[/bold] {document['request']['ProcessingJobName']} (nothing was sent)")
    console.print(f"[bold]Processor[/bold] {document['processor']['class']}")
    write = document["write"]
    console.print(
        f"[bold]Write stage[/bold] {write['train_files']} tasks for the training files"
        f"{' and ' + str(write['eval_files']) + ' for eval' if write['eval_files'] else ''} "
        f"({write['files_per_worker']} per worker) on {write['cluster_vcpus']} vCPUs"
    )
    console.print(_kwargs_table(document["processor"]["kwargs"]))
    console.print("\n[bold]run()[/bold]")
    console.print(_kwargs_table(document["run"]))
    console.print("\n[bold]Uploaded at submit[/bold] (the dry run records them instead)")
    for uri in document["uploads"]:
        console.print(f"  {uri}", markup=False)
    console.print("\n[bold]CreateProcessingJob request[/bold]")
    console.print(json.dumps(document["request"], indent=2, default=str), markup=False)
    return out.getvalue().rstrip("\n")


def render_local_prepare_dry_run(document: dict[str, Any]) -> str:
    """`dfm data prepare --local --dry-run`: what local Spark would read and write; nothing runs."""
    lines = [f"local preparation {document['job_name']} (dry run: Spark not started)", f"  input: {document['input']}"]
    if document.get("eval_input"):
        lines.append(f"  eval input: {document['eval_input']}")
    lines += [f"  writes {files} file(s) to {folder}" for folder, files in document["outputs"].items()]
    lines.append(f"  report: {document['report']}" + (" (statistics only)" if document["stats_only"] else ""))
    return "\n".join(lines)


class _Quiet:
    """Stands in for a progress bar when stderr is not a terminal (logs, CI): no partial lines."""

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


def progress(length: int, label: str):
    if sys.stderr.isatty():
        return click.progressbar(length=length, label=label, file=sys.stderr)
    return _Quiet()
