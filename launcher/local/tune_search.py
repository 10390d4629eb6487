"""The search of `dfm tune --local`, by Optuna: the sampler and pruner each SageMaker strategy maps to, a
trial's hyperparameters from its ranges, and the intermediate values a trial reports while it streams.

SageMaker Bayesian -> TPE, Random -> random, Grid -> grid, Hyperband -> random sampling with Optuna's
Hyperband pruner; early stopping `auto` -> the median rule (SageMaker's: stop a trial whose objective is
worse than the median of earlier trials' at the same point). Optuna is imported lazily by the callers.
"""

from __future__ import annotations

import re
from typing import Any

from launcher.plans.tuning_plan import TuningPlan

# A pruned trial must first have reported this many times, and the median needs this many finished trials.
WARMUP_REPORTS = 1
STARTUP_TRIALS = 3
_STEP = re.compile(r"\[dfm\] (?:train|eval) step=(\d+)")


def sampler(tplan: TuningPlan, trials_so_far: int = 0):
    """The strategy's sampler. A resumed study (`trials_so_far` > 0) seeds it with random_seed + that count:
    seeded again from random_seed alone, it would repeat the first session's suggestions."""
    import optuna

    seed = None if tplan.random_seed is None else tplan.random_seed + trials_so_far
    if tplan.strategy == "Grid":
        space = {rng.name: list(rng.values) for rng in tplan.ranges}
        return _grid_sampler(optuna)(space, seed=seed)
    if tplan.strategy == "Bayesian":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(5, max(1, tplan.max_jobs // 3)))
    return optuna.samplers.RandomSampler(seed=seed)


def _grid_sampler(optuna):
    class Grid(optuna.samplers.GridSampler):
        """Optuna's grid sampler stops the study from inside `tell` once the grid is done (Study.stop, which
        raises outside `optimize`); the local study's loop ends at max_jobs, the grid's size, itself."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return Grid


def pruner(tplan: TuningPlan):
    import optuna

    if tplan.strategy == "Hyperband" and tplan.hyperband is not None:
        low, high = tplan.hyperband
        return optuna.pruners.HyperbandPruner(min_resource=low, max_resource=high)
    if tplan.early_stopping == "Auto":
        return optuna.pruners.MedianPruner(n_startup_trials=STARTUP_TRIALS, n_warmup_steps=WARMUP_REPORTS)
    return optuna.pruners.NopPruner()


def suggest(trial, tplan: TuningPlan) -> dict[str, Any]:
    """The trial's hyperparameters, one per range. Auto scaling is linear here; reverse_log too (noted in docs)."""
    values: dict[str, Any] = {}
    for rng in tplan.ranges:
        if rng.kind == "categorical":
            values[rng.name] = trial.suggest_categorical(rng.name, list(rng.values))
        elif rng.kind == "integer":
            values[rng.name] = trial.suggest_int(rng.name, int(rng.min), int(rng.max), log=rng.scaling == "Logarithmic")
        else:
            values[rng.name] = trial.suggest_float(
                rng.name, float(rng.min), float(rng.max), log=rng.scaling == "Logarithmic"
            )
    return values


def distributions(tplan: TuningPlan) -> dict[str, Any]:
    """The Optuna distribution of each range, as `suggest` asks for it: what a parent study's trial must fit to
    seed this study."""
    import optuna

    found: dict[str, Any] = {}
    for rng in tplan.ranges:
        log = rng.scaling == "Logarithmic"
        if rng.kind == "categorical":
            found[rng.name] = optuna.distributions.CategoricalDistribution(list(rng.values))
        elif rng.kind == "integer":
            found[rng.name] = optuna.distributions.IntDistribution(int(rng.min), int(rng.max), log=log)
        else:
            found[rng.name] = optuna.distributions.FloatDistribution(float(rng.min), float(rng.max), log=log)
    return found


def baseline(tplan: TuningPlan, defaults: dict[str, Any]) -> dict[str, Any] | None:
    """The untuned job's values of the tuned hyperparameters (the script's defaults), when every one lies in its
    range: enqueued as the first trial, so the study's best is at least the untuned job."""
    values = {}
    for rng in tplan.ranges:
        value = defaults.get(rng.name)
        if rng.kind == "categorical":
            if value not in rng.values:
                return None
        elif value is None or isinstance(value, bool) or not rng.min <= value <= rng.max:
            return None
        values[rng.name] = value
    return values


def intermediate_metric(objective: str) -> str:
    """The training-side twin of an objective (`eval:auc` -> `train:auc`): what a trial that evaluates only at
    its end reports while it runs. Those values come with dropout and the L2 penalty on: they favour little of
    either, which the objective on held-out data need not."""
    kind, _, name = objective.partition(":")
    return f"train:{name}" if kind == "eval" else objective


def report_plan(tplan: TuningPlan, defaults: dict[str, Any]) -> tuple[str, int | None]:
    """(the metric a trial reports while it runs, the examples one report stands for; None: one report per line).

    The objective itself wherever a trial prints it while running, as SageMaker's early stopping reads it:
    per evaluation with Hyperband (its resource is the count of objective values) and after each epoch; with
    eval_steps, per (largest batch x eval_steps) examples, so trials of different batch sizes are compared
    after the same data. Otherwise the objective's training-side twin, per (largest batch x log_steps).
    `defaults`: the bundled scripts' hyperparameter defaults (contract.bundled_hparams().DEFAULTS)."""
    hyperparameters = {**defaults, **tplan.training.hyperparameters}
    if tplan.objective_while_running:
        eval_steps = int(hyperparameters.get("eval_steps") or 0)
        if tplan.strategy == "Hyperband" or not eval_steps:
            return tplan.objective_metric, None
        return tplan.objective_metric, _largest_batch(tplan, hyperparameters) * eval_steps
    return intermediate_metric(tplan.objective_metric), _largest_batch(tplan, hyperparameters) * int(
        hyperparameters["log_steps"]
    )


class Reports:
    """Turns a trial's metric lines into (resource, value) reports at the same points for every trial: with a
    `unit`, resource k once k x unit examples were trained (the line's step x the trial's batch size); without
    one, resource k at the k-th line."""

    def __init__(self, metric: str, batch_size: int, unit: int | None):
        self.kind, _, self.name = metric.partition(":")
        self.batch_size, self.unit = batch_size, unit and max(1, unit)
        self.reported = 0
        self.label: str | None = None  # the one process whose lines count (the first that reports)

    def feed(self, label: str, parsed: tuple[str, dict[str, float]] | None, line: str) -> list[tuple[int, float]]:
        if parsed is None or parsed[0] != self.kind or self.name not in parsed[1]:
            return []
        if self.label is None:
            self.label = label
        if label != self.label:
            return []
        step = _STEP.search(line)
        if not self.unit or step is None:
            self.reported += 1
            return [(self.reported, parsed[1][self.name])]
        reached = int(step.group(1)) * self.batch_size // self.unit
        out = [(k, parsed[1][self.name]) for k in range(self.reported + 1, reached + 1)]
        self.reported = max(self.reported, reached)
        return out


def _largest_batch(tplan: TuningPlan, hyperparameters: dict[str, Any]) -> int:
    batches = [int(v) for rng in tplan.ranges if rng.name == "batch_size" for v in (rng.values or (rng.max,))]
    return max(batches) if batches else int(hyperparameters.get("batch_size", 1))
