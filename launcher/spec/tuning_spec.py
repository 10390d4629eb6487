"""The `tune:` section of a job spec: a SageMaker automatic model tuning job over the spec's training job.

Only the shape is checked here (types, required keys, no extra keys); what SageMaker and the script
would refuse (limits, the objective, hyperparameter names and bounds) is the `launcher.rules.tuning_*` modules'.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import BaseModel, Field, Tag

from launcher.spec.value_types import _by_shape, _Strict

Scalar = Union[bool, int, float, str]

# spec word -> the API's ScalingType
SCALING_TYPES = {"auto": "Auto", "linear": "Linear", "log": "Logarithmic", "reverse_log": "ReverseLogarithmic"}
# spec word -> the API's (and the SDK's) strategy name
STRATEGIES = {"bayesian": "Bayesian", "random": "Random", "hyperband": "Hyperband", "grid": "Grid"}
WARM_START_TYPES = {
    "identical_data": "IdenticalDataAndAlgorithm",
    "identical_data_and_algorithm": "IdenticalDataAndAlgorithm",
    "transfer_learning": "TransferLearning",
}


class ContinuousRange(_Strict):
    min: float
    max: float
    scaling: Literal["auto", "linear", "log", "reverse_log"] = "auto"
    type: Literal["continuous"] = "continuous"


class IntegerRange(_Strict):
    min: int
    max: int
    scaling: Literal["auto", "linear", "log", "reverse_log"] = "auto"
    type: Literal["integer"]


class CategoricalRange(_Strict):
    values: list[Scalar] = Field(min_length=1, description="the values to try")
    type: Literal["categorical"] = "categorical"


def _range_kind(value: Any) -> str | None:
    """The branch a value is meant for (tags starting with ~ stay out of error paths)."""
    if isinstance(value, BaseModel):
        return f"~{value.type}"
    if isinstance(value, Mapping):
        if "values" in value:
            return "~categorical"
        return "~integer" if value.get("type") == "integer" else "~continuous"
    return None


Range = Annotated[
    Union[
        Annotated[ContinuousRange, Tag("~continuous")],
        Annotated[IntegerRange, Tag("~integer")],
        Annotated[CategoricalRange, Tag("~categorical")],
    ],
    _by_shape("{min, max[, scaling]}, {min, max, type: integer} or {values: [...]}", _range_kind),
]


class Objective(_Strict):
    metric: str = Field(min_length=1, description="one of the job's metric definitions, e.g. eval:auc")
    goal: Literal["maximize", "minimize"]


class WarmStart(_Strict):
    type: Literal["identical_data", "identical_data_and_algorithm", "transfer_learning"] = Field(
        "identical_data",
        description="identical_data (= identical_data_and_algorithm): IdenticalDataAndAlgorithm; transfer_learning: "
        "TransferLearning",
    )
    parents: list[str] = Field(min_length=1, description="names of earlier tuning jobs")


class Completion(_Strict):
    no_improvement_jobs: int | None = Field(
        None, ge=1, description="stop after this many trials without a better objective"
    )
    target: float | None = Field(None, description="stop once a trial reaches this objective")
    convergence: bool = Field(False, description="let SageMaker stop the job when it detects convergence")


class Hyperband(_Strict):
    min_resource: int = Field(ge=1, description="epochs (locally: metric windows) before a trial may be stopped")
    max_resource: int = Field(ge=1, description="epochs (locally: metric windows) a trial may reach at most")


class Tune(_Strict):
    """Automatic model tuning: many training jobs of this spec, each with hyperparameters from `ranges`."""

    name: str | None = Field(None, min_length=1, description="base name of the tuning job (default: the spec's name)")
    objective: Objective
    strategy: Literal["bayesian", "random", "hyperband", "grid"] = "bayesian"
    max_jobs: int | None = Field(None, ge=1, description="trials in all (grid: computed from the ranges)")
    max_parallel_jobs: int = Field(1, ge=1, description="trials at once")
    max_runtime_s: int | None = Field(None, ge=1, description="stop the whole tuning job after this many seconds")
    early_stopping: Literal["off", "auto"] = "off"
    ranges: dict[str, Range] = Field(min_length=1, description="hyperparameter -> range or values")
    hyperband: Hyperband | None = Field(None, description="strategy hyperband: its min/max resource")
    warm_start: WarmStart | None = None
    completion: Completion | None = None
    random_seed: int | None = Field(None, ge=0, description="seed of the search, for reproducible suggestions")
