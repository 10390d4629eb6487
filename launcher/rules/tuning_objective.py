"""The `tune.objective` rules: a metric the job defines, one the bundled scripts print while a trial runs
(early stopping compares those values), and Hyperband's resource, which is the count of those lines.
"""

from __future__ import annotations

import math
from typing import Any

from launcher.facts import contract
from launcher.facts import conventions
from launcher.rules.findings import Finding, error, warning
from launcher.rules.hparams import evaluates_while_training, pipe_mode_eval, script_values
from launcher.spec import Spec, did_you_mean


def check_tune_objective(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None:
        return []
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return [
            error(
                "tune.objective.metric",
                f"dfm defines metrics for the bundled scripts only; {spec.entry_point} has "
                "none, and a tuning job needs its objective's regex: use a bundled entry point",
            )
        ]
    names = [definition["Name"] for definition in conventions.METRIC_DEFINITIONS]
    metric = tune.objective.metric
    if metric not in names:
        return [
            error(
                "tune.objective.metric",
                f"'{metric}' is not one of the job's metrics{did_you_mean(metric, names)}: use one of "
                f"{', '.join(names)}",
            )
        ]
    if metric.startswith("train:"):
        return [
            warning(
                "tune.objective.metric",
                f"{metric} is measured on the training data: a search on it rewards overfitting; eval:auc or "
                "eval:loss ranks trials on held-out data",
            )
        ]
    return []


def check_tune_objective_reported(spec: Spec) -> list[Finding]:
    """The bundled scripts print eval:* lines only with an eval channel, after each epoch or every eval_steps:
    a trial without one never reports its objective, and SageMaker's early stopping, which compares trials on
    the objective's values while they run, cannot act on a trial that reports it once, at its end."""
    tune = spec.tune
    if (
        tune is None
        or not tune.objective.metric.startswith("eval:")
        or spec.entry_point not in contract.BUNDLED_ENTRY_POINTS
    ):
        return []
    if spec.data.eval is None:
        return [
            error(
                "tune.objective.metric",
                f"the bundled scripts report {tune.objective.metric} only with an eval "
                "channel: add data.eval (held-out rows), or the trials end without an objective",
            )
        ]
    values = script_values(spec)
    if tune.early_stopping != "auto" or values is None or {"epochs", "eval_steps"} & set(tune.ranges):
        return []
    if not evaluates_while_training(spec, values):
        how = "the eval channel is in Pipe mode" if pipe_mode_eval(spec) else f"epochs {values.epochs}, eval_steps 0"
        return [
            warning(
                "tune.early_stopping",
                f"each trial reports {tune.objective.metric} once, at its end ({how}), "
                "so SageMaker's early stopping never stops one: set "
                "hyperparameters.eval_steps (File or FastFile eval) to evaluate during a trial",
            )
        ]
    return []


SCHEDULE_HYPERPARAMETERS = ("epochs", "max_steps", "eval_steps")


def objective_schedule(spec: Any) -> tuple[bool, int | None]:
    """(whether a trial prints its `eval:` objective while it runs, how many such lines it prints when the spec
    alone tells) for the bundled scripts: one per epoch with eval_steps 0, one per eval_steps steps up to
    max_steps with epochs 0, one at the end otherwise. Hyperband's resource is that count (SageMaker counts
    the objective's values). best_of may repeat the best evaluation's line once more at the end."""
    values = script_values(spec)
    if values is None or not spec.tune.objective.metric.startswith("eval:") or spec.data.eval is None:
        return False, None
    if not evaluates_while_training(spec, values):
        return False, 1
    if set(SCHEDULE_HYPERPARAMETERS) & set(spec.tune.ranges):
        return True, None
    if not values.eval_steps:
        return True, values.epochs or None  # epochs 0: as many passes over the data as max_steps takes
    if not values.epochs and values.max_steps:
        return True, math.ceil(values.max_steps / values.eval_steps)
    return True, None  # every eval_steps steps of data whose size dfm does not know


def check_tune_hyperband_resource(spec: Spec) -> list[Finding]:
    """Hyperband's resource is the number of objective values a trial has printed: a max_resource above what a
    trial prints is never reached (nothing is stopped at the top rungs), one below cuts every trial short."""
    tune = spec.tune
    if (
        tune is None
        or tune.strategy != "hyperband"
        or tune.hyperband is None
        or spec.entry_point not in contract.BUNDLED_ENTRY_POINTS
    ):
        return []
    high, metric = tune.hyperband.max_resource, tune.objective.metric
    while_running, lines = objective_schedule(spec)
    if lines is None:
        return [
            warning(
                "tune.hyperband.max_resource",
                f"dfm cannot tell how many {metric} lines a trial prints (Hyperband's "
                "resource): evaluate after each epoch (eval_steps 0, max_resource = "
                "epochs), or set epochs: 0 and max_steps (max_resource = "
                "max_steps / eval_steps)",
            )
        ]
    if high > lines:
        return [
            error(
                "tune.hyperband.max_resource",
                f"a trial prints {metric} {lines} time(s) and Hyperband counts those: "
                f"max_resource {high} is never reached; set max_resource: {lines}, or "
                "evaluate more often (epochs, eval_steps)",
            )
        ]
    if high < lines:
        return [
            warning(
                "tune.hyperband.max_resource",
                f"SageMaker stops every trial at its {high}th {metric} line, before "
                f"the {lines} it would print: set max_resource: {lines}, or train less",
            )
        ]
    return []
