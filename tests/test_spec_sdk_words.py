"""The SageMaker SDK v2's spellings in a spec: refused (exit 2) on the line written, naming dfm's field or form."""

from __future__ import annotations

import pytest

from spec_helpers import line_of, run, write_spec

SDK_ARGUMENTS = [  # (what the user wrote, the field reported, what the message must name)
    ({"instance": {"instance_type": "ml.c5.xlarge"}}, "instance.instance_type", "use instance.type"),
    ({"instance_type": "ml.c5.xlarge"}, "instance_type", "use instance.type"),
    ({"instance_count": 2}, "instance_count", "use instance.count"),
    ({"instance": {"volume_size": 100}}, "instance.volume_size", "use instance.volume_gb"),
    ({"use_spot_instances": True}, "use_spot_instances", "use spot: {max_wait: seconds}"),
    ({"max_wait": 7200}, "max_wait", "use spot.max_wait"),
    ({"checkpoint_s3_uri": "s3://b-x/ck/"}, "checkpoint_s3_uri", "use checkpoints: s3://"),
    ({"checkpoint_local_path": "/opt/ml/ck"}, "checkpoint_local_path", "use checkpoints.local_path"),
    ({"output_path": "s3://b-x/out/"}, "output_path", "use output"),
    ({"code_location": "s3://b-x/code/"}, "code_location", "use output"),
    ({"input_mode": "Pipe"}, "input_mode", "use data.mode"),
    ({"data": {"input_mode": "Pipe"}}, "data.input_mode", "use data.mode"),
    ({"keep_alive_period_in_seconds": 600}, "keep_alive_period_in_seconds", "use warm_pool_seconds"),
    ({"subnets": ["subnet-0123456789abcdef0"]}, "subnets", "use vpc.subnets"),
    ({"security_group_ids": ["sg-0123456789abcdef0"]}, "security_group_ids", "use vpc.security_group_ids"),
    ({"framework_version": "2.14"}, "framework_version", "use framework.version"),
    ({"framework": {"py_version": "py310"}}, "framework.py_version", "use framework.python"),
    ({"framework": {"image_uri": "x"}}, "framework.image_uri", "use image_uri at the top level"),
    (
        {"distribution": {"parameter_server": {"enabled": True}}},
        "distribution.parameter_server.enabled",
        "use distribution: parameter_server",
    ),
    (
        {"distribution": {"mpi": {"enabled": True, "processes_per_host": 4}}},
        "distribution",
        "use distribution: {horovod: {processes_per_host: 4}}",
    ),
    (
        {"distribution": {"multi_worker_mirrored_strategy": {"enabled": True}}},
        "distribution",
        "use distribution: multi_worker_mirrored",
    ),
    (
        {"distribution": {"parameter_server": {}, "horovod": {}}},
        "distribution",
        "parameter_server and horovod given: a job has one distribution",
    ),
]


@pytest.mark.parametrize(
    "written, field, names", SDK_ARGUMENTS, ids=[case[1] + "-" + case[2][4:20] for case in SDK_ARGUMENTS]
)
def test_an_sdk_spelling_is_refused_with_the_dfm_field_on_its_line(tmp_path, capsys, written, field, names):
    spec = write_spec(tmp_path, written)
    code, _, err = run(capsys, "validate", str(spec))
    key = field.split(".")[-1] if field != "distribution" else "distribution"
    expected = f"error: {spec}:{line_of(spec, key + ':')}: {field}: "
    found = [line for line in err.splitlines() if line.startswith(expected)]
    assert code == 2 and len(found) == 1 and names in found[0], err
    assert "unknown key" not in found[0] and "did you mean" not in found[0]


def test_other_unknown_keys_still_get_a_did_you_mean(tmp_path, capsys):
    code, _, err = run(capsys, "validate", str(write_spec(tmp_path, {"instance": {"typ": "ml.c5.xlarge"}})))
    assert code == 2 and "instance.typ: unknown key (did you mean 'type'?)" in err
