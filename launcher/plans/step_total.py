"""How many steps a training job trains at most, for a progress bar, and how that is known: `max_steps`, else the
epochs times the rows of one epoch (when something counted them) over the examples one step trains. Pure."""

from __future__ import annotations

from launcher.facts import contract
from launcher.watching import Total

SYNCHRONOUS = ("horovod", "multi_worker_mirrored")


def replicas(plan) -> int:
    """The processes that train in step on SageMaker: one per host, or processes_per_host of them."""
    return plan.instance_count * max(1, plan.distribution.processes_per_host)


def planned_total(plan, rows: tuple[int, str] | None = None, replica_count: int | None = None) -> Total:
    """The plan's total (its hyperparameters), the rows of one epoch given when known."""
    defaults = contract.bundled_hparams().DEFAULTS
    hp = plan.hyperparameters
    max_steps = int(hp.get("max_steps", defaults["max_steps"]))
    epochs = int(hp.get("epochs", defaults["epochs"]))
    per_step = examples_per_step(plan, replicas(plan) if replica_count is None else replica_count)
    return total_steps(max_steps, epochs, per_step, rows)


def examples_per_step(plan, replicas: int) -> int:
    """Examples one step of the step counter trains: a synchronous step takes every replica's batch; a
    parameter-server step (and a single process's) one batch."""
    batch = int(plan.hyperparameters.get("batch_size", contract.bundled_hparams().DEFAULTS["batch_size"]))
    return batch * (replicas if plan.distribution.kind in SYNCHRONOUS else 1)


def total_steps(max_steps: int, epochs: int, per_step: int, rows: tuple[int, str] | None) -> Total:
    """Pure: the steps a run trains at most, and how that is known."""
    per_epoch = -(-rows[0] // per_step) if rows else None  # a pass's last batch may be short: it is a step
    if max_steps > 0:
        if per_epoch is not None and epochs > 0 and epochs * per_epoch < max_steps:
            return Total(epochs * per_epoch, per_step, _epochs_how(epochs, rows, per_step))
        return Total(max_steps, per_step, f"max_steps {max_steps}")
    if per_epoch is not None and epochs > 0:
        return Total(epochs * per_epoch, per_step, _epochs_how(epochs, rows, per_step))
    return Total(None, per_step, "steps in all not known: no max_steps, and the train rows were not counted")


def _epochs_how(epochs: int, rows: tuple[int, str], per_step: int) -> str:
    return f"about {epochs} epoch(s) x {rows[0]:,} rows ({rows[1]}) / {per_step:,} examples a step"
