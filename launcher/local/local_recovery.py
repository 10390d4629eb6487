"""Local recovery (the spec's `recover:` under `--local`): a run whose host was interrupted is run again, as
`dfm launch --wait` resubmits a job on SageMaker, and resumes from its checkpoints.

An interruption here is what a lost instance looks like from the inside: a process killed by a signal that dfm
did not send (SIGKILL of a host's processes). A script that fails by itself, a stall, the timeout or Ctrl-C end
the run as they are: running them again would end the same way. Each attempt is a run of its own
planned as on SageMaker by `launcher.plans.recovery.attempt_plan` (`<job>`, then `<job>-r1`, ...), sharing the
checkpoint
store of the first attempt's checkpoint_s3_uri, which every attempt fills at its end as SageMaker uploads
/opt/ml/checkpoints; the wait before restart n is `launcher.plans.recovery.backoff_seconds`. The exit code is the last
attempt's.
"""

from __future__ import annotations

import signal
import time
from typing import Callable

from launcher.plans import recovery as attempts
from launcher.local.local_request import LocalRequest, build_request
from launcher.local.runner import LocalRun, RunResult


def why(result: RunResult) -> str:
    if result.exit_code == 0:
        return "finished"
    if result.signal is not None:
        return f"{result.reason} ({signal.Signals(result.signal).name}: an interruption)"
    return result.reason


def run_recovering(
    plan,
    *,
    echo: Callable[[str], None] = print,
    verbose: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    first: LocalRequest | None = None,
) -> list[RunResult]:
    """Attempts of `plan` until one is not interrupted or plan.operations.recovery.max_restarts are used up.
    `first`: the first attempt's request, already built from `plan`."""
    recovery = plan.operations.recovery
    results: list[RunResult] = []
    for restart in range(recovery.max_restarts + 1):
        attempt = attempts.attempt_plan(plan, restart)
        total = recovery.max_restarts + 1
        echo(f"[dfm local] attempt {restart + 1}/{total}: {attempt.job_name}")
        request = first if restart == 0 and first is not None else build_request(attempt)
        result = LocalRun(request, echo=echo, verbose=verbose).run()
        results.append(result)
        if result.signal is None or restart == recovery.max_restarts:
            break
        wait = attempts.backoff_seconds(recovery.backoff_s, restart + 1)
        echo(
            f"[dfm local] attempt {restart + 1}/{total} ended: {why(result)}; restarting in {wait:g} s "
            f"from the checkpoints"
        )
        sleep(wait)
    echo("[dfm local] attempts:")
    for number, result in enumerate(results, start=1):
        echo(f"  {number}. {result.job_dir.name}: {why(result)} (exit {result.exit_code})")
    return results
