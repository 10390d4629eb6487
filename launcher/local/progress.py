"""What a local run shows on the terminal: the processes' lines (less TensorFlow's INFO chatter), and the progress
(`metric_lines.Progress`) on a live bar or as a plain line.
"""

from __future__ import annotations

import re

from launcher.metric_lines import PROGRESS_LINE, Progress
from launcher.watching import Total, TrainingBar, on_terminal

# The header of a TensorFlow C++ log record, group 1 or 2 the level: TF's own format
# ("2026-11-21 21:20:07.390735: I tensorflow/core/util/port.cc:111] ...") or absl's (newer TF:
# "I1121 21:20:07.390735   1234 port.cc:113] ...", "I0000 00:00:1732224007.390735 ..." before absl's init).
_TF_RECORD = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF])|([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+)"
    r" \S+:\d+\] "
)
# What the rest of a multi-line record looks like: blank or indented lines, protobuf text
# (`name {`, `}`, `name: value`, as in the ps servers' SessionOptions dumps) and the second line of
# the CPU-feature banner. Any other line ends the record (and is shown).
_CONTINUATION = re.compile(r"^(?:|\s.*|\}|[A-Za-z_][\w.]*(?: \{|: .*)|To enable the following instructions:.*)$")


class TerminalFilter:
    """Which process lines reach the terminal: all but TensorFlow's INFO-level C++ log records (the
    header line and its continuation lines). Warnings, errors and everything else are shown; the
    per-process log files get every line regardless. `verbose` shows everything."""

    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.hidden = 0
        self._in_info: dict[str, bool] = {}  # label -> inside an INFO record of that process

    def shows(self, label: str, line: str) -> bool:
        if self.verbose:
            return True
        if PROGRESS_LINE.search(line):  # the progress bar's; in the log files
            return False
        record = _TF_RECORD.match(line)
        if record:
            self._in_info[label] = (record.group(1) or record.group(2)) == "I"
        elif self._in_info.get(label) and not _CONTINUATION.match(line):
            self._in_info[label] = False
        if self._in_info.get(label):
            self.hidden += 1
            return False
        return True


class PlainDisplay:
    """Lines through `echo`; the progress line every `every_s` seconds when it changed (logs, pipes, CI)."""

    def __init__(self, echo, every_s: float = 10.0):
        self.echo, self.every_s, self._last = echo, every_s, 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def line(self, text: str) -> None:
        self.echo(text)

    def progress(self, progress: Progress, now: float) -> None:
        if progress.changed and now - self._last >= self.every_s:
            self.echo(f"[dfm local] progress: {progress.line()}")
            progress.changed, self._last = False, now


class LiveDisplay:
    """On a terminal: the lines scroll, and a progress bar stays at the bottom (watching.TrainingBar): steps and
    examples done of the run's total, examples/s, the last train loss, the latest eval and the time left."""

    def __init__(self, console=None):
        self.console = console
        self.total: Total | None = None  # set before the display starts (runner: run_total)
        self.bar: TrainingBar | None = None

    def __enter__(self):
        self.bar = TrainingBar(self.total, self.console)
        self.bar.__enter__()
        if self.total is not None:
            steps = f"{self.total.steps:,} steps" if self.total.steps else "steps"
            self.bar.print(f"[dfm local] progress: {steps}; {self.total.how}")
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def line(self, text: str) -> None:
        if self.bar is None:
            from rich.console import Console

            self.bar = TrainingBar(self.total, self.console or Console())
        self.bar.print(text)

    def progress(self, progress: Progress, now: float) -> None:
        if progress.changed or progress.moved:
            latest = max(progress.train.values(), key=lambda v: v.get("step", 0), default={})
            phase = "training" + (
                f" (eval auc {progress.eval['auc']:.4f})" if progress.eval and "auc" in progress.eval else ""
            )
            self.bar.update(progress.steps_done, progress.examples_per_sec, latest.get("loss"), phase)
            progress.changed = progress.moved = False


def display_for(echo, console=None):
    """Live display when the caller echoes to a terminal the plain way (or a `console` is handed in); otherwise
    plain lines through `echo`."""
    import click

    if console is not None or (echo in (print, click.echo) and on_terminal()):
        return LiveDisplay(console)
    return PlainDisplay(echo)
