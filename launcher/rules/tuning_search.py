"""The rules of how a tuning job searches and stops: the strategy's own needs (grid, hyperband) and the
completion criteria.
"""

from __future__ import annotations

from launcher.rules.findings import Finding, error, warning
from launcher.rules.tuning_limits import service_limit
from launcher.spec import Spec
from launcher.spec.tuning_spec import CategoricalRange
from launcher.plans.tuning_plan import grid_size


def check_tune_strategy(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None:
        return []
    problems = []
    if tune.strategy == "grid":
        numeric = [name for name, rng in tune.ranges.items() if not isinstance(rng, CategoricalRange)]
        for name in numeric:
            problems.append(
                error(
                    f"tune.ranges.{name}",
                    "grid search takes categorical ranges only: list the values ({values: [...]}) or use "
                    "bayesian/random",
                )
            )
        if not numeric:
            size = grid_size(tune)
            if tune.max_jobs is not None and tune.max_jobs != size:
                problems.append(
                    error(
                        "tune.max_jobs",
                        f"a grid over these ranges is {size} trials, SageMaker runs each once: drop max_jobs (dfm "
                        f"computes {size})",
                    )
                )
            if tune.max_parallel_jobs > size:
                problems.append(
                    error(
                        "tune.max_parallel_jobs",
                        f"{tune.max_parallel_jobs} at once but the grid has {size} trials: use at most {size}",
                    )
                )
    elif tune.max_jobs is None:
        problems.append(error("tune", f"max_jobs is required for strategy {tune.strategy}: add e.g. tune.max_jobs: 20"))
    if tune.strategy == "hyperband":
        if tune.early_stopping != "off":
            problems.append(
                error(
                    "tune.early_stopping", "hyperband stops trials itself: SageMaker needs early_stopping: off with it"
                )
            )
        if tune.hyperband is None:
            problems.append(
                error(
                    "tune.strategy",
                    "hyperband needs its resource bounds: add tune.hyperband: {min_resource: 1, max_resource: N}",
                )
            )
        elif tune.hyperband.min_resource > tune.hyperband.max_resource:
            problems.append(
                error(
                    "tune.hyperband.min_resource",
                    f"{tune.hyperband.min_resource} is above max_resource {tune.hyperband.max_resource}: swap them",
                )
            )
    elif tune.hyperband is not None:
        problems.append(
            error(
                "tune.hyperband",
                f"applies to strategy hyperband only, not {tune.strategy}: drop it or use strategy: hyperband",
            )
        )
    if (
        tune.completion is not None
        and tune.completion.target is not None
        and tune.objective.metric.endswith("auc")
        and not 0 < tune.completion.target <= 1
    ):
        problems.append(
            error(
                "tune.completion.target",
                f"{tune.objective.metric} lies in (0, 1]; {tune.completion.target} is never reached",
            )
        )
    return problems


def check_tune_completion(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None or tune.completion is None or tune.completion.no_improvement_jobs is None:
        return []
    low = service_limit("MaxNumberOfTrainingJobsNotImproving", "min")
    if low is not None and tune.completion.no_improvement_jobs < low:
        return [
            error(
                "tune.completion.no_improvement_jobs",
                f"{tune.completion.no_improvement_jobs} is below SageMaker's minimum {low}: use {low} or more",
            )
        ]
    total = tune.max_jobs if tune.strategy != "grid" else (grid_size(tune) or None)
    if total is not None and tune.completion.no_improvement_jobs >= total:
        return [
            warning(
                "tune.completion.no_improvement_jobs",
                f"{tune.completion.no_improvement_jobs} is not below the {total} trials: it never stops the job early",
            )
        ]
    return []
