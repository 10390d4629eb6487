"""What `dfm tune` shows: the ranges table and cost of a dry run, and after a local study the trials table,
its JSON, the plot (PNG) and the best trial as `--set` overrides for `dfm launch`."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from launcher.plans.tuning_plan import TuningPlan

PLOT_FILE = "study.png"


def ranges_rows(tplan: TuningPlan) -> list[dict[str, Any]]:
    return [
        {"hyperparameter": r.name, "type": r.kind, "range": r.describe(), "scaling": r.scaling} for r in tplan.ranges
    ]


def render_dry_run(document: dict[str, Any], tplan: TuningPlan) -> str:
    from launcher.cli.render import _table, _value

    cost = document["cost"]
    lines = [
        f"tuning job {tplan.name}: {tplan.strategy}, {tplan.objective_type.lower()} {tplan.objective_metric}, "
        f"{tplan.max_jobs} trials, {tplan.max_parallel_jobs} at once, early stopping {tplan.early_stopping.lower()}"
    ]
    table = _table("hyperparameter", "type", "range")
    for row in document["ranges"]:
        table.add_row(row["hyperparameter"], row["type"], row["range"])
    static = _table("static hyperparameter", "value")
    for name, value in document["request"]["TrainingJobDefinition"]["StaticHyperParameters"].items():
        static.add_row(name, _value(value))
    usd = f"${cost['max_usd']:,.2f}" if cost.get("max_usd") is not None else "unknown (no price for this type)"
    tail = [
        f"cost ceiling: {usd} ({cost['max_jobs']} trials x ${cost['trial_max_usd'] or 0:,.2f})",
        f"wall time: at most {cost['max_wall_hours']} h ({tplan.rounds} rounds of {tplan.max_parallel_jobs} trials x "
        f"{cost['trial_max_hours']} h)",
        "request: dfm tune SPEC --dry-run --output json",
    ]
    return "\n".join([*lines, _text(table), _text(static), *tail])


def _text(table) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 (recorded, not shown)
    console.print(table)
    return console.export_text().rstrip()


# ---------------------------------------------------------------------------------------------- a study
def trial_rows(study) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state.name in ("WAITING",) or "warm_start_parent" in t.user_attrs:  # a parent study's trial
            continue
        state = "interrupted" if t.user_attrs.get("interrupted") else t.state.name.lower()
        if state == "fail" and t.user_attrs.get("stopped"):
            state = "stopped"
        # a pruned trial's value is its last intermediate (training-side) report, not the objective
        objective = t.value if state == "complete" else None
        last = max(t.intermediate_values.items())[1] if t.intermediate_values else None
        rows.append(
            {
                "trial": t.number,
                "hyperparameters": dict(t.params),
                "objective": objective,
                "state": state,
                "last_report": last,
                "seconds": t.user_attrs.get("seconds"),
                "baseline": bool(t.user_attrs.get("baseline")),
                "retry_of": t.user_attrs.get("retry_of"),
                "job_dir": t.user_attrs.get("job_dir"),
                "failure": t.user_attrs.get("failure"),
                "stopped": t.user_attrs.get("stopped"),
            }
        )
    return rows


def best_row(rows: list[dict], maximize: bool) -> dict | None:
    complete = [r for r in rows if r["state"] == "complete" and r["objective"] is not None]
    if not complete:
        return None
    return (max if maximize else min)(complete, key=lambda r: r["objective"])


def overrides(row: dict) -> list[str]:
    """`--set hyperparameters.x=v` for each tuned value (YAML-parsed by --set: numbers stay numbers)."""
    return [f"--set hyperparameters.{name}={json.dumps(value)}" for name, value in row["hyperparameters"].items()]


def launch_line(spec_path: str, best: dict | None) -> str | None:
    return (f"dfm launch {shlex.quote(spec_path)} " + " ".join(overrides(best))) if best else None


def study_document(tplan: TuningPlan, rows: list[dict], folder: Path, spec_path: str) -> dict[str, Any]:
    best = best_row(rows, tplan.maximize)
    baseline = next((r for r in rows if r["baseline"] and r["state"] == "complete"), None)
    return {
        "tuning_job": tplan.name,
        "folder": str(folder),
        "objective": tplan.objective_metric,
        "ranges": ranges_rows(tplan),
        "goal": tplan.objective_type.lower(),
        "strategy": tplan.strategy,
        "trials": rows,
        "best": best,
        "baseline_objective": baseline["objective"] if baseline else None,
        "plot": str(folder / PLOT_FILE) if (folder / PLOT_FILE).exists() else None,
        "launch": launch_line(spec_path, best),
    }


def sagemaker_document(summary: dict[str, Any], spec_path: str = "SPEC") -> dict[str, Any]:
    """A submitted tuning job's summary (sagemaker_backend.tuning_jobs) in a local study's shape: its trials as
    rows (numbered in the order of their names), SageMaker's best trial, the `dfm launch` line and the plot's input."""
    listed = sorted(summary.get("trial_list") or [], key=lambda t: t["job_name"])
    rows = [
        {
            "trial": number,
            "job_name": t["job_name"],
            "hyperparameters": t["hyperparameters"],
            "objective": t["objective"],
            "state": "complete" if t["status"] == "Completed" else (t["status"] or "").lower(),
            "last_report": None,
            "seconds": None,
            "baseline": False,
            "retry_of": None,
            "job_dir": None,
            "failure": t.get("failure_reason"),
            "stopped": None,
        }
        for number, t in enumerate(listed)
    ]
    best = summary.get("best")
    best = next((r for r in rows if best and r["job_name"] == best["job_name"]), None) or (
        {
            "trial": None,
            "job_name": best["job_name"],
            "hyperparameters": best["hyperparameters"],
            "objective": best["objective"],
        }
        if best
        else None
    )
    objective = summary["objective"]
    return {
        "tuning_job": summary["job_name"],
        "objective": objective["metric"],
        "goal": (objective["type"] or "").lower(),
        "strategy": summary.get("strategy"),
        "ranges": summary.get("ranges") or [],
        "trials": rows,
        "best": best,
        "launch": launch_line(spec_path, best),
        "plot": None,
    }


def render_sagemaker(summary: dict[str, Any]) -> str:
    """`dfm status` of a tuning job (and the end of `dfm tune --wait`): counts, best, each trial, and the summary's
    `launch` line and `plot` (sagemaker_document's) when it has them."""
    trials, objective = summary["trials"], summary["objective"]
    lines = [
        f"{summary['job_name']}: {summary['status']} ({summary['strategy']}, {objective['type']} "
        f"{objective['metric']})",
        f"trials: {trials['completed']} completed, {trials['running']} running, {trials['stopped']} stopped, "
        f"{trials['failed']} failed (of {summary['max_jobs']})",
    ]
    if summary.get("best"):
        best = summary["best"]
        lines.append(
            f"best: {best['job_name']} {objective['metric']}={best['objective']} {json.dumps(best['hyperparameters'])}"
        )
    for trial in summary.get("trial_list", []):
        lines.append(
            f"  {trial['job_name']}  {trial['status']}  {trial['objective']}  {json.dumps(trial['hyperparameters'])}"
        )
    if summary.get("failure_reason"):
        lines.append(f"failure: {summary['failure_reason']}")
    if summary.get("launch"):
        lines.append(f"launch it: {summary['launch']}")
    if summary.get("plot"):
        lines.append(f"plot: {summary['plot']}")
    lines.append(summary["console_url"])
    return "\n".join(lines)


def write_plot(document: dict[str, Any], path: Path, echo) -> None:
    """Draw the plot into `path` and name it in the document (matplotlib missing: a note instead)."""
    try:
        if plot(document, path) is not None:
            document["plot"] = str(path)
    except ImportError:
        echo("[dfm tune] no plot: matplotlib is not installed (pip install 'dfm[tune]')")


def render_study(document: dict[str, Any]) -> str:
    from launcher.cli.render import _table

    names = sorted({name for r in document["trials"] for name in r["hyperparameters"]})
    table = _table("trial", *names, document["objective"], "state", "seconds")
    for r in document["trials"]:
        state = (
            r["state"]
            + (" (untuned)" if r["baseline"] else "")
            + (f" (rerun of {r['retry_of']})" if r["retry_of"] is not None else "")
        )
        values = [_short(r["hyperparameters"].get(name)) for name in names]
        objective = f"{r['objective']:.4f}" if r["objective"] is not None else "-"
        if r["state"] == "pruned" and r["last_report"] is not None:
            state += f" (at {r['last_report']:.4f})"
        table.add_row(str(r["trial"]), *values, objective, state, f"{r['seconds']:.0f}" if r["seconds"] else "-")
    lines = [_text(table)]
    best = document["best"]
    if best is None:
        lines.append("no trial completed")
    else:
        lines.append(
            f"best: trial {best['trial']}, {document['objective']} = {best['objective']:.4f}"
            + (
                f" (untuned: {document['baseline_objective']:.4f})"
                if document["baseline_objective"] is not None
                else ""
            )
        )
        lines.append(f"launch it: {document['launch']}")
    if document["plot"]:
        lines.append(f"plot: {document['plot']}")
    return "\n".join(lines)


def no_trial_completed(document: dict[str, Any]) -> str:
    """The one line of a study whose trials all failed: each trial's reason."""
    reasons = "; ".join(f"trial {r['trial']}: {r['failure'] or r['stopped'] or r['state']}" for r in document["trials"])
    runs = document["folder"]
    return f"no trial of {document['tuning_job']} completed ({reasons or 'none ran'}); its runs are in {runs}"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def plot(document: dict[str, Any], path: Path) -> Path | None:
    """Objective per trial with the best so far, and the objective against each tuned hyperparameter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in document["trials"] if r["objective"] is not None and r["state"] == "complete"]
    if not done:
        return None
    names = sorted({name for r in done for name in r["hyperparameters"]})
    maximize = document["goal"] == "maximize"
    log_scaled = {r["hyperparameter"] for r in document["ranges"] if r["scaling"] == "Logarithmic"}
    columns = min(3, 1 + len(names))
    rows = -(-(1 + len(names)) // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    axes = list(grid.flat)
    for unused in axes[1 + len(names) :]:
        unused.set_visible(False)
    first = axes[0]
    numbers, values = [r["trial"] for r in done], [r["objective"] for r in done]
    best, running = [], None
    for value in values:
        running = value if running is None else (max if maximize else min)(running, value)
        best.append(running)
    first.plot(numbers, values, "o", label="trial")
    first.step(numbers, best, where="post", label="best so far")
    first.set_xlabel("trial")
    first.set_ylabel(document["objective"])
    first.legend(loc="best", fontsize="small")
    for axis, name in zip(axes[1:], names):
        xs = [r["hyperparameters"].get(name) for r in done]
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
        axis.plot(xs if numeric else [str(x) for x in xs], values, "o")
        if numeric and name in log_scaled and min(xs) > 0:
            axis.set_xscale("log")
        axis.set_xlabel(name)
    fig.suptitle(f"{document['tuning_job']}: {document['objective']} ({document['goal']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
