"""One simulated SageMaker host: its /opt/ml-like tree, its config files and the environment the toolkit sets.

The container toolkit (sagemaker-training) reads `input/config/*.json` under `SAGEMAKER_BASE_DIR` and
exports what it finds as `SM_*` variables (`Environment.to_env_vars`); here the same files are written per
host and the same variables are derived from them, with paths pointing into the host's own tree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from launcher.local import cores
from launcher.plans import hosts
from launcher.facts.conventions import CONTAINER_BASE_DIR
from launcher.plans.training_plan import Channel, Plan

# Keys the toolkit keeps out of both the script's argv and SM_FRAMEWORK_PARAMS (sagemaker_training.params).
TOOLKIT_OWN_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "default_user_module_name",
    "_tuning_objective_metric",
    "sagemaker_s3_output",
)
FRAMEWORK_MODULE = "sagemaker_tensorflow_container.training:main"
DISTRIBUTION_FLAGS = (
    "sagemaker_parameter_server_enabled",
    "sagemaker_mpi_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
)


def plan_hosts(plan: Plan) -> list[str]:
    """Every host of the job: algo-1..N, numbered across its instance groups."""
    return hosts.all_hosts(plan.instance_groups)


def host_channels(plan: Plan, host: str) -> list[Channel]:
    """The channels SageMaker delivers to `host`: a channel restricted to instance groups skips the others."""
    group = hosts.group_of(plan.instance_groups, host).name
    return [c for c in plan.channels if c.instance_groups is None or group in c.instance_groups]


@dataclass(frozen=True)
class HostTree:
    """The paths of one simulated host; `base` plays the role of /opt/ml."""

    host: str
    base: Path

    @property
    def code(self) -> Path:
        return self.base / "code"

    @property
    def input(self) -> Path:
        return self.base / "input"

    @property
    def config(self) -> Path:
        return self.base / "input" / "config"

    @property
    def data(self) -> Path:
        return self.base / "input" / "data"

    @property
    def model(self) -> Path:
        return self.base / "model"

    @property
    def output(self) -> Path:
        return self.base / "output"

    @property
    def output_data(self) -> Path:
        return self.base / "output" / "data"

    @property
    def checkpoints(self) -> Path:
        return self.base / "checkpoints"

    def channel_dir(self, channel: str) -> Path:
        return self.data / channel


def to_host_path(value: Any, tree: "HostTree") -> Any:
    """A container path under /opt/ml, as the script on `tree.host` must see it here; anything else unchanged.

    The SDK and the plan name some paths inside the container (e.g. `--model_dir /opt/ml/model` for MPI jobs);
    on SageMaker each host has its own /opt/ml, here each host's tree plays that role.
    """
    if isinstance(value, str) and (value == CONTAINER_BASE_DIR or value.startswith(CONTAINER_BASE_DIR + "/")):
        return str(tree.base) + value[len(CONTAINER_BASE_DIR) :]
    return value


def host_argv(plan: Plan, tree: "HostTree") -> list[str]:
    return [to_host_path(arg, tree) for arg in plan.argv]


def channel_mode(plan: Plan, channel: Channel) -> str:
    return channel.input_mode or plan.input_mode


def sdk_hyperparameters(plan: Plan, tree: HostTree) -> dict[str, Any]:
    """The hyperparameters the SDK v2 sends for this plan, before JSON encoding: the user's plus `sagemaker_*`."""
    hps: dict[str, Any] = {k: to_host_path(v, tree) for k, v in plan.hyperparameters.items()}
    sdk: dict[str, Any] = {
        "sagemaker_program": plan.entry_point,
        "sagemaker_submit_directory": Path(plan.source_dir).resolve().as_uri(),
        "sagemaker_container_log_level": 20,
        "sagemaker_job_name": plan.job_name,
        "sagemaker_region": plan.region,
    }
    dist = plan.distribution
    if plan.toolkit_distribution == "none":
        pass
    elif dist.kind == "parameter_server":
        sdk["sagemaker_parameter_server_enabled"] = True
    elif dist.kind == "horovod":
        sdk.update(
            sagemaker_mpi_enabled=True,
            sagemaker_mpi_num_of_processes_per_host=dist.processes_per_host,
            sagemaker_mpi_custom_mpi_options=dist.mpi_options,
        )
    elif dist.kind == "multi_worker_mirrored":
        sdk["sagemaker_multi_worker_mirrored_strategy_enabled"] = True
    for key, value in sdk.items():
        hps.setdefault(key, value)
    return hps


def encode_hyperparameters(hps: Mapping[str, Any]) -> dict[str, str]:
    """hyperparameters.json as the container receives it: every value a JSON-encoded string (SDK v2)."""
    return {str(k): json.dumps(v) for k, v in hps.items()}


def input_data_config(plan: Plan, host: str) -> dict[str, dict[str, str]]:
    config: dict[str, dict[str, str]] = {}
    for channel in host_channels(plan, host):
        entry = {"TrainingInputMode": channel_mode(plan, channel), "RecordWrapperType": "None"}
        if channel.kind == "s3":
            entry["S3DistributionType"] = channel.distribution
        config[channel.name] = entry
    return config


def resource_config(plan: Plan, host: str) -> dict[str, Any]:
    return hosts.resource_configs(plan.instance_groups)[host]


def config_files(plan: Plan, tree: HostTree) -> dict[str, Any]:
    """The host's `input/config/*.json` as the platform writes them (the executor writes them into the tree)."""
    return {
        "hyperparameters.json": encode_hyperparameters(sdk_hyperparameters(plan, tree)),
        "resourceconfig.json": resource_config(plan, tree.host),
        "inputdataconfig.json": input_data_config(plan, tree.host),
    }


def host_cores(plan: Plan, available: Sequence[int] | None = None) -> cores.CoreLayout:
    """Each simulated host's cores (local.cores_per_host) among `available` (default: this machine's)."""
    return cores.layout(
        plan_hosts(plan), cores.machine_cpus() if available is None else available, plan.local.cores_per_host
    )


def _env_value(value: Any) -> str:
    # sagemaker_training.mapping.to_env_vars: strings as they are, None empty, anything else compact sorted JSON.
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def container_env(
    plan: Plan, tree: HostTree, *, current_host: str | None = None, num_cpus: int | None = None
) -> dict[str, str]:
    """The variables the toolkit exports for the script on `tree.host`, plus the plan's own environment.
    `num_cpus`: the host's cores (SM_NUM_CPUS; default: host_cores on this machine).

    `current_host` overrides SM_CURRENT_HOST: under MPI the toolkit on the first host exports its own
    environment to every rank (`mpirun -x`), so ranks on other hosts see the first host's name.
    """
    every_host = plan_hosts(plan)
    host = current_host or tree.host
    encoded = encode_hyperparameters(sdk_hyperparameters(plan, tree))
    decoded = {k: json.loads(v) for k, v in encoded.items()}
    user_hps = {
        k: v for k, v in decoded.items() if not k.startswith("sagemaker_") and k not in TOOLKIT_OWN_HYPERPARAMETERS
    }
    framework_params = {
        k: v for k, v in decoded.items() if k.startswith("sagemaker_") and k not in TOOLKIT_OWN_HYPERPARAMETERS
    }
    channels = sorted(c.name for c in host_channels(plan, host))
    module_name = plan.entry_point[:-3] if plan.entry_point.endswith(".py") else plan.entry_point
    resources = resource_config(plan, host)
    groups = {g["instance_group_name"]: g for g in resources["instance_groups"]}
    group = resources["current_group_name"]
    group_hosts = groups[group]["hosts"]
    # the toolkit: a distribution runs on the current group when its sagemaker_*_enabled flag is set
    distribution_groups = [group] if any(framework_params.get(flag) for flag in DISTRIBUTION_FLAGS) else []
    distribution_hosts = [h for name in distribution_groups for h in groups[name]["hosts"]]
    fields: dict[str, Any] = {
        "hosts": every_host,
        "network_interface_name": resources["network_interface_name"],
        "hps": user_hps,
        "user_entry_point": plan.entry_point,
        "framework_params": framework_params,
        "resource_config": resources,
        "input_data_config": input_data_config(plan, host),
        "output_data_dir": str(tree.output_data),
        "channels": channels,
        "current_host": host,
        "current_instance_type": resources["current_instance_type"],
        "current_instance_group": group,
        "current_instance_group_hosts": group_hosts,
        "instance_groups": list(groups),
        "instance_groups_dict": groups,
        "distribution_instance_groups": distribution_groups,
        "is_hetero": len(groups) > 1,
        "module_name": module_name,
        "log_level": decoded["sagemaker_container_log_level"],
        "framework_module": FRAMEWORK_MODULE,
        "input_dir": str(tree.input),
        "input_config_dir": str(tree.config),
        "output_dir": str(tree.output),
        "num_cpus": num_cpus or host_cores(plan).per_host,
        "num_gpus": 0,
        "num_neurons": 0,
        "model_dir": str(tree.model),
        "module_dir": decoded["sagemaker_submit_directory"],
        "user_args": host_argv(plan, tree),
        "output_intermediate_dir": str(tree.output / "intermediate"),
    }
    # SM_TRAINING_ENV is the toolkit's Environment as a dict: its properties, named as they are there.
    renamed = {"hps": "hyperparameters", "framework_params": "additional_framework_parameters"}
    fields["training_env"] = {
        **{renamed.get(k, k): v for k, v in fields.items() if k not in ("user_args", "channels")},
        "job_name": plan.job_name,
        "channel_input_dirs": {c: str(tree.channel_dir(c)) for c in channels},
        "distribution_hosts": distribution_hosts,
        "master_hostname": (distribution_hosts or every_host)[0],
        "is_master": host == (distribution_hosts or every_host)[0],
        "is_smddprun_installed": False,
        "is_smddpmprun_installed": False,
    }
    for name in channels:
        fields[f"channel_{name}"] = str(tree.channel_dir(name))
    for key, value in user_hps.items():
        fields[f"hp_{key}"] = value
    env = {f"SM_{k.upper()}": _env_value(v) for k, v in fields.items()}
    env.update(
        {
            "SAGEMAKER_BASE_DIR": str(tree.base),
            "CURRENT_HOST": host,
            "TRAINING_JOB_NAME": plan.job_name,
            "SAGEMAKER_JOB_NAME": plan.job_name,
            "SAGEMAKER_REGION": plan.region,
            "SAGEMAKER_TRAINING_MODULE": FRAMEWORK_MODULE,
        }
    )
    env.update({str(k): str(v) for k, v in plan.environment.items()})
    return env
