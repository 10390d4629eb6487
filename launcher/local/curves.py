"""The learning curves of a local run, drawn from the metric lines it collected (metric_lines.Progress.history):
train and eval AUC per step with the best evaluation marked (and the logistic-regression baseline's eval AUC
when the scripts trained one), and the losses; a PNG beside the run's logs, so
a run can be judged without TensorBoard. matplotlib is imported only to draw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

PLOT_FILE = "learning-curves.png"


def series(history: Iterable[tuple[str, dict[str, float]]]) -> dict[str, dict[int, dict[str, float]]]:
    """kind -> step -> values. A step's first line counts: the chief repeats the exported evaluation's line last."""
    found: dict[str, dict[int, dict[str, float]]] = {"train": {}, "eval": {}}
    for kind, values in history:
        if "step" in values:
            found.setdefault(kind, {}).setdefault(int(values["step"]), values)
    return found


def best_eval(points: dict[int, dict[str, float]]) -> tuple[int, float] | None:
    """(step, AUC) of the evaluation with the highest AUC."""
    scored = [(values["auc"], step) for step, values in points.items() if values.get("auc") == values.get("auc")]
    if not scored:
        return None
    auc, step = max(scored)
    return step, auc


def plot(history: Iterable[tuple[str, dict[str, float]]], path: Path, title: str) -> Path | None:
    """Draw the curves into `path`; None when there is no metric line. ImportError without matplotlib."""
    fig = draw(history, title)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw(history: Iterable[tuple[str, dict[str, float]]], title: str):
    """The figure of the curves (matplotlib), or None without a metric line. Every logged window is a marked point,
    so a run of one window (one train line, one evaluation) still shows its values, not a line of one point, which
    matplotlib draws as nothing."""
    found = series(history)
    train, evals = found["train"], found["eval"]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (auc_axis, loss_axis) = plt.subplots(1, 2, figsize=(10, 3.6))
    for metric, axis in (("auc", auc_axis), ("loss", loss_axis)):
        for kind, points, style in (("train", train, ".-"), ("eval", evals, "o-")):
            steps = sorted(s for s, v in points.items() if metric in v)
            if steps:
                axis.plot(steps, [points[s][metric] for s in steps], style, label=f"{kind} {metric}")
        axis.set_xlabel("step")
        axis.set_ylabel(metric)
    baseline = sorted(s for s, v in evals.items() if "baseline_auc" in v)
    if baseline:
        auc_axis.plot(
            baseline, [evals[s]["baseline_auc"] for s in baseline], "s--", label="eval auc, logistic regression"
        )
    best = best_eval(evals)
    if best is not None:
        auc_axis.plot(
            [best[0]],
            [best[1]],
            "*",
            markersize=14,
            color="tab:red",
            label=f"best eval auc {best[1]:.4f} (step {best[0]})",
        )
    for axis in (auc_axis, loss_axis):
        if axis.lines:
            axis.legend(loc="best", fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
