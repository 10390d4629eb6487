"""`dfm probe --local`: each runnable candidate a local run of its probe plan (runner.LocalRun), one after the other,
measured from its metric lines. The hosts are simulated on this machine's cores, so the numbers rank layouts
here, not instance types. Ctrl-C (or SIGTERM) stops the running candidate and starts no other. While they run, a
board shows one line per candidate; each run's lines stay in its logs folder.
"""

from __future__ import annotations

import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from launcher.errors import DfmError
from launcher.local.describe import request_document
from launcher.local.local_request import LocalRequest, build_request
from launcher.local.probe_board import BoardRow, ProbeBoard
from launcher.local.runner import LocalRun
from launcher.plans.probe_plan import ProbePlan
from launcher.plans.probe_results import Measurement, ProbeInterrupted, steady_throughput, train_samples

Echo = Callable[[str], None]


@dataclass(frozen=True)
class LocalProbeRequest:
    probe: ProbePlan
    runs: tuple[tuple[int, LocalRequest], ...]  # (candidate number, its local run)

    def document(self) -> dict[str, Any]:
        return {
            "probe": self.probe.name,
            "max_steps": self.probe.max_steps,
            "runs": [{"candidate": number, **request_document(run)} for number, run in self.runs],
            "refused": [
                {"candidate": c.number, "settings": list(c.settings), "errors": list(c.errors)}
                for c in self.probe.refused
            ],
        }


def dryrun(probe: ProbePlan) -> LocalProbeRequest:
    return LocalProbeRequest(probe, tuple((c.number, build_request(c.plan)) for c in probe.runnable))


class CandidateDisplay:
    """A probe run's display: its processes' lines only in the run folder's logs, its progress a row of the board."""

    def __init__(self, run: ProbeRun):
        self.run = run

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def line(self, text: str) -> None:
        return None

    def progress(self, progress, now: float) -> None:
        self.run.show(running=True)


class ProbeRun(LocalRun):
    """A local run that keeps its train samples per process and the time of its first one, and shows its progress
    as one row of `board`; the run's own lines (dfm's notes and summary) go to `dfm-local.log` in its logs."""

    LOG = "dfm-local.log"

    def __init__(
        self,
        request: LocalRequest,
        *,
        echo: Echo,
        board: ProbeBoard | None = None,
        number: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.own_lines: list[str] = []
        super().__init__(request, echo=self.own_lines.append if board is not None else echo)
        self.board, self.number = board, number
        if board is not None:
            self.display = CandidateDisplay(self)
        self.clock = clock
        self.started = clock()
        self.first_metric: float | None = None
        self.samples: dict[str, list[tuple[int, float | None]]] = {}

    def take(self, label: str, line: str) -> bool:
        metric = super().take(label, line)
        for found, samples in train_samples([line], lambda _: label).items():
            self.samples.setdefault(found, []).extend(samples)
            if self.first_metric is None and any(speed is not None for _, speed in samples):
                self.first_metric = self.clock()
        return metric

    def so_far(self) -> tuple[int | None, float | None]:
        """(the last step trained, the median examples/s of the train windows after each process's first)."""
        steps, rates = [], []
        for samples in self.samples.values():
            train = [(step, speed) for step, speed in samples if speed is not None]
            steps += [step for step, _ in train]
            if len(train) > 1:
                rates.append(statistics.median(speed for _, speed in train[1:]))
        return (max(steps) if steps else None), (sum(rates) if rates else None)

    def show(self, **state) -> None:
        if self.board is None:
            return
        step, speed = self.so_far()
        changes = {"step": step, "examples_per_sec": speed}
        if state.pop("running", False):
            changes["state"] = "running"
        self.board.update(self.number, **changes, **state)

    def save_own_lines(self) -> None:
        folder = Path(self.request.log_dir)
        if self.board is not None and folder.is_dir():
            (folder / self.LOG).write_text("".join(f"{line}\n" for line in self.own_lines))


def board_for(probe_request: LocalProbeRequest, echo: Echo) -> ProbeBoard:
    """A live table when the caller echoes to a terminal the plain way (as `progress.display_for` decides), else
    plain lines through `echo`."""
    import click

    live = echo in (print, click.echo) and sys.stdout.isatty()
    rows = [BoardRow(number, request.job_name, probe_request.probe.max_steps) for number, request in probe_request.runs]
    return ProbeBoard(rows, echo, live=live)


def execute(
    probe_request: LocalProbeRequest,
    *,
    echo: Echo = print,
    run_class: type[ProbeRun] = ProbeRun,
    board: ProbeBoard | None = None,
) -> list[Measurement]:
    board = board or board_for(probe_request, echo)
    with board:
        return _execute(probe_request, board, run_class)


def _execute(probe_request: LocalProbeRequest, board: ProbeBoard, run_class: type[ProbeRun]) -> list[Measurement]:
    done: list[Measurement] = []
    for number, request in probe_request.runs:
        run = run_class(request, echo=board.echo, board=board, number=number)
        board.update(number, state="running")
        try:
            result = run.run()
        except DfmError as err:
            done.append(Measurement(number, "Failed", request.job_name, reason=err.message))
            board.update(number, state="failed", note=err.message)
            continue
        finally:
            run.save_own_lines()
        ended = run.clock()
        startup = run.first_metric - run.started if run.first_metric is not None else None
        interrupted = result.reason.startswith(
            tuple(f"stopped by {sig.name}" for sig in (signal.SIGINT, signal.SIGTERM))
        )
        status = "Completed" if result.exit_code == 0 else "Stopped" if interrupted else "Failed"
        reason = None if result.exit_code == 0 else (run.first_cause or result.reason)
        throughput = steady_throughput(run.samples)
        done.append(
            Measurement(
                number,
                status,
                request.job_name,
                reason=reason,
                examples_per_sec=throughput.median,
                startup_s=startup,
                wall_s=ended - run.started,
                memory={name: host["peak_bytes"] for name, host in run.memory.document()["hosts"].items()},
                throughput=throughput,
            )
        )
        if status != "Completed":
            run.show(state=status.lower(), note=reason or "")
        elif throughput.median is None:
            run.show(state="not measured", note=throughput.reason or "")
        else:
            board.update(
                number,
                state="done",
                examples_per_sec=throughput.median,
                note=f"{throughput.low:,.0f}-{throughput.high:,.0f} over {throughput.windows} windows",
            )
        if interrupted:
            raise ProbeInterrupted(done)
    return done
