"""`dfm launch --wait` on a terminal: the job's phase (SageMaker's SecondaryStatus: Starting, Downloading,
Training, Uploading...) on a progress bar at the bottom of the screen, then its steps, examples, examples/s and
last loss from the metric lines the log follower reads, the log lines scrolling above it (watching.TrainingBar).
Off a terminal and with `-o json` there is no bar: the follower's plain lines only."""

from __future__ import annotations

from launcher.metric_lines import Progress
from launcher.plans import step_total
from launcher.watching import TrainingBar, on_terminal


def terminal_console(echo):
    """The console to draw on when `echo` prints plainly to a terminal; None otherwise (CI, a pipe, -o json)."""
    import click

    if echo in (print, click.echo) and on_terminal():
        from rich.console import Console

        return Console()
    return None


class JobWatch:
    """A SageMaker job's phase and progress on a bar; `echo` prints a line above it."""

    def __init__(self, plan, console):
        total = step_total.planned_total(plan)  # the rows of an epoch on S3 are not counted here
        self.bar = TrainingBar(total, console, phase="Starting")
        self.progress = Progress()
        self.phase_name = "Starting"

    def __enter__(self):
        self.bar.__enter__()
        if self.bar.total.steps:
            self.bar.print(f"[dfm] progress: {self.bar.total.steps:,} steps; {self.bar.total.how}")
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def echo(self, line: str) -> None:
        self.bar.print(line)

    def phase(self, name: str | None) -> None:
        if name and name != self.phase_name:
            self.phase_name = name
            self._show()

    def line(self, host: str, message: str) -> None:
        self.progress.feed(host, message)
        if self.progress.changed or self.progress.moved:
            self.progress.changed = self.progress.moved = False
            self._show()

    def _show(self) -> None:
        p = self.progress
        latest = max(p.train.values(), key=lambda v: v.get("step", 0), default={})
        self.bar.update(p.steps_done, p.examples_per_sec, latest.get("loss"), self.phase_name)
