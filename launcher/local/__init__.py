"""`dfm launch SPEC --local`: the Plan run on this machine, emulating SageMaker's TensorFlow container.

local_request.py turns the Plan into a LocalRequest (hosts, channels, processes: all computed, nothing started);
runner.py executes it; describe.py prints it for `--local --dry-run`. Importing this package stays light
(no TensorFlow): TensorFlow runs only in the child processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from launcher.local.local_request import LocalRequest
    from launcher.plans.training_plan import Plan


def run_local(plan: Plan, *, echo: Callable[[str], None] = print, verbose: bool = False) -> int:
    """Run `plan` locally (under its local.run_dir); 0 when every script succeeded, 1 when a process failed, timed out
    or was stopped.
    `verbose`: the terminal also gets TensorFlow's INFO log records (the log files always do)."""
    if plan.operations.recovery is not None:  # recover: an interrupted run is run again from its checkpoints
        from launcher.local.local_recovery import run_recovering

        return run_recovering(plan, echo=echo, verbose=verbose)[-1].exit_code
    from launcher.local.runner import run_local as _run_local

    return _run_local(plan, echo=echo, verbose=verbose)


def run_request(request: LocalRequest, *, echo: Callable[[str], None] = print, verbose: bool = False) -> int:
    """Run a built LocalRequest, as `run_local` runs its plan (a `recover:` plan's first attempt is this request)."""
    from launcher.local.local_request import request_plan

    plan = request_plan(request)
    if plan.operations.recovery is not None:
        from launcher.local.local_recovery import run_recovering

        return run_recovering(plan, echo=echo, verbose=verbose, first=request)[-1].exit_code
    from launcher.local.runner import LocalRun

    return LocalRun(request, echo=echo, verbose=verbose).run().exit_code


__all__ = ["run_local", "run_request"]
