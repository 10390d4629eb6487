"""The keyword arguments of `sagemaker.tensorflow.TensorFlow(...)` for a Plan, as JSON: what the spec says, in
the SDK's words. Both the training and the tuning request build their estimator from these."""

from __future__ import annotations

import json
from typing import Any

from launcher.errors import DfmError
from launcher.facts import conventions
from launcher.plans.training_plan import Plan
from launcher.plans.warm_start import MODEL
from launcher.sagemaker_backend import aws

ESTIMATOR_CLASS = "sagemaker.tensorflow.TensorFlow"
DISABLED_SDK_EXTRAS = {
    # SageMaker Debugger/Profiler hooks are on by default in TF images; dfm's scripts do not use them and
    # they add a Debugger rule job and hook overhead. Off keeps the request to what the spec says.
    "disable_profiler": True,
    "debugger_hook_config": False,
}


def _host_kwargs(groups) -> dict[str, Any]:
    """One group of identical hosts goes as instance_type/instance_count (ResourceConfig.InstanceType/Count, the
    form every SageMaker feature takes); several as instance_groups (the SDK refuses both at once)."""
    if len(groups) == 1:
        return {"instance_type": groups[0].instance_type, "instance_count": groups[0].count}
    return {"instance_groups": [group.sdk_kwargs() for group in groups]}


def estimator_kwargs(plan: Plan) -> dict[str, Any]:
    """The keyword arguments of `sagemaker.tensorflow.TensorFlow(...)` for this plan (JSON-able)."""
    kwargs: dict[str, Any] = {
        "entry_point": plan.entry_point,
        "source_dir": plan.source_dir,
        "role": plan.role,
        "volume_size": plan.volume_gb,
        "max_run": plan.max_run,
        "input_mode": plan.input_mode,
        "output_path": plan.output_path,
        "code_location": plan.output_path,
        # The SDK adds model_dir itself: its own default, or the value given below.
        "hyperparameters": {k: v for k, v in plan.hyperparameters.items() if k != "model_dir"},
        **DISABLED_SDK_EXTRAS,
    }
    kwargs.update(_host_kwargs(plan.instance_groups))
    if plan.bundled:  # a user's script keeps the SDK's own default (which conventions.model_dir predicts)
        kwargs["model_dir"] = plan.hyperparameters["model_dir"]
    if plan.image_uri is not None:
        kwargs["image_uri"] = plan.image_uri
    if plan.framework_version is not None:
        kwargs["framework_version"] = plan.framework_version
    if plan.py_version is not None:
        kwargs["py_version"] = plan.py_version
    distribution = conventions.sdk_distribution(
        plan.toolkit_distribution, plan.distribution.processes_per_host, plan.distribution.mpi_options
    )
    if distribution is not None:
        kwargs["distribution"] = distribution
    if plan.checkpoint_s3_uri is not None:
        kwargs["checkpoint_s3_uri"] = plan.checkpoint_s3_uri
        kwargs["checkpoint_local_path"] = plan.checkpoint_local_path
    if plan.spot_max_wait is not None:
        kwargs["use_spot_instances"] = True
        kwargs["max_wait"] = plan.spot_max_wait
    if plan.vpc is not None:
        kwargs["subnets"] = list(plan.vpc.subnets)
        kwargs["security_group_ids"] = list(plan.vpc.security_group_ids)
    if plan.warm_start is not None and plan.warm_start.kind == MODEL:  # the SDK's model channel, as v2 builds it
        kwargs["model_uri"] = plan.warm_start.uri
        kwargs["model_channel_name"] = conventions.MODEL_CHANNEL
    if plan.warm_pool_seconds:
        kwargs["keep_alive_period_in_seconds"] = plan.warm_pool_seconds
    if plan.environment:
        kwargs["environment"] = dict(plan.environment)
    if plan.tags:
        kwargs["tags"] = [{"Key": k, "Value": v} for k, v in plan.tags.items()]
    kwargs.update(_operations_kwargs(plan))
    if plan.bundled:  # the bundled scripts write the lines these scrape
        kwargs["metric_definitions"] = [dict(m) for m in conventions.METRIC_DEFINITIONS]
    return jsonable(kwargs)


def _operations_kwargs(plan: Plan) -> dict[str, Any]:
    """SageMaker's retry on internal errors and the TensorBoard folder it syncs (MLflow has no SDK v2 argument:
    `build` adds it to the request)."""
    kwargs: dict[str, Any] = {}
    if plan.operations.retry_attempts is not None:
        kwargs["max_retry_attempts"] = plan.operations.retry_attempts
    if plan.operations.tensorboard_s3_uri is not None:
        kwargs["tensorboard_output_config"] = {
            "s3_output_path": plan.operations.tensorboard_s3_uri,
            "container_local_output_path": conventions.TENSORBOARD_LOCAL_PATH,
        }
    return kwargs


def jsonable(mapping) -> dict:
    try:
        return json.loads(json.dumps(dict(mapping)))
    except (TypeError, ValueError) as err:
        raise DfmError(f"the estimator kwargs are not JSON-able: {aws.one_line(err)}", 2) from err
