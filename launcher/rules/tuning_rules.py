"""Rules for the `tune:` section: what the bundled script reads, and what the tuning API would refuse.

The SDK's HyperparameterTuner checks almost none of this (strategy rules, limits, metric names): the
service refuses the job after the source dir was uploaded, or worse, a trial fails after it was paid for.
"""

from __future__ import annotations

import math
from typing import Any

from launcher.facts import contract
from launcher.facts import conventions
from launcher.facts import service_model
from launcher.rules.findings import Finding, error, warning
from launcher.rules.hparams import evaluates_while_training, pipe_mode_eval, script_values
from launcher.rules.request_rules import JOB_NAME
from launcher.spec import Spec, did_you_mean
from launcher.spec.tuning_spec import CategoricalRange, ContinuousRange, IntegerRange
from launcher.plans.tuning_plan import (
    MAX_TUNING_BASE_NAME,
    MAX_TUNING_JOB_NAME,
    TUNER_HYPERPARAMETERS,
    grid_size,
    tuning_base_name,
)

RANGE_SHAPES = {
    "continuous": "ContinuousParameterRanges",
    "integer": "IntegerParameterRanges",
    "categorical": "CategoricalParameterRanges",
}


def _limit(shape: str, bound: str = "max") -> int | None:
    try:
        return service_model.limit(shape, bound)
    except service_model.ModelUnavailable:
        return None


def _script_refuses(name: str, value: object) -> str | None:
    """The bundled script's own parser on `--name value`, as SageMaker renders it: its message, or None."""
    hparams = contract.bundled_hparams()
    try:
        hparams.parse_hyperparameters(conventions.render_argv({name: value}))
    except (hparams.HyperparameterError, SystemExit) as err:
        return str(err)
    return None


def _type_problem(name: str, rng) -> str | None:
    """A range whose values the script cannot parse: a float range on an integer, a range on a word."""
    hparams = contract.bundled_hparams()
    default = hparams.DEFAULTS[name]
    if isinstance(rng, CategoricalRange):
        for value in rng.values:
            try:
                hparams.convert(name, conventions.render_argv({name: value})[1])
            except hparams.HyperparameterError as err:
                return str(err).split(": ", 1)[-1]
        return None
    if name in hparams.CHOICES or isinstance(default, (bool, str, list)):
        return f"{name} takes words or lists, not numbers from a range: use {{values: [...]}}"
    if isinstance(default, int) and isinstance(rng, ContinuousRange):
        return f"{name} is an integer: add `type: integer` (a continuous range sends values like 3.7)"
    return None


def check_tune_ranges(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None:
        return []
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return [
            warning(
                f"tune.ranges.{name}",
                f"dfm cannot check that {spec.entry_point} reads --{name} or accepts "
                f"{_describe(rng)}: make sure its argument parser does",
            )
            for name, rng in tune.ranges.items()
        ]
    known = contract.bundled_hparams().DEFAULTS
    problems = []
    for name, rng in tune.ranges.items():
        field = f"tune.ranges.{name}"
        if name not in known:
            problems.append(
                error(field, f"{spec.entry_point} has no hyperparameter '{name}'{did_you_mean(name, known)}")
            )
            continue
        if name in contract.DERIVED_HYPERPARAMETERS:
            problems.append(error(field, f"{name} cannot be tuned: {contract.DERIVED_HYPERPARAMETERS[name]}"))
            continue
        if name in spec.hyperparameters:
            problems.append(
                error(
                    field,
                    f"also fixed in hyperparameters.{name}: a trial gets one or the other; "
                    f"drop hyperparameters.{name} or this range",
                )
            )
        problem = _type_problem(name, rng)
        if problem:
            problems.append(error(field, problem))
            continue
        values = rng.values if isinstance(rng, CategoricalRange) else [rng.min, rng.max]
        for value in values:
            refused = _script_refuses(name, value)
            if refused:
                problems.append(
                    error(field, f"{value!r} is outside what {spec.entry_point} accepts ({refused}): narrow the range")
                )
                break
    return problems


def _describe(rng) -> str:
    if isinstance(rng, CategoricalRange):
        return f"the values {rng.values}"
    return f"{'integers' if isinstance(rng, IntegerRange) else 'numbers'} {rng.min}..{rng.max}"


def check_tune_range_values(spec: Spec) -> list[Finding]:
    """Each range on its own: min below max, log scaling above zero, the API's limits per range."""
    tune = spec.tune
    if tune is None:
        return []
    problems = []
    max_values = _limit("ParameterValues")
    max_value_length = _limit("ParameterValue")
    for name, rng in tune.ranges.items():
        field = f"tune.ranges.{name}"
        if isinstance(rng, CategoricalRange):
            if max_values is not None and len(rng.values) > max_values:
                problems.append(
                    error(
                        field,
                        f"{len(rng.values)} values, SageMaker allows {max_values} per categorical range: try fewer",
                    )
                )
            if len({str(v) for v in rng.values}) < len(rng.values):
                problems.append(error(field, "a value repeats: list each value once"))
            too_long = [v for v in rng.values if max_value_length is not None and len(str(v)) > max_value_length]
            if too_long:
                problems.append(
                    error(field, f"a value longer than SageMaker's {max_value_length} characters: shorten it")
                )
            continue
        if rng.min >= rng.max:
            problems.append(
                error(
                    field,
                    f"min {rng.min} is not below max {rng.max}: swap them, or fix the value with "
                    f"hyperparameters.{name}",
                )
            )
        if rng.scaling in ("log", "reverse_log") and rng.min <= 0:
            problems.append(
                error(
                    f"{field}.scaling", f"{rng.scaling} scaling needs min > 0, got {rng.min}: raise min or use linear"
                )
            )
        if rng.scaling == "reverse_log" and isinstance(rng, ContinuousRange) and rng.max >= 1:
            problems.append(
                error(f"{field}.scaling", f"reverse_log scaling needs max < 1, got {rng.max}: use log or linear")
            )
        if rng.scaling == "reverse_log" and isinstance(rng, IntegerRange):
            problems.append(
                error(f"{field}.scaling", "reverse_log applies to continuous ranges only: use log or linear")
            )
    return problems


def check_tune_limits(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None:
        return []
    problems = []
    for kind, shape in RANGE_SHAPES.items():
        count = sum(1 for rng in tune.ranges.values() if rng.type == kind)
        allowed = _limit(shape)
        if allowed is not None and count > allowed:
            problems.append(
                error("tune.ranges", f"{count} {kind} ranges, SageMaker allows {allowed}: tune fewer hyperparameters")
            )
    base = tuning_base_name(spec)
    where = "tune.name" if tune.name else "name"
    if not JOB_NAME.fullmatch(base):
        problems.append(
            error(where, f"'{base}' is not a tuning job name: letters, digits and '-' only, not at either end")
        )
    elif len(base) > MAX_TUNING_BASE_NAME:
        problems.append(
            error(
                where,
                f"{len(base)} characters: tuning job names stop at {MAX_TUNING_JOB_NAME} and dfm appends "
                f"-YYMMDD-HHMMSS: give tune.name of at most {MAX_TUNING_BASE_NAME} characters",
            )
        )
    if tune.max_jobs is not None and tune.max_parallel_jobs > tune.max_jobs:
        problems.append(
            error(
                "tune.max_parallel_jobs",
                f"{tune.max_parallel_jobs} at once but only {tune.max_jobs} trials: use at most {tune.max_jobs}",
            )
        )
    if tune.max_runtime_s is not None:
        low, high = (
            _limit("HyperParameterTuningMaxRuntimeInSeconds", "min"),
            _limit("HyperParameterTuningMaxRuntimeInSeconds"),
        )
        if low is not None and tune.max_runtime_s < low:
            problems.append(
                error("tune.max_runtime_s", f"{tune.max_runtime_s} s is less than SageMaker's minimum {low} s")
            )
        elif high is not None and tune.max_runtime_s > high:
            problems.append(
                error("tune.max_runtime_s", f"{tune.max_runtime_s} s is more than SageMaker's maximum {high} s")
            )
        elif tune.max_runtime_s < spec.max_run:
            problems.append(
                warning(
                    "tune.max_runtime_s",
                    f"shorter than one trial's max_run ({spec.max_run} s): the tuning job may stop its first trials",
                )
            )
    if tune.warm_start is not None:
        allowed = _limit("ParentHyperParameterTuningJobs")
        if allowed is not None and len(tune.warm_start.parents) > allowed:
            problems.append(
                error(
                    "tune.warm_start.parents",
                    f"{len(tune.warm_start.parents)} parents, SageMaker allows {allowed}: keep the best {allowed}",
                )
            )
        for parent in tune.warm_start.parents:
            if not JOB_NAME.fullmatch(parent) or len(parent) > MAX_TUNING_JOB_NAME:
                problems.append(
                    error(
                        "tune.warm_start.parents",
                        f"'{parent}' is not a tuning job name (at most {MAX_TUNING_JOB_NAME} letters, digits, '-')",
                    )
                )
    static = (
        len(spec.hyperparameters)
        + len(conventions.SDK_HYPERPARAMETERS)
        + len(conventions.SDK_DISTRIBUTION_HYPERPARAMETERS[spec.distribution_kind])
        + len(TUNER_HYPERPARAMETERS)
    )
    allowed = _limit("HyperParameters")
    if allowed is not None and static > allowed:
        problems.append(
            error(
                "hyperparameters",
                f"{static} static hyperparameters per trial (the SDK and the tuner add some), SageMaker allows "
                f"{allowed}",
            )
        )
    return problems


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


def check_tune_cluster(spec: Spec) -> list[Finding]:
    if spec.tune is None or spec.ps_group is None:
        return []
    return [
        error(
            "distribution.parameter_server.ps",
            "a tuning job's trials run on one group of identical hosts (the tuning "
            "API's resource config has no instance groups): tune with "
            "`distribution: parameter_server` (a ps on every host) on fewer, "
            "smaller hosts, then launch the best hyperparameters on this cluster",
        )
    ]


def check_tuning_job_name_override(job_name: str) -> list[Finding]:
    """For `dfm tune --job-name`: the full tuning job name, held to the tuning API's limits (not training's)."""
    if JOB_NAME.fullmatch(job_name) and len(job_name) <= MAX_TUNING_JOB_NAME:
        return []
    return [
        error(
            "--job-name",
            f"'{job_name}' is not a tuning job name: at most {MAX_TUNING_JOB_NAME} letters, digits "
            "and '-', not at either end",
        )
    ]


def check_tune_completion(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None or tune.completion is None or tune.completion.no_improvement_jobs is None:
        return []
    low = _limit("MaxNumberOfTrainingJobsNotImproving", "min")
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


def check_tune_checkpoints(spec: Spec) -> list[Finding]:
    """A tuning job has one checkpoint location for all its trials (one CheckpointConfig, one static
    checkpoint_dir). The bundled scripts keep each trial's checkpoints in a folder named after the trial
    (deepfm_checkpoint.checkpoint_dir); another script restores whatever it finds there."""
    tune = spec.tune
    if tune is None or spec.checkpoint_config is None or spec.entry_point in contract.BUNDLED_ENTRY_POINTS:
        return []
    return [
        warning(
            "checkpoints",
            f"every trial gets the same checkpoint location: unless {spec.entry_point} keeps "
            "each trial's checkpoints apart (under $TRAINING_JOB_NAME, as the bundled scripts "
            "do), a trial restores another's; or set checkpoints: false",
        )
    ]


def check_tune_dropped_settings(spec: Spec) -> list[Finding]:
    """A SageMaker tuning job's training definition has no TensorBoardOutputConfig nor MlflowConfig, and dfm
    watches no trial (recover:, stall_timeout): `dfm tune` would drop these without a word."""
    if spec.tune is None:
        return []
    dropped = {
        "tensorboard": (spec.tensorboard not in (None, False), "a tuning job's trials have no TensorBoardOutputConfig"),
        "mlflow": (spec.mlflow is not None, "a tuning job's trials have no MlflowConfig"),
        "recover": (spec.recover is not None, "dfm watches no trial of a tuning job, so none is resubmitted"),
        "stall_timeout": (
            spec.stall_timeout is not None,
            "dfm watches no trial of a tuning job, so none is stopped as stalled",
        ),
    }
    return [
        warning(field, f"{why}: dfm tune on SageMaker ignores {field} (dfm launch keeps it)")
        for field, (given, why) in dropped.items()
        if given
    ]


def check_tune_environment(spec: Spec) -> list[Finding]:
    """The tuning job's training definition takes fewer environment variables than a training job."""
    most = _limit("HyperParameterTrainingJobEnvironmentMap")
    if spec.tune is None or most is None or len(spec.environment) <= most:
        return []
    return [
        error(
            "environment",
            f"{len(spec.environment)} variables, but a tuning job's training definition takes at "
            f"most {most}: keep {most} or fewer for dfm tune",
        )
    ]


TUNE_RULES = (
    check_tune_ranges,
    check_tune_range_values,
    check_tune_limits,
    check_tune_objective,
    check_tune_objective_reported,
    check_tune_strategy,
    check_tune_cluster,
    check_tune_completion,
    check_tune_checkpoints,
    check_tune_hyperband_resource,
    check_tune_dropped_settings,
    check_tune_environment,
)
