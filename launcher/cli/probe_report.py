"""`dfm probe`'s outputs: the dry run's text, the report's document (JSON), its table and recommendation as text,
and the PNG of time against cost per epoch with the Pareto front marked (matplotlib, imported when drawing)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from launcher.cli.render import _table
from launcher.plans import probe_results
from launcher.plans.probe_plan import ProbePlan

PLOT_FILE = "probe.png"
REPORT_FILE = "probe.json"
LOCAL_NOTE = (
    "local numbers rank layouts, processes, threads and batch sizes on this machine's {cores} cores, not instance "
    "types (every candidate ran on the same cores): the $ columns price each candidate's instances at the "
    "throughput measured here, and no instance type is recommended from them"
)


def _text(table) -> str:
    """The table as text, as wide as its eleven columns need (a report is read in a wide terminal or a file)."""
    from rich.console import Console

    console = Console(width=170, record=True, file=open(os.devnull, "w"))  # noqa: SIM115 (recorded, not shown)
    console.print(table)
    return "\n".join(line.rstrip() for line in console.export_text().rstrip().splitlines())


def _money(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"${value:,.{max(digits, 4) if 0 < abs(value) < 0.1 else digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _settings(settings: list[str], sep: str = " ") -> str:
    return sep.join(settings) or "(the spec as it is)"


def set_lines(settings: list[str]) -> str:
    """--set options as a shell reads them back: each line quoted where it needs it."""
    return " ".join(f"--set {shlex.quote(line)}" for line in settings)


def launch_line(spec_path: str, settings: list[str]) -> str:
    return " ".join(["dfm launch", shlex.quote(spec_path), set_lines(settings)]).rstrip()


# ------------------------------------------------------------------------------------------------ dry run
def render_dry_run(document: dict[str, Any]) -> str:
    table = _table("#", "settings", "job", "instances", "$/h", "ceiling")
    for entry in document["requests"]:
        groups = entry["cost"].get("groups", [])
        hourly = sum((g["instance_hourly_usd"] or 0) * g["instance_count"] for g in groups)
        table.add_row(
            str(entry["candidate"]),
            _settings(entry["settings"]),
            entry["job_name"],
            " + ".join(f"{g['instance_count']} x {g['instance_type']}" for g in groups),
            _money(hourly, 3),
            _money(entry["cost"].get("max_usd")),
        )
    lines = [
        f"probe {document['probe']}: {len(document['requests'])} training job(s), max_steps "
        f"{document['max_steps']}, at most {document['max_parallel']} at a time",
        _text(table),
    ]
    lines += refused_lines(document["refused"])
    ceiling = document["cost_ceiling"]
    lines.append(f"cost ceiling: {_money(ceiling['max_usd'])} ({ceiling['note']})")
    lines.append("each request in full: --output json")
    return "\n".join(lines)


def render_local_dry_run(document: dict[str, Any]) -> str:
    from launcher.local.describe import render_request

    lines = []
    for run in document["runs"]:
        lines += [f"-- candidate {run['candidate']}", render_request(run)]
    return "\n".join([*lines, *refused_lines(document["refused"])])


def refused_lines(refused: list[dict[str, Any]]) -> list[str]:
    lines = []
    for entry in refused:
        lines.append(f"refused: candidate {entry['candidate']} ({_settings(entry['settings'])}):")
        lines += [f"    {error}" for error in entry["errors"]]
    return lines


# --------------------------------------------------------------------------------------------- the report
def report_document(
    probe: ProbePlan,
    measurements: list[probe_results.Measurement],
    *,
    local: bool,
    deadline_h: float | None,
    budget_usd: float | None,
    folder: Path,
) -> dict[str, Any]:
    table = probe_results.rows(probe, measurements, local=local)
    recommendation = probe_results.recommend(table, probe, deadline_h=deadline_h, budget_usd=budget_usd, local=local)
    document = {
        "probe": probe.name,
        "spec": probe.spec_path,
        "backend": "local" if local else "sagemaker",
        "max_steps": probe.max_steps,
        "rows": probe.rows,
        "rows_source": probe.rows_source,
        "epochs": probe.epochs,
        "deadline_h": deadline_h,
        "budget_usd": budget_usd,
        "candidates": table,
        "refused": [
            {"candidate": c.number, "settings": list(c.settings), "errors": list(c.errors)} for c in probe.refused
        ],
        "recommendation": recommendation,
        "indistinguishable": probe_results.indistinguishable_groups(table),
        "min_windows": probe_results.MIN_WINDOWS,
        "launch": None,
        "folder": str(folder),
        "plot": None,
        "note": LOCAL_NOTE.format(cores=os.cpu_count()) if local else None,
    }
    if recommendation is not None and recommendation["set"] is not None:
        document["launch"] = launch_line(probe.spec_path, recommendation["set"])
    return document


def _speed(entry: dict[str, Any]) -> str:
    """The median window's examples/s and the range of the windows (slowest-fastest)."""
    speed, spread = entry["examples_per_sec"], entry.get("spread") or {}
    if not speed:
        return "-"
    if spread.get("low") is None:
        return f"{speed:,.0f}"
    return f"{speed:,.0f} ({spread['low']:,.0f}-{spread['high']:,.0f})"


def render_report(document: dict[str, Any]) -> str:
    per = "epoch" if document["rows"] else "1M ex"
    table = _table(
        "#",
        "settings",
        "instances",
        "examples/s",
        "CPU",
        "$/h",
        "$/1M ex",
        f"time/{per}",
        f"$/{per}",
        f"job ({document['epochs']} ep)",
        "status",
    )
    for e in document["candidates"]:
        speed = e["examples_per_sec"]
        time_per = e["epoch_s"] if document["rows"] else (1e6 / speed if speed else None)
        cost_per = e["epoch_usd"] if document["rows"] else e["usd_per_million_examples"]
        cpu = e["utilization"].get("CPUUtilization")
        ps_cpu = e.get("ps_utilization", {}).get("CPUUtilization")
        gpu = e["utilization"].get("GPUUtilization")  # percent of one GPU
        job = f"{_duration(e['job_s'])} {_money(e['job_usd'])}" if e["job_s"] is not None else "-"
        table.add_row(
            str(e["candidate"]) + ("*" if e.get("pareto") else ""),
            _settings(e["settings"], "\n"),
            e["instances"],
            _speed(e),
            (f"{cpu:.0f}%" if cpu is not None else "-")
            + (f"\nGPU {gpu:.0f}%" if gpu is not None else "")
            + (f"\nps {ps_cpu:.0f}%" if ps_cpu is not None else ""),
            _money(e["usd_per_hour"], 3),
            _money(e["usd_per_million_examples"], 4),
            _duration(time_per),
            _money(cost_per),
            job,
            e["status"],
        )
    local = document["backend"] == "local"
    order = "examples/s" if local else f"cost per {'epoch' if document['rows'] else 'million examples'}"
    lines = [
        f"probe {document['probe']} ({document['backend']}, max_steps {document['max_steps']}): "
        f"sorted by {order}; * on the Pareto front; examples/s: the median window (slowest-fastest) of at least "
        f"{document.get('min_windows', probe_results.MIN_WINDOWS)} after warm-up",
        _text(table),
    ]
    if not document["rows"]:
        lines.append("no row count (no stats.json beside the train channel): give --rows N for time and cost per epoch")
    if document.get("rows_source"):
        lines.append(f"rows of one epoch: {document['rows']:,} from {document['rows_source']}")
    for e in document["candidates"]:
        if e.get("price_basis", "on-demand") != "on-demand":
            lines.append(f"candidate {e['candidate']} $/h: {e['price_basis']}")
        if e["reason"]:
            lines.append(f"candidate {e['candidate']} {e['status']}: {e['reason']}")
        elif e["status"] == "not measured":
            lines.append(f"candidate {e['candidate']} not measured")
        if e["note"]:
            lines.append(f"candidate {e['candidate']}: {e['note']}")
        if e.get("memory"):
            peaks = ", ".join(f"{host} {peak / (1 << 20):,.0f} MiB" for host, peak in e["memory"].items())
            lines.append(
                f"candidate {e['candidate']} peak memory per host: {peaks} (per process: its run's memory.json)"
            )
    lines += refused_lines(document["refused"])
    if document["note"]:
        lines.append(f"note: {document['note']}")
    for group in document.get("indistinguishable") or []:
        lines.append(
            f"indistinguishable: candidates {', '.join(map(str, group))} (their windows' ranges overlap, or their "
            f"medians are within {probe_results.SAME_WITHIN:.0%})"
        )
    recommendation = document["recommendation"]
    if recommendation is not None and recommendation["set"] is None:
        lines.append(
            f"no recommendation: candidates {', '.join(map(str, recommendation['tied']))} are indistinguishable "
            f"here and differ in {', '.join(recommendation['differing'])}: a longer probe (--max-steps) or a "
            "probe on SageMaker can tell them apart"
        )
    elif recommendation is None:
        lines.append(
            "no recommendation: no candidate was measured"
            + (" within the deadline or budget" if document["deadline_h"] or document["budget_usd"] else "")
        )
    else:
        lines.append(f"recommended ({recommendation['why']}): candidate {recommendation['candidate']}")
        lines += [f"  --set {shlex.quote(line)}" for line in recommendation["set"]] or ["  (the spec as it is)"]
        for key in recommendation.get("not_told_apart") or []:
            lines.append(f"  ({key}: not told apart here, every candidate ran on the same cores; the spec's is kept)")
        lines.append(f"launch it: {document['launch']}")
    if document["plot"]:
        lines.append(f"plot: {document['plot']}")
    return "\n".join(lines)


def plot(document: dict[str, Any], path: Path) -> Path | None:
    """Time against cost per epoch (per million examples without a row count), the Pareto front joined."""
    per_epoch = bool(document["rows"])
    points = []
    for e in document["candidates"]:
        speed = e["examples_per_sec"]
        time_s = e["epoch_s"] if per_epoch else (1e6 / speed if speed else None)
        cost = e["epoch_usd"] if per_epoch else e["usd_per_million_examples"]
        if time_s is not None and cost is not None:
            points.append((time_s / 60, cost, e["candidate"], e.get("pareto", False)))
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.scatter([p[0] for p in points], [p[1] for p in points], color="tab:blue")
    front = sorted((p for p in points if p[3]), key=lambda p: p[0])
    axes.plot([p[0] for p in front], [p[1] for p in front], color="tab:red", marker="o", label="Pareto front")
    for minutes, cost, number, _ in points:
        axes.annotate(str(number), (minutes, cost), textcoords="offset points", xytext=(4, 4))
    unit = "epoch" if per_epoch else "million examples"
    axes.set_xlabel(f"minutes per {unit}")
    axes.set_ylabel(f"$ per {unit}")
    axes.set_title(f"{document['probe']} ({document['backend']})")
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
