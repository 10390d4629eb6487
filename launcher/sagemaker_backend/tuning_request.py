"""TuningPlan -> the CreateHyperParameterTuningJob request, built offline by the SDK v2's HyperparameterTuner.

The trial's estimator is the training request's own (`sdk.offline_estimator`: the same kwargs, the same
source location, no upload); the tuner then builds the request as `fit()` would (`_prepare_for_tuning`,
`_TuningJob._get_tuner_args`, `Session._get_tuning_request`), and botocore's model checks it. `submit` uploads the
source and creates the tuning job; describe, stop and list of tuning jobs are `tuning_jobs`'.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

from launcher.facts import conventions
from launcher.errors import DfmError
from launcher.sagemaker_backend import aws, sdk, training_request, warm_start_source
from launcher.sagemaker_backend.estimator_arguments import ESTIMATOR_CLASS
from launcher.sagemaker_backend.tuning_jobs import console_url
from launcher.plans.tuning_plan import TuningPlan

OPERATION = "CreateHyperParameterTuningJob"
TUNER_CLASS = "sagemaker.tuner.HyperparameterTuner"


def _parameter_ranges(tplan: TuningPlan) -> dict:
    from sagemaker.parameter import CategoricalParameter, ContinuousParameter, IntegerParameter

    ranges = {}
    for rng in tplan.ranges:
        if rng.kind == "categorical":
            ranges[rng.name] = CategoricalParameter(list(rng.values))
        elif rng.kind == "integer":
            ranges[rng.name] = IntegerParameter(rng.min, rng.max, scaling_type=rng.scaling)
        else:
            ranges[rng.name] = ContinuousParameter(rng.min, rng.max, scaling_type=rng.scaling)
    return ranges


def tuner_kwargs(tplan: TuningPlan) -> dict[str, Any]:
    """The JSON-able keyword arguments of HyperparameterTuner(...) (ranges and configs as plain values)."""
    kwargs: dict[str, Any] = {
        "objective_metric_name": tplan.objective_metric,
        "objective_type": tplan.objective_type,
        # The tuner needs them too, or the service answers "A metric is required" (SDK issue 3932).
        "metric_definitions": [dict(m) for m in conventions.METRIC_DEFINITIONS],
        "strategy": tplan.strategy,
        "max_jobs": tplan.max_jobs,
        "max_parallel_jobs": tplan.max_parallel_jobs,
        "early_stopping_type": tplan.early_stopping,
    }
    if tplan.max_runtime_s is not None:
        kwargs["max_runtime_in_seconds"] = tplan.max_runtime_s
    if tplan.random_seed is not None:
        kwargs["random_seed"] = tplan.random_seed
    return kwargs


def _tuner(tplan: TuningPlan, job):
    sagemaker = sdk.sdk()
    from sagemaker.tuner import (
        HyperbandStrategyConfig,
        HyperparameterTuner,
        StrategyConfig,
        TuningJobCompletionCriteriaConfig,
        WarmStartConfig,
        WarmStartTypes,
    )

    extra: dict[str, Any] = {}
    if tplan.hyperband is not None:
        low, high = tplan.hyperband
        extra["strategy_config"] = StrategyConfig(HyperbandStrategyConfig(max_resource=high, min_resource=low))
    if tplan.warm_start_type is not None:
        warm_start = WarmStartConfig(WarmStartTypes(tplan.warm_start_type), parents=set(tplan.warm_start_parents))
        warm_start.parents = list(
            tplan.warm_start_parents
        )  # the SDK keeps a set: the request's order would vary per run
        extra["warm_start_config"] = warm_start
    if tplan.no_improvement_jobs is not None or tplan.target is not None or tplan.convergence:
        extra["completion_criteria_config"] = TuningJobCompletionCriteriaConfig(
            max_number_of_training_jobs_not_improving=tplan.no_improvement_jobs,
            complete_on_convergence=True if tplan.convergence else None,
            target_objective_metric_value=tplan.target,
        )
    del sagemaker
    try:
        return HyperparameterTuner(job, hyperparameter_ranges=_parameter_ranges(tplan), **tuner_kwargs(tplan), **extra)
    except (ValueError, TypeError) as err:
        raise DfmError(f"the SageMaker SDK refused the tuner: {aws.one_line(err)}", 2) from err


@dataclass(frozen=True)
class TuningRequest:
    """A built tuning job: what the dry run prints and `submit` sends, unchanged. The request and the kwargs are
    kept as JSON text (frozen; each read is a fresh copy); `tplan.training` says what source dir to upload."""

    tplan: TuningPlan
    request_json: str  # CreateHyperParameterTuningJob's parameters, exactly as sent
    tuner_kwargs_json: str
    estimator_kwargs_json: str

    @property
    def request(self) -> dict[str, Any]:
        return json.loads(self.request_json)

    def document(self) -> dict[str, Any]:
        """{tuner, estimator, request}, the dry run's JSON."""
        return {
            "tuner": {"class": TUNER_CLASS, "kwargs": json.loads(self.tuner_kwargs_json)},
            "estimator": {"class": ESTIMATOR_CLASS, "kwargs": json.loads(self.estimator_kwargs_json)},
            "request": self.request,
        }


def build(tplan: TuningPlan) -> TuningRequest:
    """The request a submit sends, built by the real SDK with no network call (but DescribeTrainingJob when the
    trials warm-start from a job named); exit 2 if it would be refused."""
    tplan = dataclasses.replace(tplan, training=warm_start_source.resolve(tplan.training))
    sagemaker = sdk.sdk()
    from sagemaker.tuner import _TuningJob

    del sagemaker
    session, kwargs, job, inputs = sdk.offline_estimator(tplan.training)
    tuner = _tuner(tplan, job)
    # The tuner asks an unfitted estimator for its model data (to tag JumpStart models): the SDK logs a
    # warning about the missing training job; nothing is wrong.
    estimator_logger = logging.getLogger("sagemaker.estimator")
    level = estimator_logger.level
    estimator_logger.setLevel(logging.ERROR)
    try:
        job._prepare_for_training(job_name=tplan.name)  # as HyperparameterTuner.fit() prepares its estimator
        tuner._prepare_for_tuning(job_name=tplan.name)
        args = _TuningJob._get_tuner_args(tuner, inputs)
    except ValueError as err:
        raise DfmError(f"the SageMaker SDK refused the tuning job: {aws.one_line(err)}", 2) from err
    finally:
        estimator_logger.setLevel(level)
    built = session._get_tuning_request(**args)
    training_request.validate(session.sagemaker_client, built, OPERATION)
    return TuningRequest(tplan, json.dumps(built), json.dumps(tuner_kwargs(tplan)), json.dumps(kwargs, default=str))


def submit(built: TuningRequest, *, echo: Callable[[str], None] = print) -> str:
    """Upload the source dir where the request says, then create the tuning job with exactly that request."""
    from launcher.sagemaker_backend.training_jobs import upload_source_dir

    tplan, sent = built.tplan, built.request
    session = aws.boto_session(tplan.training.region)
    with aws.aws_errors("creating the tuning job", region=tplan.training.region):
        upload_source_dir(tplan.training, sent["TrainingJobDefinition"]["StaticHyperParameters"], session)
        session.client("sagemaker").create_hyper_parameter_tuning_job(**sent)
    echo(f"submitted tuning job {tplan.name}")
    echo(console_url(tplan.name, tplan.training.region))
    return tplan.name
