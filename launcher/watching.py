"""What dfm shows while long work runs, on a terminal only: a rich Progress at the bottom of the screen, the
other lines scrolling above it. Training: steps and examples done of the total (when the plan tells it), examples/s,
the last train loss and the time left, and the phase (SageMaker's secondary status); counts (tune's trials); stages
(data prepare). Off a terminal (CI, a pipe) and with `-o json` nothing of this is printed: the callers keep their
plain lines. rich is imported here only, when a terminal is there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


def on_terminal() -> bool:
    return sys.stdout.isatty()


@dataclass(frozen=True)
class Total:
    """What a run's steps are counted out of: `steps` (None: not known) and how that is known."""

    steps: int | None
    examples_per_step: int
    how: str

    def examples(self, step: int) -> int:
        return step * self.examples_per_step


def _console(console):
    if console is not None:
        return console
    from rich.console import Console

    return Console()


class TrainingBar:
    """A training run on a rich Progress: phase, steps done of the total, examples, examples/s, last loss, time left.
    A context manager: the bar shows while inside, and leaves no trace in the scrollback (transient)."""

    def __init__(self, total: Total | None = None, console=None, phase: str = "training"):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.total = total or Total(None, 0, "")
        self.console = _console(console)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps  {task.fields[detail]}"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task(phase, total=self.total.steps, detail="", start=True)
        self.step = 0

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def print(self, text: str) -> None:
        """A line above the bar."""
        from rich.text import Text

        self.console.print(Text(text), highlight=False, soft_wrap=True)

    def detail(self, step: int, examples_per_sec: float | None, loss: float | None) -> str:
        parts = []
        if self.total.examples_per_step:
            done = f"{self.total.examples(step):,}"
            if self.total.steps:
                done += f"/{self.total.examples(self.total.steps):,}"
            parts.append(f"{done} examples")
        if examples_per_sec:
            parts.append(f"{examples_per_sec:,.0f} examples/s")
        if loss is not None:
            parts.append(f"loss {loss:.4f}")
        return " | ".join(parts)

    def update(
        self,
        step: int | None,
        examples_per_sec: float | None = None,
        loss: float | None = None,
        phase: str | None = None,
    ) -> None:
        if step is not None:
            self.step = step
        speed = examples_per_sec
        if speed is None and self.total.examples_per_step:
            task = self.progress.tasks[0]
            speed = task.speed * self.total.examples_per_step if task.speed else None
        fields = {"detail": self.detail(self.step, speed, loss)}
        if self.total.steps and self.step > self.total.steps:  # "about": the epochs held a few steps more
            fields["total"] = self.step
        if phase is not None:
            fields["description"] = phase
        self.progress.update(self.task, completed=self.step, **fields)
        self.progress.refresh()  # drawn as it changes (rarely: a line or a poll), not only at the next tick


class CountBar:
    """Counts on a rich Progress (tune's trials: done of all, running, failed, the best so far)."""

    def __init__(self, description: str, total: int | None, console=None):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = _console(console)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task(description, total=total, detail="")

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self, done: int, detail: str, total: int | None = None) -> None:
        self.progress.update(self.task, completed=done, detail=detail, **({"total": total} if total else {}))
        self.progress.refresh()


class Stages:
    """Named stages one after the other on a rich status line (a spinner and the stage's name, time so far)."""

    def __init__(self, console=None):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = _console(console)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task = None

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def stage(self, name: str) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(name, total=None)
