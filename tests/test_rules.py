"""Each rule: a spec it accepts and one it refuses (or warns about), with the field and the fix named."""

from __future__ import annotations

import datetime

import pytest

from launcher.facts import contract
from launcher import rules
from launcher.rules import image_rules as rules_images
from launcher.spec import load_spec
from spec_helpers import BASE, CONFIGS, DELETE, line_of, merged, write_spec
from test_tune_rules import TUNE_CASES

PS2 = {"distribution": "parameter_server", "instance": {"count": 2}}
HOROVOD = {"entry_point": "deepfm-horovod", "instance": {"type": "ml.p3.8xlarge"}}
EFS = {"file_system_id": "fs-0123456789abcdef0", "directory_path": "/dfm"}
VPC = {"subnets": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]}
USER_SCRIPT = {"entry_point": "train.py", "source_dir": "s3://dfm-bucket/code/sourcedir.tar.gz"}
PS_FIELD = "distribution.parameter_server.ps"
EVAL = "s3://dfm-bucket/eval/"


def hetero(ps_type: str = "ml.r5.4xlarge", count: int = 2, **changes) -> dict:
    """Parameter servers on their own group: `count` x `ps_type`, workers 2 x ml.g5.2xlarge."""
    return {
        "instance": {"type": "ml.g5.2xlarge", "count": 2},
        "distribution": {"parameter_server": {"ps": {"type": ps_type, "count": count}}},
        **changes,
    }


def mirrored(rows: int, sparse_allreduce: str, optimizer: str = "adam") -> dict:
    """deepfm-mirrored on 2 x ml.g5.12xlarge (4 x A10G 24 GiB each), `rows` table rows."""
    return {
        "entry_point": "deepfm-mirrored",
        "distribution": "multi_worker_mirrored",
        "instance": {"type": "ml.g5.12xlarge", "count": 2},
        "hyperparameters": {"feature_size": rows, "optimizer": optimizer, "sparse_allreduce": sparse_allreduce},
    }


def hvd(processes: int, hyperparameters: dict | None = None, **options) -> dict:
    return {
        **HOROVOD,
        "distribution": {"horovod": {"processes_per_host": processes, **options}},
        **({"hyperparameters": hyperparameters} if hyperparameters else {}),
    }


@pytest.fixture(autouse=True)
def fixed_today(monkeypatch):
    """End-of-support warnings depend on the date: pin it so the cases stay true."""
    monkeypatch.setattr(rules_images, "today", lambda: datetime.date(2026, 11, 22))


def file_findings(tmp_path, changes, rule):
    """The rule's findings on BASE + changes written as tmp_path/spec.yaml (relative paths start there)."""
    return [(f.severity, f.field, f.message) for f in rule(load_spec(write_spec(tmp_path, changes)))]


def findings(tmp_path, changes, rule):
    """The rule's findings on BASE + changes, in memory (tmp_path: where a relative path would be written)."""
    return [(f.severity, f.field, f.message) for f in rule(load_spec(merged(BASE, changes)))]


RAW = {
    "format": "tsv",
    "label": "clicked",
    "columns": ["clicked", "i1", "c1", "tags"],
    "numeric": {"i1": {"transform": "bucketize", "boundaries": [1, 3, 7]}},
    "categorical": {"c1": {"hash_buckets": 1000}},
    "multi_hot": {"tags": {"separator": "|", "hash_buckets": 100, "max_length": 5}},
}
# categorical ids alone: 1.5e9 + 1 rows, over one ml.r5.4xlarge (the numeric and multi-hot fields add 106)
RAW_BIG = {**RAW, "categorical": {"c1": {"hash_buckets": 15 * 10**8}}}
ADAM = {"hyperparameters": {"optimizer": "adam"}}
PREPARE = {"input": {"uri": "s3://dfm-bucket/clicks/", "format": "libsvm"}}
CASES = [
    # (rule, accepted spec changes, refused spec changes, (severity, field, text in message))
    (rules.check_job_name, {"name": "d" * 49}, {"name": "d" * 50}, ("error", "name", "at most 49")),
    (rules.check_job_name, {"name": "a-b--c9"}, {"name": "-deepfm"}, ("error", "name", "not a SageMaker job name")),
    (
        rules.check_channels,
        {"data": {"train": [f"s3://dfm-bucket/{i}/" for i in range(19)], "eval": "s3://dfm-bucket/e/"}},
        {"data": {"train": [f"s3://dfm-bucket/{i}/" for i in range(20)], "eval": "s3://dfm-bucket/e/"}},
        ("error", "data", "21 channels, SageMaker allows 20"),
    ),
    (
        rules.check_channels,
        {"data": {"channels": {"vocab": "s3://dfm-bucket/v/"}}},
        {"data": {"channels": {"eval": "s3://dfm-bucket/v/"}}},
        ("error", "data.channels.eval", "pick another name"),
    ),
    (
        rules.check_hyperparameter_limits,
        {**USER_SCRIPT, **PS2, "hyperparameters": {f"h{i}": i for i in range(93)}},
        {**USER_SCRIPT, **PS2, "hyperparameters": {f"h{i}": i for i in range(94)}},
        ("error", "hyperparameters", "94 given and the SDK adds 7"),
    ),
    # request limits, read from botocore's service model
    (
        rules.check_request_limits,
        {**USER_SCRIPT, "hyperparameters": {"k": "x" * 2498}},
        {**USER_SCRIPT, "hyperparameters": {"k": "x" * 2499}},
        ("error", "hyperparameters.k", "2501 characters, SageMaker allows at most 2500"),
    ),
    (
        rules.check_request_limits,
        {"hyperparameters": {"k" * 256: 1}},
        {"hyperparameters": {"k" * 257: 1}},
        ("error", f"hyperparameters.{'k' * 257}", "257 characters, SageMaker allows at most 256"),
    ),
    (
        rules.check_request_limits,
        {"environment": {"DB_URL": "x" * 512}},
        {"environment": {"DB_URL": "x" * 513}},
        ("error", "environment.DB_URL", "513 characters, SageMaker allows at most 512"),
    ),
    (
        rules.check_request_limits,
        {"instance": {"type": "ml.c7i-flex.xlarge"}},
        {"instance": {"type": "ml.c5.bogus"}},
        (
            "error",
            "instance.type",
            "not a value SageMaker accepts for ResourceConfig.InstanceType (did you mean 'ml.c5.xlarge'?)",
        ),
    ),
    (
        rules.check_request_limits,
        {"tags": {"team": "ads ranking/ü"}},
        {"tags": {"team": "ads*"}},
        ("error", "tags.team", "does not match SageMaker's pattern"),
    ),
    (
        rules.check_request_limits,
        {"role": "arn:aws:iam::123456789012:role/dfm+ops"},
        {"role": "arn:aws:iam::123456789012:role/dfm#ops"},
        ("error", "role", "does not match SageMaker's pattern"),
    ),
    (
        rules.check_request_limits,
        hvd(4, mpi_options="-x A=" + "a" * 2490),
        hvd(4, mpi_options="-x A=" + "a" * 2500),
        ("error", "distribution.horovod.mpi_options", "SageMaker allows at most 2500"),
    ),
    (
        rules.check_request_limits,
        {"warm_pool_seconds": 3600},
        {"warm_pool_seconds": 10**7},
        ("error", "warm_pool_seconds", "is more than SageMaker's maximum"),
    ),
    (
        rules.check_request_limits,
        {"checkpoints": {"s3": "auto", "local_path": "/opt/ml/ck"}},
        {"output": "s3://dfm-bucket/" + "o" * 1000},
        ("error", "output", "use a shorter output"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"batch_norm": "True", "deep_layers": "400,400", "s3_shard": False, "dropout": 0}},
        {"hyperparameters": {"deep_layers": [400, -1]}},
        ("error", "hyperparameters.deep_layers", "sizes must be positive"),
    ),
    # the scripts' own bounds (deepfm_hparams.BOUNDS), refused offline instead of after the instances start
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"batch_size": 1}},
        {"hyperparameters": {"batch_size": 0}},
        ("error", "hyperparameters.batch_size", "must be at least 1, got 0"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"learning_rate": 0.5}},
        {"hyperparameters": {"learning_rate": -1}},
        ("error", "hyperparameters.learning_rate", "must be above 0.0, got -1.0"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"epochs": 0, "max_steps": 100}},
        {"hyperparameters": {"epochs": 0}},
        ("error", "hyperparameters.epochs", "the job would never end"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"epochs": 2}},
        {"hyperparameters": {"epochs": -1}},
        ("error", "hyperparameters.epochs", "must be at least 0, got -1"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"dropout": 0.5}},
        {"hyperparameters": {"dropout": float("nan")}},
        ("error", "hyperparameters.dropout", "must be a finite number"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"feature_size": 5}},
        {"hyperparameters": {"feature_size": "1e400"}},
        ("error", "hyperparameters.feature_size", "expected an integer, got '1e400'"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"feature_size": 5}},
        {"hyperparameters": {"feature_size": [1, 2]}},
        ("error", "hyperparameters.feature_size", "expected an integer, got '[1, 2]'"),
    ),
    (
        rules.check_evaluation_schedule,
        {"data": {"eval": EVAL}, "hyperparameters": {"eval_steps": 500}},
        {"hyperparameters": {"eval_steps": 500}},
        ("warning", "hyperparameters.eval_steps", "nothing is evaluated without an eval channel: add data.eval"),
    ),
    (
        rules.check_evaluation_schedule,
        {"data": {"mode": "Pipe", "eval": EVAL}, "hyperparameters": {"eval_batches": 10}},
        {"data": {"mode": "Pipe", "eval": EVAL}, "hyperparameters": {"early_stopping_patience": 2}},
        ("warning", "hyperparameters.early_stopping_patience", "Pipe-mode eval channel is read once, after training"),
    ),
    # what dfm derives is refused when set by hand
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"log_steps": 10}},
        {"hyperparameters": {"ps_group": "ps"}},
        ("error", "hyperparameters.ps_group", "distribution.parameter_server.ps: drop"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"log_steps": 10}},
        {"hyperparameters": {"checkpoint_dir": "/mnt/x"}},
        ("error", "hyperparameters.checkpoint_dir", "set by dfm from checkpoints"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"features": RAW},
        {"features": RAW, "hyperparameters": {"features": "{}"}},
        ("error", "hyperparameters.features", "drop this hyperparameter"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"learning_rate": 1}},
        {"hyperparameters": {"learning_rate": True}},
        ("error", "hyperparameters.learning_rate", "expected a number"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"cache": "no"}},
        {"hyperparameters": {"cache": "maybe"}},
        ("error", "hyperparameters.cache", "expected a boolean (true/false/1/0/yes/no), got 'maybe'"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"log_steps": 10}},
        {"hyperparameters": {"model_dir": "/mnt/x"}},
        ("error", "hyperparameters.model_dir", "checkpoints.file_system"),
    ),
    (
        rules.check_bundled_hyperparameters,
        {"hyperparameters": {"embedding_size": 16}},
        {"hyperparameters": {"embeding_size": 16}},
        ("error", "hyperparameters.embeding_size", "did you mean 'embedding_size'"),
    ),
    (
        rules.check_features,
        {"features": RAW},
        {"features": {**RAW, "label": "click"}},
        ("error", "features.label", "click"),
    ),
    (
        rules.check_features,
        {"features": RAW},
        {"features": {**RAW, "numeric": {"i9": {"transform": "log1p"}}}},
        ("error", "features.numeric.i9", ""),
    ),
    (
        rules.check_features,
        {"features": {**RAW, "bad_rows": {"skip": True, "max_fraction": 0.05}}},
        {"features": {**RAW, "bad_rows": {"skip": True, "max_fraction": 5}}},
        ("error", "features.bad_rows.max_fraction", "must be a number from 0 to 1, got 5"),
    ),
    (
        rules.check_features,
        {"features": RAW},
        {"features": RAW, "hyperparameters": {"feature_size": 117581}},
        ("warning", "hyperparameters.feature_size", "not used with features: (the scripts count the fields"),
    ),
    (
        rules.check_features,
        {"features": RAW},
        {**USER_SCRIPT, "features": RAW},
        ("error", "features", "bundled entry points"),
    ),
    (
        rules.check_features,
        {"features": RAW},
        {"features": RAW, "data": {"train": "s3://dfm-bucket/t/", "mode": "Pipe"}},
        ("error", "features", "set data.mode to File"),
    ),
    (
        rules.check_boolean_hyperparameters,
        {"hyperparameters": {"batch_norm": False}},
        {**USER_SCRIPT, "hyperparameters": {"use_gpu": False}},
        ("warning", "hyperparameters.use_gpu", "arrives as the string 'False'"),
    ),
    (
        rules.check_entry_point,
        {"entry_point": "deepfm-mirrored", "distribution": "multi_worker_mirrored"},
        {"entry_point": "deepfm-mirrored", "distribution": "horovod"},
        ("error", "distribution", "multi_worker_mirrored, not horovod"),
    ),
    (
        rules.check_entry_point,
        {"entry_point": "deepfm-ps"},
        {"source_dir": "src"},
        ("error", "source_dir", "ships its own source dir"),
    ),
    (
        rules.check_framework,
        {"framework": {"version": "2.21.0", "python": "py312"}},
        {"framework": {"version": "2.14", "python": "py39"}},
        ("error", "framework.python", "have py310, not py39"),
    ),
    (
        rules.check_framework,
        {"framework": {"version": "2.21"}},
        {"framework": {"version": "2.20"}},
        ("error", "framework.version", "2.20 has no SageMaker training image: use one of 2.9, 2.10"),
    ),
    (
        rules.check_framework,
        {"framework": {"version": "2.21.0"}},
        {"framework": {"version": "2.22"}},
        ("error", "framework.version", "no SageMaker TensorFlow training image 2.22"),
    ),
    (
        rules.check_framework,
        {"framework": {"version": "2.21"}},
        {"framework": {"version": "2.14"}},
        (
            "warning",
            "framework.version",
            "past end of support (2024-10-27): no more security patches; the newest is 2.21",
        ),
    ),
    (
        rules.check_framework,
        {"framework": DELETE, "image_uri": "my/tf:1", "image_provides": ["horovod"]},
        {"image_provides": ["horovod"]},
        ("error", "image_provides", "describes an image_uri"),
    ),
    (
        rules.check_framework,
        {"framework": DELETE, "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/tf:1"},
        {"framework": DELETE},
        ("error", "framework", "or an image_uri"),
    ),
    (
        rules.check_pipe_mode,
        {"data": {"mode": "Pipe"}},
        {"data": {"mode": "Pipe"}, "framework": {"version": "2.18"}},
        ("error", "data.mode", "the TF 2.18 image lacks (the last with it is TF 2.14): use FastFile, or TF 2.14"),
    ),
    (
        rules.check_pipe_mode,
        {
            **USER_SCRIPT,
            "data": {"mode": "Pipe"},
            "framework": DELETE,
            "image_uri": "my/tf:1",
            "image_provides": ["pipe_mode"],
        },
        {**USER_SCRIPT, "data": {"mode": "Pipe"}, "framework": {"version": "2.19"}},
        ("warning", "data.mode", "your script must read the FIFOs"),
    ),
    (
        rules.check_pipe_mode,
        {"data": {"mode": "Pipe"}, "framework": DELETE, "image_uri": "my/tf:1", "image_provides": ["pipe_mode"]},
        {"data": {"mode": "Pipe"}, "framework": DELETE, "image_uri": "my/tf:1", "image_provides": []},
        ("error", "data.mode", "which this image lacks"),
    ),
    (
        rules.check_horovod_in_image,
        {**hvd(4), "framework": {"version": "2.12"}},
        hvd(4),
        (
            "error",
            "framework.version",
            "TensorFlow 2.14 images have no Horovod (the last image with Horovod is TF 2.12): use framework.version "
            '"2.12", or entry_point: deepfm-mirrored with distribution: multi_worker_mirrored',
        ),
    ),
    (
        rules.check_horovod_in_image,
        {**hvd(4), "framework": DELETE, "image_uri": "my/tf:1", "image_provides": ["horovod"]},
        {**hvd(4), "framework": DELETE, "image_uri": "my/tf:1"},
        ("warning", "image_uri", "say image_provides: [horovod]"),
    ),
    (
        rules.check_horovod_in_image,
        {**USER_SCRIPT, "distribution": {"horovod": {"processes_per_host": 1}}, "framework": {"version": "2.11"}},
        {**USER_SCRIPT, "distribution": {"horovod": {"processes_per_host": 1}}, "framework": {"version": "2.19"}},
        ("error", "framework.version", "or distribution: multi_worker_mirrored"),
    ),
    (
        rules.check_pipe_mode,
        {"data": {"mode": "FastFile"}, "framework": {"version": "2.19"}},
        {"data": {"mode": "Pipe"}, "framework": DELETE, "image_uri": "my/image:1"},
        ("warning", "data.mode", "say image_provides: [pipe_mode] if it does"),
    ),
    (
        rules.check_pipe_channels_per_worker,
        {**hvd(4), "data": {"mode": "Pipe", "train": ["s3://dfm-bucket/t/"] * 4}},
        {**hvd(4), "data": {"mode": "Pipe", "train": ["s3://dfm-bucket/t/"] * 3}},
        ("error", "data.train", "at least 4 training paths"),
    ),
    (
        rules.check_pipe_channels_per_worker,
        {**hvd(4), "data": {"mode": "File"}},
        {**hvd(2), "data": {"mode": "Pipe"}},
        ("error", "data.train", "one FIFO per process"),
    ),
    (
        rules.check_processes_per_host,
        hvd(4),
        hvd(5),
        ("error", "distribution.horovod.processes_per_host", "has 4 GPUs"),
    ),
    (
        rules.check_processes_per_host,
        hvd(4),
        hvd(2),
        ("warning", "distribution.horovod.processes_per_host", "leaves 2 idle"),
    ),
    (
        rules.check_processes_per_host,
        {**hvd(4), "instance": {"type": "ml.c5.xlarge"}},
        {**hvd(5), "instance": {"type": "ml.c5.xlarge"}},
        ("error", "distribution.horovod.processes_per_host", "has 4 vCPUs"),
    ),
    (
        rules.check_instance_known,
        {"instance": {"type": "ml.c5.18xlarge"}},
        {"instance": {"type": "ml.g7e.2xlarge"}},
        ("warning", "instance.type", "not in dfm's catalogue: no cost estimate"),
    ),
    (
        rules.check_instance_known,
        {"instance": {"type": "ml.g6e.12xlarge"}},
        {"instance": {"type": "ml.trn1.2xlarge"}},
        ("warning", "instance.type", "TensorFlow images do not use"),
    ),
    (rules.check_parameter_server, PS2, {**PS2, "instance": {"count": 1}}, ("warning", "instance.count", "count >= 2")),
    # deepfm-ps runs one worker task per GPU; a user's script gets the warning
    (
        rules.check_parameter_server,
        {**PS2, "instance": {"type": "ml.p3.8xlarge", "count": 2}},
        {**PS2, **USER_SCRIPT, "instance": {"type": "ml.p3.8xlarge", "count": 2}},
        ("warning", "instance.type", "3 of 4 GPUs idle"),
    ),
    (
        rules.check_ps_pipe_channels,
        {
            **PS2,
            "instance": {"type": "ml.p3.8xlarge", "count": 2},
            "data": {"mode": "Pipe", "train": [f"s3://dfm-bucket/t{i}/" for i in range(4)]},
        },
        {
            **PS2,
            "instance": {"type": "ml.p3.8xlarge", "count": 2},
            "data": {"mode": "Pipe", "train": "s3://dfm-bucket/t/"},
        },
        ("error", "data.train", "runs 4 worker tasks on each ml.p3.8xlarge"),
    ),
    (
        rules.check_parameter_server,
        {**PS2, "checkpoints": {"file_system": EFS}, "vpc": VPC},
        {**PS2, "checkpoints": False},
        ("error", "checkpoints", "shared model/checkpoint location"),
    ),
    (
        rules.check_parameter_server,
        hetero(instance={"type": "ml.g5.2xlarge", "count": 1}),
        {**PS2, "instance": {"count": 1}},
        ("warning", "instance.count", "count >= 2"),
    ),
    # parameter servers on their own group: 2 x r5.4xlarge = 256 GiB; adam keeps 2 slots per element; a ps at its
    # peak holds 1.6x its share, and a working set; 2.1x in a job that restores checkpoints
    (
        rules.check_ps_group,
        hetero(count=4, hyperparameters={"feature_size": 15 * 10**8, "optimizer": "adam"}),
        hetero(hyperparameters={"feature_size": 15 * 10**8, "optimizer": "adam"}),
        (
            "error",
            PS_FIELD,
            "need 318.1 GiB (feature_size 1,500,000,000 x (1 + embedding_size 8) x 4 bytes x (1 + 2 adam slots) = "
            "150.9 GiB, x 2.1 at the ps processes' peak (they restore checkpoints) + 0.6 GiB each), more than the ps "
            "group's 2 x ml.r5.4xlarge (128 GiB each) = 256.0 GiB: use count 4",
        ),
    ),
    (
        rules.check_ps_group,
        hetero(checkpoints=False, hyperparameters={"feature_size": 10**9, "optimizer": "adam"}),
        hetero(checkpoints=False, hyperparameters={"feature_size": 3 * 10**9, "optimizer": "adam"}),
        (
            "error",
            PS_FIELD,
            "need 484.0 GiB (feature_size 3,000,000,000 x (1 + embedding_size 8) x 4 bytes x (1 + 2 adam slots) = "
            "301.7 GiB, x 1.6 at the ps processes' peak + 0.6 GiB each), more than the ps group's "
            "2 x ml.r5.4xlarge (128 GiB each) = 256.0 GiB: use count 6",
        ),
    ),
    (
        rules.check_ps_group,
        hetero(checkpoints=False, hyperparameters={"feature_size": 2 * 10**9, "optimizer": "sgd"}),
        hetero(checkpoints=False, hyperparameters={"feature_size": 15 * 10**8, "optimizer": "adam"}),
        ("warning", PS_FIELD, "95% of the ps group's"),
    ),
    (
        rules.check_ps_group,
        hetero(count=1, features=dict(RAW_BIG, categorical={"c1": {"hash_buckets": 10**8}}), **ADAM),
        hetero(count=1, features=RAW_BIG, **ADAM),
        ("error", PS_FIELD, "feature_size 1,500,000,107 x"),
    ),
    # GPUs: float16 needs one; under Horovod and MWMS every GPU holds the whole tables and slots
    (
        rules.check_mixed_precision_on_cpu,
        {"instance": {"type": "ml.g5.2xlarge"}, "hyperparameters": {"mixed_precision": True}},
        {"instance": {"type": "ml.c5.4xlarge"}, "hyperparameters": {"mixed_precision": "yes"}},
        ("error", "hyperparameters.mixed_precision", "ml.c5.4xlarge has no GPU"),
    ),
    # bfloat16 needs it in hardware: Sapphire Rapids CPUs (7i), Ampere-or-newer GPUs
    (
        rules.check_bfloat16_hardware,
        {"instance": {"type": "ml.c7i.24xlarge"}, "hyperparameters": {"mixed_precision": "bfloat16"}},
        {"instance": {"type": "ml.c5.18xlarge"}, "hyperparameters": {"mixed_precision": "bfloat16"}},
        (
            "error",
            "hyperparameters.mixed_precision",
            "ml.c5.18xlarge has no bfloat16 hardware, where bfloat16 runs slower than "
            "float32: use an instance type of ml.c7i, ml.c7i-flex, ml.c8i,",
        ),
    ),
    (
        rules.check_bfloat16_hardware,
        {**HOROVOD, "instance": {"type": "ml.p6-b200.48xlarge"}, "hyperparameters": {"mixed_precision": "bfloat16"}},
        {**HOROVOD, "instance": {"type": "ml.p3dn.24xlarge"}, "hyperparameters": {"mixed_precision": "bfloat16"}},
        ("error", "hyperparameters.mixed_precision", "ml.p3dn.24xlarge has no bfloat16"),
    ),
    (
        rules.check_bfloat16_hardware,
        {**HOROVOD, "instance": {"type": "ml.g5.12xlarge"}, "hyperparameters": {"mixed_precision": "bfloat16"}},
        {**HOROVOD, "hyperparameters": {"mixed_precision": "bfloat16"}},
        ("error", "hyperparameters.mixed_precision", "ml.p3.8xlarge has no bfloat16"),
    ),
    (
        rules.check_gpu_memory,
        mirrored(10**8, "gather"),
        mirrored(3 * 10**8, "gather"),
        (
            "error",
            "hyperparameters.feature_size",
            "48.1 GiB (feature_size 300,000,000 x (1 + embedding_size 8) x 4 bytes x "
            "(1 + 2 adam slots), plus 2 copies of the 300,000,000 x 8 embedding table in "
            "the start-up broadcast), more than one A10G of ml.g5.12xlarge (24 GiB)",
        ),
    ),
    (
        rules.check_gpu_memory,
        mirrored(10**8, "gather"),
        mirrored(12 * 10**7, "gather"),
        ("warning", "hyperparameters.feature_size", "80% of one A10G"),
    ),
    # tables and slots alone 63% of the GPU: the broadcast's two copies of the embedding table do not fit beside them
    (
        rules.check_gpu_memory,
        mirrored(7 * 10**7, "gather"),
        mirrored(15 * 10**7, "gather"),
        ("error", "hyperparameters.feature_size", "24.0 GiB (feature_size 150,000,000"),
    ),
    # 44% for tables, slots and one gradient; the all-reduce's pack and output make it 73%
    (
        rules.check_gpu_memory,
        mirrored(10**8, "gather", "ftrl"),
        mirrored(105 * 10**6, "dense", "adagrad"),
        ("warning", "hyperparameters.feature_size", "1 adagrad slot), plus 3 dense gradients in a step's all-reduce"),
    ),
    (
        rules.check_bundled_hyperparameters,
        mirrored(10**5, "gather", "ftrl"),
        mirrored(10**5, "dense", "ftrl"),
        ("error", "hyperparameters.sparse_allreduce", "zero every row outside the batch"),
    ),
    (
        rules.check_bundled_hyperparameters,
        mirrored(10**5, "dense", "adagrad"),
        mirrored(10**5, "dense"),
        ("error", "hyperparameters.sparse_allreduce", "lazy Adam dense"),
    ),
    # one host: the toolkit starts no ps, so deepfm-ps trains as one process on one GPU
    (
        rules.check_one_host_ps_gpus,
        {**PS2, "instance": {"type": "ml.p3.8xlarge", "count": 2}},
        {"distribution": "parameter_server", "instance": {"type": "ml.p3.8xlarge", "count": 1}},
        ("error", "instance.count", "trains as one process on 1 of ml.p3.8xlarge's 4 GPUs (3 idle)"),
    ),
    (
        rules.check_one_host_ps_gpus,
        {"distribution": "parameter_server", "instance": {"type": "ml.g5.2xlarge"}},
        {"distribution": "parameter_server", "instance": {"type": "ml.g5.12xlarge"}},
        ("error", "instance.count", "deepfm-mirrored"),
    ),
    (
        rules.check_gpu_memory,
        hvd(4, hyperparameters={"feature_size": 5 * 10**7}),
        hvd(4, hyperparameters={"feature_size": 2 * 10**8, "optimizer": "ftrl"}),
        ("error", "hyperparameters.feature_size", "each Horovod rank holds the whole embedding tables"),
    ),
    # 45e6 x 9 x 4 bytes x 3 + the process's 0.6 GiB: 5.1 GiB of ml.c5.xlarge's 8; 90e6: 9.7 GiB
    (
        rules.check_host_memory,
        {"hyperparameters": {"feature_size": 45 * 10**6}},
        {"hyperparameters": {"feature_size": 9 * 10**7}},
        ("error", "hyperparameters.feature_size", "9.7 GiB on each ml.c5.xlarge (all on one process"),
    ),
    (
        rules.check_local_memory,
        {"hyperparameters": {"feature_size": 10**7}, "local": {"memory_per_host": "8GiB"}},
        {"hyperparameters": {"feature_size": 10**7}, "local": {"memory_per_host": "512MiB"}},
        ("error", "local.memory_per_host", "512MiB is less than the 1.6 GiB the busiest simulated host needs"),
    ),
    (
        rules.check_ps_group,
        hetero("ml.r6i.8xlarge"),
        hetero("ml.g5.2xlarge"),
        ("warning", f"{PS_FIELD}.type", "never uses"),
    ),
    (
        rules.check_ps_group,
        hetero("ml.r7i.4xlarge"),
        hetero("ml.r5.5xlarge"),
        (
            "error",
            f"{PS_FIELD}.type",
            "not a value SageMaker accepts for a training instance type (did you mean 'ml.r5.xlarge'?)",
        ),
    ),
    (
        rules.check_ps_group,
        hetero(),
        hetero(entry_point="train.py", source_dir="s3://dfm-bucket/code/sourcedir.tar.gz"),
        ("warning", PS_FIELD, "build the cluster itself from /opt/ml/input/config/resourceconfig.json"),
    ),
    (
        rules.check_spot,
        {"max_run": 3600, "spot": {"max_wait": 3600}},
        {"max_run": 3600, "spot": {"max_wait": 3599}},
        ("error", "spot.max_wait", "use max_wait >= 3600"),
    ),
    (
        rules.check_spot,
        {"spot": {"max_wait": 86400}, "checkpoints": "s3://dfm-bucket/ck/"},
        {"spot": {"max_wait": 86400}, "checkpoints": False},
        ("error", "checkpoints", "resume from checkpoints"),
    ),
    (
        rules.check_spot,
        {"spot": {"max_wait": 86400}},
        {"spot": {"max_wait": 86400}, "warm_pool_seconds": 600},
        ("error", "warm_pool_seconds", "cannot be used with spot instances"),
    ),
    (
        rules.check_mirrored,
        {"distribution": "multi_worker_mirrored", "framework": {"version": "2.9"}},
        {"distribution": "multi_worker_mirrored", "framework": {"version": "2.8"}, "image_uri": "my/tf:2.8"},
        ("error", "distribution", "needs TensorFlow >= 2.9"),
    ),
    (
        rules.check_s3_shard,
        {"data": {"s3_shard": False, "train": EFS}},
        {"data": {"s3_shard": True, "train": EFS}},
        ("warning", "data.s3_shard", "no effect on file systems"),
    ),
    (
        rules.check_file_systems,
        {"data": {"train": [EFS]}, "vpc": VPC},
        {"data": {"train": ["s3://dfm-bucket/t/", EFS]}},
        ("error", "data.train.1", "add vpc:"),
    ),
    (
        rules.check_local_channels,
        {"data": {"eval": "s3://dfm-bucket/e/"}, "local": {"channels": {"eval": "x"}}},
        {"local": {"channels": {"eval": "x"}}},
        ("error", "local.channels.eval", "no channel 'eval'"),
    ),
    # operations (recover:, stall_timeout, retry:, mlflow:)
    (
        rules.check_recover,
        {"recover": {"instance_types": ["ml.m5.24xlarge"]}},
        {"recover": {"max_restarts": 2}, "checkpoints": False},
        ("error", "checkpoints", "resume from its checkpoints"),
    ),
    (
        rules.check_recover,
        {"recover": {"max_restarts": 1}, "tags": {f"t{i}": "x" for i in range(49)}},
        {"recover": {"max_restarts": 1}, "tags": {f"t{i}": "x" for i in range(50)}},
        ("error", "tags", "keep at most 49"),
    ),
    (
        rules.check_recover,
        {"recover": {"instance_types": ["ml.c5.9xlarge"]}},
        {"recover": {"instance_types": ["ml.c5.9xlarge", "ml.p3.2xlarge"]}},
        ("error", "recover.instance_types.1", "has 1 GPUs where ml.c5.xlarge has 0"),
    ),
    (
        rules.check_stall_timeout,
        {"stall_timeout": 600},
        {**USER_SCRIPT, "stall_timeout": 600},
        ("warning", "stall_timeout", "your script must print them"),
    ),
    (
        rules.check_warm_start,
        {"warm_start": {"from": "s3://dfm-bucket/out/day1/checkpoints"}, "checkpoints": "s3://dfm-bucket/ck/day2"},
        {"warm_start": {"from": "s3://dfm-bucket/ck/day2/"}, "checkpoints": "s3://dfm-bucket/ck/day2"},
        ("error", "warm_start.from", "SageMaker would restore it and then overwrite it"),
    ),
    (
        rules.check_request_limits,
        {"retry": {"max_attempts": 30}},
        {"retry": {"max_attempts": 31}},
        ("error", "retry.max_attempts", "more than SageMaker's maximum"),
    ),
    (
        rules.check_request_limits,
        {"recover": {"instance_types": ["ml.m5.24xlarge"]}},
        {"recover": {"instance_types": ["ml.m5.bogus"]}},
        ("error", "recover.instance_types.0", "not a value SageMaker accepts"),
    ),
    (
        rules.check_request_limits,
        {
            "mlflow": {
                "tracking_server_arn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/a",
                "run": "r",
            }
        },
        {
            "mlflow": {
                "tracking_server_arn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/a",
                "run": "r" * 257,
            }
        },
        ("error", "mlflow.run", "SageMaker allows at most 256"),
    ),
    *TUNE_CASES,
    (
        rules.check_prepare,
        {"prepare": PREPARE},
        {"prepare": {**PREPARE, "eval_fraction": 0.1}},
        ("error", "data.eval", "give data.eval"),
    ),
    (
        rules.check_prepared_layout,
        {
            **hvd(2),
            "framework": {"version": "2.12"},
            "prepare": PREPARE,
            "data": {"train": ["s3://dfm-bucket/a/", "s3://dfm-bucket/b/"]},
        },
        {
            **hvd(2),
            "framework": {"version": "2.12"},
            "prepare": PREPARE,
            "data": {"train": ["s3://dfm-bucket/a/", "s3://dfm-bucket/b/", "s3://dfm-bucket/c/"]},
        },
        ("error", "prepare.files_per_worker", "multiple of workers"),
    ),
]


@pytest.mark.parametrize("rule, accepted, refused, expected", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_rule(tmp_path, rule, accepted, refused, expected):
    assert findings(tmp_path, accepted, rule) == []
    severity, field, text = expected
    found = findings(tmp_path, refused, rule)
    assert any(s == severity and f == field and text in m for s, f, m in found), found


def test_every_rule_is_exercised():
    assert {case[0] for case in CASES} == set(rules.RULES) | {rules.check_job_name}


def test_a_valid_job_name_is_accepted_whatever_the_base_name(tmp_path):
    """--job-name replaces the base name + timestamp: the base name's length limit no longer applies."""
    spec = load_spec(write_spec(tmp_path, {"name": "d" * 50}))
    assert [f.field for f in rules.errors(rules.check(spec))] == ["name"]
    assert rules.errors(rules.check(spec, job_name="d" * 63)) == []
    assert [f.field for f in rules.errors(rules.check(spec, job_name="d" * 64))] == ["--job-name"]


def test_findings_render_with_the_line_that_set_the_field(tmp_path):
    path = write_spec(tmp_path, {**hvd(8), "framework": {"version": "2.12"}, "data": {"train": "s3://dfm-bucket/t/"}})
    spec = load_spec(path)
    (finding,) = rules.errors(rules.check(spec))
    assert finding.render(spec) == (
        f"{path}:{line_of(path, 'processes_per_host')}: distribution.horovod.processes_per_host: "
        "8 processes, but ml.p3.8xlarge has 4 GPUs: use at most 4"
    )


def test_job_name_override_is_the_full_name():
    assert rules.check_job_name_override("a" * 63) == []
    assert rules.check_job_name_override("a" * 64)[0].field == "--job-name"
    assert rules.check_job_name_override("job_1")


def test_user_script_must_exist_next_to_the_spec(tmp_path):
    assert file_findings(tmp_path, {"entry_point": "train.py"}, rules.check_entry_point)[0][1] == "entry_point"
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert file_findings(tmp_path, {"entry_point": "train.py"}, rules.check_entry_point) == []
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("")
    assert file_findings(tmp_path, {"entry_point": "main.py", "source_dir": "src"}, rules.check_entry_point) == []


def test_every_bundled_default_passes_the_type_checks(tmp_path):
    defaults = {
        k: v for k, v in contract.bundled_hparams().DEFAULTS.items() if k not in contract.DERIVED_HYPERPARAMETERS
    }
    assert findings(tmp_path, {"hyperparameters": defaults}, rules.check_bundled_hyperparameters) == []


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_example_configs_have_no_errors(config):
    spec = load_spec(config)
    assert rules.errors(rules.check(spec)) == []


def test_recovery_types_get_the_instance_type_rules(tmp_path, capsys):
    """A recovery attempt runs the job on each type of recover.instance_types: bfloat16 on a type without it is
    refused there, at that type's line, as on the spec's own type."""
    from spec_helpers import run

    path = write_spec(
        tmp_path,
        {
            "instance": {"type": "ml.c7i.8xlarge"},
            "hyperparameters": {"mixed_precision": "bfloat16"},
            "recover": {"instance_types": ["ml.c7i.8xlarge", "ml.c6i.8xlarge", "ml.m5.12xlarge"]},
        },
    )
    code, _, err = run(capsys, "validate", path)
    assert code == 2
    assert (
        f"{path}:{line_of(path, '- ml.c6i.8xlarge')}: recover.instance_types.1: a recovery attempt on ml.c6i.8xlarge: "
        "hyperparameters.mixed_precision: ml.c6i.8xlarge has no bfloat16 hardware"
    ) in err
    assert "recover.instance_types.2: a recovery attempt on ml.m5.12xlarge" in err
    assert "recover.instance_types.0" not in err


SAMPLE_TYPES = (
    "ml.c5.xlarge",
    "ml.c7i.8xlarge",
    "ml.m5.large",
    "ml.g4dn.xlarge",
    "ml.g5.12xlarge",
    "ml.p3.8xlarge",
    "ml.trn1.2xlarge",
    "ml.m5.unknown",
)


@pytest.mark.parametrize("rule, accepted, refused, expected", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_every_rule_that_reads_the_instance_type_runs_on_the_recovery_types(
    tmp_path, rule, accepted, refused, expected
):
    """A rule whose findings change with instance.type alone is one of INSTANCE_TYPE_RULES (check_recover compares
    the recovery types with it, and the request limits check every type's spelling)."""
    if rule in (rules.check_recover, rules.check_request_limits, rules.check_job_name):
        return
    for changes in (accepted, refused):
        spec = load_spec(merged(BASE, changes))
        seen = {
            tuple(
                (f.field, f.message.replace(t, "<type>"))
                for f in rule(spec.model_copy(update={"instance": spec.instance.model_copy(update={"type": t})}))
            )
            for t in SAMPLE_TYPES
        }
        assert len(seen) == 1 or rule in rules.INSTANCE_TYPE_RULES, (rule.__name__, seen)
