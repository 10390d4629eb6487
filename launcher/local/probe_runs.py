"""`dfm probe --local`: each runnable candidate a local run of its probe plan (runner.LocalRun), one after the other,
measured from its metric lines. The hosts are simulated on this machine's cores, so the numbers rank layouts
here, not instance types. Ctrl-C stops the running candidate and starts no other.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

from launcher.errors import DfmError
from launcher.local.describe import request_document
from launcher.local.local_request import LocalRequest, build_request
from launcher.local.runner import LocalRun
from launcher.plans.probe_plan import ProbePlan
from launcher.plans.probe_results import Measurement, ProbeInterrupted, steady_examples_per_sec, train_samples

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


class ProbeRun(LocalRun):
    """A local run that keeps its train samples per process and the time of its first one."""

    def __init__(self, request: LocalRequest, *, echo: Echo, clock: Callable[[], float] = time.monotonic):
        super().__init__(request, echo=echo)
        self.clock = clock
        self.started = clock()
        self.first_metric: float | None = None
        self.samples: dict[str, list[tuple[int, float]]] = {}

    def take(self, label: str, line: str) -> bool:
        metric = super().take(label, line)
        for found, samples in train_samples([line], lambda _: label).items():
            self.samples.setdefault(found, []).extend(samples)
            if self.first_metric is None:
                self.first_metric = self.clock()
        return metric


def execute(
    probe_request: LocalProbeRequest, *, echo: Echo = print, run_class: type[ProbeRun] = ProbeRun
) -> list[Measurement]:
    done: list[Measurement] = []
    total = len(probe_request.runs)
    for position, (number, request) in enumerate(probe_request.runs, start=1):
        echo(f"[dfm probe] candidate {number} ({position} of {total}): {request.job_name}")
        run = run_class(request, echo=echo)
        try:
            result = run.run()
        except DfmError as err:
            done.append(Measurement(number, "Failed", request.job_name, reason=err.message))
            continue
        ended = run.clock()
        startup = run.first_metric - run.started if run.first_metric is not None else None
        status = "Completed" if result.exit_code == 0 else "Failed"
        reason = None if result.exit_code == 0 else (run.first_cause or result.reason)
        done.append(
            Measurement(
                number,
                status,
                request.job_name,
                reason=reason,
                examples_per_sec=steady_examples_per_sec(run.samples),
                startup_s=startup,
                wall_s=ended - run.started,
                memory={name: host["peak_bytes"] for name, host in run.memory.document()["hosts"].items()},
            )
        )
        if result.reason.startswith(f"stopped by {signal.Signals.SIGINT.name}"):
            raise ProbeInterrupted(done)
    return done
