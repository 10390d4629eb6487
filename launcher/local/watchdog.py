"""The stall watchdog of a local run (the spec's `stall_timeout`): the run is stopped when the chief has printed no
metric line for that many seconds (counted from the start until its first one), and the process most likely
to blame is named: one stopped by a signal, else the one whose CPU went idle first, else the one silent longest.
What an on-call engineer needs: which process, its pid, and what it said last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

SAMPLE_EVERY_S = 1.0  # CPU times of the process trees, read this often


@dataclass
class Silence:
    """What one supervised process (and its descendants) was doing when the run stalled."""

    label: str
    pid: int
    stopped_pid: int | None  # a process of its tree stopped by a signal (SIGSTOP, a debugger)
    line_age_s: float
    last_line: str
    cpu_idle_s: float

    def describe(self) -> str:
        if self.stopped_pid is None:
            state = f"CPU idle for {self.cpu_idle_s:.0f} s"
        else:
            state = "stopped by a signal" + (
                f": its process {self.stopped_pid}" if self.stopped_pid != self.pid else ""
            )
        said = f'last line {self.line_age_s:.0f} s ago: "{self.last_line}"' if self.last_line else "no line yet"
        return f"{self.label} (pid {self.pid}, {state}, {said})"


class StallWatchdog:
    def __init__(self, timeout_s: float, now: float | None = None):
        self.timeout_s = float(timeout_s)
        self.started = time.monotonic() if now is None else now
        self.last_metric: float | None = None
        self.lines: dict[str, tuple[float, str]] = {}  # label -> (when, its last line)
        self.cpu: dict[str, tuple[float, float]] = {}  # child label -> (CPU seconds of its tree, when they last grew)
        self._sampled = float("-inf")

    def saw(self, label: str, line: str, metric: bool, now: float) -> None:
        self.lines[label] = (now, line)
        if metric:
            self.last_metric = now

    def expired(self, now: float) -> bool:
        return now - (self.last_metric if self.last_metric is not None else self.started) > self.timeout_s

    def reason(self, now: float) -> str:
        if self.last_metric is None:
            return f"no metric line from the chief in the first {self.timeout_s:.0f} s (stall_timeout); stopped"
        silent = now - self.last_metric
        return f"no metric line from the chief for {silent:.0f} s (stall_timeout {self.timeout_s:.0f} s); stopped"

    def sample(self, children, now: float) -> None:
        """Note whose CPU time still grows (call often; reads the trees once a second)."""
        if now - self._sampled < SAMPLE_EVERY_S:
            return
        self._sampled = now
        for child in children:
            used = sum(_cpu_seconds(p) for p in _tree(child.popen.pid))
            previous = self.cpu.get(child.label)
            if previous is None or used > previous[0]:
                self.cpu[child.label] = (used, now)

    def silences(self, children, now: float) -> list[Silence]:
        """Every running process, the most likely culprit first."""
        found = []
        for child in children:
            stopped = next((p.pid for p in _tree(child.popen.pid) if _status(p) == psutil.STATUS_STOPPED), None)
            when, line = self._last_line(child, now)
            cpu_since = self.cpu.get(child.label, (0.0, self.started))[1]
            found.append(Silence(child.label, child.popen.pid, stopped, now - when, line, now - cpu_since))
        return sorted(found, key=lambda s: (s.stopped_pid is None, -s.cpu_idle_s, -s.line_age_s))

    def _last_line(self, child, now: float) -> tuple[float, str]:
        """The child's own last line, or its ranks' (mpirun writes theirs under their labels), or none."""
        mine = [
            v
            for label, v in self.lines.items()
            if label == child.label or (child.rank_labels is not None and "/rank" in label)
        ]
        return max(mine) if mine else (self.started, "")


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except psutil.Error:
        return 0.0


def _status(proc: psutil.Process) -> str | None:
    try:
        return proc.status()
    except psutil.Error:
        return None
