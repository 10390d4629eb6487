"""The SageMaker Python SDK v2's spellings a user may write in a spec, and the dfm field or form that means the same.

Data only: `schema_problems` reads it where a key is unknown or a distribution has the wrong shape, so a user who
writes `instance: {instance_type: ...}` or `distribution: {mpi: {enabled: true}}` is told the dfm spelling on the
line they wrote, not only "unknown key".
"""

from __future__ import annotations

from typing import Any, Mapping

# (SDK estimator argument, the places it may be written: "" is the top level, else the dotted parent) -> what to use.
SDK_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "instance_type": (("", "instance"), "instance.type"),
    "instance_count": (("", "instance"), "instance.count"),
    "volume_size": (("", "instance"), "instance.volume_gb"),
    "keep_alive_period_in_seconds": (("", "instance"), "warm_pool_seconds"),
    "use_spot_instances": (("", "spot"), "spot: {max_wait: seconds} (giving spot: turns spot capacity on)"),
    "max_wait": (("",), "spot.max_wait"),
    "max_run": (("spot",), "max_run at the top level"),
    "checkpoint_s3_uri": (("", "checkpoints"), "checkpoints: s3://... (or checkpoints.s3)"),
    "checkpoint_local_path": (("", "checkpoints"), "checkpoints.local_path"),
    "output_path": (("",), "output"),
    "code_location": (("",), "output: dfm uploads the code to <output>/<job name>/source/"),
    "input_mode": (("", "data"), "data.mode (File, Pipe or FastFile)"),
    "inputs": (("",), "data.train, data.eval and data.channels"),
    "base_job_name": (("",), "name"),
    "job_name": (("",), "name, or dfm launch --job-name"),
    "subnets": (("",), "vpc.subnets"),
    "security_group_ids": (("",), "vpc.security_group_ids"),
    "framework_version": (("", "framework"), 'framework.version (quoted: "2.14")'),
    "py_version": (("", "framework"), "framework.python"),
    "image_uri": (("framework",), "image_uri at the top level"),
    "max_retry_attempts": (("",), "retry.max_attempts"),
    "tensorboard_output_config": (("",), "tensorboard: s3://... (or true: <output>/<job name>/tensorboard)"),
    "instance_groups": (
        ("",),
        "distribution: {parameter_server: {ps: {type: ..., count: N}}} (instance: is the worker group)",
    ),
    "model_dir": (("",), "nothing: dfm gives the script its --model_dir"),
    "role_arn": (("",), "role"),
    "environment_variables": (("",), "environment"),
    "hyperparameter": (("",), "hyperparameters"),
    "source": (("",), "source_dir"),
    "entry_point_script": (("",), "entry_point"),
    "custom_mpi_options": (("distribution.horovod",), "distribution.horovod.mpi_options"),
    "enabled": (
        ("distribution.parameter_server",),
        "distribution: parameter_server (a word: a ps and a worker on "
        "every host), or drop enabled to keep the ps group",
    ),
    "s3_data": (("data",), "data.train (or data.eval, data.channels)"),
    "distribution": (("data",), "data.s3_shard: true (ShardedByS3Key)"),
}

# Keys of the SDK's `distribution=` dict -> the dfm form; N is processes_per_host when the value gives it.
SDK_DISTRIBUTIONS: dict[str, str] = {
    "parameter_server": "distribution: parameter_server (a word: a ps and a worker on every host), or "
    "{parameter_server: {ps: {type: ..., count: N}}} for the ps on their own instances",
    "mpi": "distribution: {horovod: {processes_per_host: N}} (mpirun options in mpi_options), with "
    "entry_point: deepfm-horovod",
    "multi_worker_mirrored_strategy": "distribution: multi_worker_mirrored (a word), with entry_point: deepfm-mirrored",
    "smdistributed": "parameter_server, horovod or multi_worker_mirrored: dfm does not run SageMaker's "
    "data/model parallel libraries",
    "torch_distributed": "parameter_server, horovod or multi_worker_mirrored: dfm runs TensorFlow",
    "pytorchddp": "parameter_server, horovod or multi_worker_mirrored: dfm runs TensorFlow",
}
# The distribution keys dfm itself reads in a distribution mapping.
DFM_DISTRIBUTIONS = ("horovod", "parameter_server")


def sdk_key(parent: str, key: str) -> str | None:
    """The fix for an SDK spelling `key` written under `parent` (dotted; "" at the top level), if it is one."""
    places, use = SDK_KEYS.get(key, ((), ""))
    return f"{key} is the SDK's spelling: use {use}" if parent in places else None


def distribution_problem(value: Any) -> str | None:
    """What is wrong with a distribution the schema cannot route: several at once, or the SDK's form."""
    if isinstance(value, str):
        use = SDK_DISTRIBUTIONS.get(value)
        return f"the SDK's {value}: use {use}" if use else None
    if not isinstance(value, Mapping):
        return None
    given = [key for key in value if key in DFM_DISTRIBUTIONS or key in SDK_DISTRIBUTIONS]
    if len(given) > 1:
        return f"{' and '.join(given)} given: a job has one distribution, so keep one of them"
    if given and given[0] in SDK_DISTRIBUTIONS and given[0] not in DFM_DISTRIBUTIONS:
        body = value[given[0]]
        per_host = body.get("processes_per_host") if isinstance(body, Mapping) else None
        use = SDK_DISTRIBUTIONS[given[0]].replace("processes_per_host: N", f"processes_per_host: {per_host or 'N'}")
        return f"the SDK's {{{given[0]}: ...}}: use {use}"
    return None
