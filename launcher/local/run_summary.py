"""What a local run prints when it ends: the failure and the failed process's last lines, then the summary (speed,
losses, the final evaluation beside the baseline, where the model, logs, exports, curves and TensorBoard are)."""

from __future__ import annotations

from pathlib import Path

from launcher.facts import conventions
from launcher.local import checkpoint_store, curves
from launcher.metric_lines import Progress, baseline_line


def failure_lines(reason: str, culprit, tails) -> list[str]:
    """The failure, then the last lines of the process that failed the run (each of mpirun's ranks when mpirun
    is the one that failed)."""
    lines = [f"[dfm local] FAILED: {reason}"]
    if culprit is None:
        return lines
    labels = [
        label for label in tails if label == culprit.label or (culprit.rank_labels is not None and "/rank" in label)
    ]
    for label in labels:
        lines.append(f"[dfm local] last lines of {label}:")
        lines += [f"    {line}" for line in list(tails[label])[-12:]]
    return lines


def summary_lines(
    request, progress: Progress, *, done: bool, wall_s: float, prepared: bool, hidden: int, memory_lines: list[str]
) -> list[str]:
    """The summary of a run that ended (`done`) or was stopped; "" where a line has nothing to say."""
    speed = progress.mean_examples_per_sec
    last = progress.last_train_loss()
    evaluation = progress.eval
    hidden_note = (
        f" (all lines; {hidden} TensorFlow INFO lines were not shown here, --verbose shows them)" if hidden else ""
    )
    lines = [
        f"[dfm local] {'done' if done else 'stopped'} in {wall_s:.1f} s",
        f"  examples/s: {speed:,.0f}" if speed else "  examples/s: (no train metric lines)",
        f"  last finite train loss: {last[1]:g} at step {last[0]}" if last else "",
        "  final eval: " + (" ".join(f"{k}={v:g}" for k, v in evaluation.items()) if evaluation else "(none)"),
        baseline_line(evaluation),
        f"  ran on: {request.runtime.note}",
        f"  model: {Path(request.hosts[0].root) / 'model'}" if prepared else "",
        f"  logs: {request.log_dir}" + hidden_note,
    ]
    lines += [f"  exported: {path}" for path in progress.exported]
    lines += memory_lines
    lines += [f"  warning: {warning}" for warning in progress.warnings]
    return lines + curves_lines(request, progress)


def tensorboard_dirs(request) -> list[Path]:
    """The hosts' TensorBoard folders (TensorBoardOutputConfig.LocalPath) that hold event files."""
    relative = conventions.TENSORBOARD_LOCAL_PATH[len(conventions.CONTAINER_BASE_DIR) + 1 :]
    return [
        folder
        for folder in (Path(h.root) / relative for h in request.hosts)
        if folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
    ]


def curves_lines(request, progress: Progress) -> list[str]:
    """The learning curves drawn into the run folder, and how to open each host's TensorBoard folder."""
    job_dir = Path(request.job_dir)
    lines = []
    try:
        drawn = curves.plot(progress.history, job_dir / curves.PLOT_FILE, request.job_name)
        if drawn is not None:
            lines.append(f"  learning curves: {drawn}")
    except ImportError:
        lines.append("  learning curves: not drawn, matplotlib is not installed (pip install 'dfm[tune]')")
    except OSError as err:
        failed = checkpoint_store.write_failed(err, "the plot", job_dir / curves.PLOT_FILE)
        lines.append(f"  learning curves: not drawn: {failed.message}")
    lines += [f"  tensorboard: tensorboard --logdir {folder}" for folder in tensorboard_dirs(request)]
    return lines
