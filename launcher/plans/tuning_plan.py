"""Spec + training Plan -> TuningPlan: a tuning job as one immutable value. Pure: no I/O, no SageMaker import.

The SageMaker backend turns it into a CreateHyperParameterTuningJob request (sagemaker_backend/tuning_request.py),
the local backend into an Optuna study (local/tuning_study.py); both read only this, so they cannot disagree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.plans.training_plan import Plan, job_timestamp
from launcher.spec.tuning_spec import STRATEGIES, WARM_START_TYPES, CategoricalRange, IntegerRange, SCALING_TYPES

if TYPE_CHECKING:
    from launcher.spec import Spec

MAX_TUNING_JOB_NAME = 32  # HyperParameterTuningJobName's max in the service model
# What HyperparameterTuner adds to every trial's static hyperparameters (besides the estimator's own).
TUNER_HYPERPARAMETERS = ("sagemaker_estimator_class_name", "sagemaker_estimator_module", "_tuning_objective_metric")
MAX_TUNING_BASE_NAME = MAX_TUNING_JOB_NAME - len("-" + job_timestamp(0))


@dataclass(frozen=True)
class TuningRange:
    name: str
    kind: str  # continuous | integer | categorical
    min: float | int | None = None
    max: float | int | None = None
    scaling: str = "Auto"  # the API's ScalingType
    values: tuple[Any, ...] = ()  # categorical

    def describe(self) -> str:
        if self.kind == "categorical":
            return ", ".join(str(v) for v in self.values)
        return f"{self.min} .. {self.max} ({self.scaling.lower()})"


@dataclass(frozen=True)
class TuningPlan:
    name: str  # the tuning job's name (<= 32 characters)
    training: Plan  # one trial's job; its hyperparameters are the static ones
    objective_metric: str
    objective_type: str  # Maximize | Minimize
    strategy: str  # Bayesian | Random | Hyperband | Grid
    max_jobs: int  # grid: computed from the ranges
    max_parallel_jobs: int
    early_stopping: str  # Off | Auto
    ranges: tuple[TuningRange, ...]
    max_runtime_s: int | None = None
    hyperband: tuple[int, int] | None = None  # (min_resource, max_resource)
    warm_start_type: str | None = None  # IdenticalDataAndAlgorithm | TransferLearning
    warm_start_parents: tuple[str, ...] = ()
    no_improvement_jobs: int | None = None
    target: float | None = None
    convergence: bool = False
    random_seed: int | None = None
    objective_while_running: bool = False  # trials print the objective's own lines before their end
    objective_lines: int | None = None  # objective lines a trial prints, when the spec alone tells
    cost: dict[str, Any] = field(default_factory=dict)

    @property
    def maximize(self) -> bool:
        return self.objective_type == "Maximize"

    @property
    def rounds(self) -> int:
        """Trials run in rounds of max_parallel_jobs: the wall-time bound is rounds x one trial's max_run."""
        return math.ceil(self.max_jobs / self.max_parallel_jobs)


def fixed_settings(tplan: TuningPlan) -> dict[str, Any]:
    """What every trial of a study shares: a study resumed with any of it changed would compare trials that
    ran different jobs. Keys name the spec's fields."""
    training = tplan.training
    tuned = {r.name for r in tplan.ranges}
    fixed: dict[str, Any] = {
        f"hyperparameters.{k}": v
        for k, v in sorted(training.hyperparameters.items())
        if k not in tuned and k != "model_dir"
    }
    fixed.update({f"tune.ranges.{r.name}": r.describe() for r in tplan.ranges})
    fixed.update(
        {
            "tune.objective": f"{tplan.objective_type.lower()} {tplan.objective_metric}",
            "tune.strategy": tplan.strategy,
            "instance": [f"{g.count} x {g.instance_type}" for g in training.instance_groups],
            "distribution": training.distribution.kind,
            "image": training.image_uri or f"{training.framework_version} {training.py_version}",
            "entry_point": training.entry_point,
        }
    )
    fixed.update({f"local.channels.{c.name}": c.local_path for c in training.channels})
    return json.loads(json.dumps(fixed, default=str))  # as it reads back from the study's file


def changed_settings(stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """'key: before -> now' for each fixed setting that differs."""
    missing = "(not set)"
    return [
        f"{key}: {stored.get(key, missing)} -> {now.get(key, missing)}"
        for key in sorted(set(stored) | set(now))
        if stored.get(key, missing) != now.get(key, missing)
    ]


def tuning_base_name(spec: Spec) -> str:
    return spec.tune.name or spec.name


def tuning_job_name(spec: Spec, now: float | None = None) -> str:
    return f"{tuning_base_name(spec)}-{job_timestamp(now)}"


def grid_size(tune: Any) -> int:
    """Trials of a grid: every combination of the categorical values (0 if a range is not categorical)."""
    if not all(isinstance(rng, CategoricalRange) for rng in tune.ranges.values()):
        return 0
    return math.prod(len(rng.values) for rng in tune.ranges.values())


def _range(name: str, rng: Any) -> TuningRange:
    if isinstance(rng, CategoricalRange):
        return TuningRange(name, "categorical", values=tuple(rng.values))
    kind = "integer" if isinstance(rng, IntegerRange) else "continuous"
    return TuningRange(name, kind, rng.min, rng.max, SCALING_TYPES[rng.scaling])


def _cost(training: Plan, max_jobs: int, rounds: int) -> dict[str, Any]:
    trial = dict(training.cost or {})
    trial_usd = trial.get("max_usd")
    return {
        "trial_max_usd": trial_usd,
        "max_jobs": max_jobs,
        "max_usd": round(trial_usd * max_jobs, 2) if trial_usd is not None else None,
        "trial_max_hours": round(training.max_run / 3600, 3),
        "max_wall_hours": round(rounds * training.max_run / 3600, 3),
        "note": f"ceiling: {max_jobs} trials x one trial's ceiling; wall time at most {rounds} rounds of parallel "
        "trials x max_run (a tuning job's max_runtime_s may cut it shorter)",
    }


def build_tuning_plan(
    spec: Spec, training: Plan, *, schedule: tuple[bool, int | None], name: str | None = None
) -> TuningPlan:
    """The tuning job of a validated spec (run the rules first) whose trial is `training`; `schedule` is what the
    rules found of the trials' objective lines (`rules.tuning_objective.objective_schedule`)."""
    tune = spec.tune
    max_jobs = grid_size(tune) if tune.strategy == "grid" else tune.max_jobs
    completion = tune.completion
    while_running, lines = schedule
    plan = TuningPlan(
        name=name or tuning_job_name(spec),
        training=training,
        objective_metric=tune.objective.metric,
        objective_type=tune.objective.goal.capitalize(),
        strategy=STRATEGIES[tune.strategy],
        max_jobs=max_jobs,
        max_parallel_jobs=tune.max_parallel_jobs,
        early_stopping=tune.early_stopping.capitalize(),
        ranges=tuple(_range(n, r) for n, r in tune.ranges.items()),
        max_runtime_s=tune.max_runtime_s,
        hyperband=(tune.hyperband.min_resource, tune.hyperband.max_resource) if tune.hyperband else None,
        warm_start_type=WARM_START_TYPES[tune.warm_start.type] if tune.warm_start else None,
        warm_start_parents=tuple(tune.warm_start.parents) if tune.warm_start else (),
        no_improvement_jobs=completion.no_improvement_jobs if completion else None,
        target=completion.target if completion else None,
        convergence=bool(completion and completion.convergence),
        random_seed=tune.random_seed,
        objective_while_running=while_running,
        objective_lines=lines,
    )
    return TuningPlan(**{**plan.__dict__, "cost": _cost(training, max_jobs, plan.rounds)})
