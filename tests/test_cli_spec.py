"""`dfm validate`, `dfm schema` and `dfm launch` (dry run, submit against moto, --local wiring)."""

from __future__ import annotations

import json
import subprocess
import sys

import boto3
import pytest

from launcher.sagemaker_backend import aws as sm_aws
from spec_helpers import CONFIGS, REPO, run, write_spec

JOB = "deepfm-ps-2026-11-21-20-00-00-000"
BAD = REPO / "tests" / "bad_specs"
HEAVY = ("sagemaker", "tensorflow", "boto3", "botocore", "horovod")


def imported_after(code: str) -> dict:
    """Run `code` in a fresh interpreter; report its exit code and the heavy modules it imported."""
    script = (
        "import json, sys\nfrom launcher.cli import main\n"
        f"rc = {code}\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    return json.loads(done.stderr.strip().splitlines()[-1])


# --- lazy imports ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, rc",
    [
        (["--help"], 0),
        (["validate", *map(str, CONFIGS)], 0),
        (["validate", str(BAD / "python_tag.yaml")], 2),
        (["launch", str(BAD / "pipe_horovod_channels.yaml"), "--dry-run"], 2),
        (["schema"], 0),
    ],
    ids=["help", "validate", "validate-bad", "launch-invalid", "schema"],
)
def test_commands_that_need_no_aws_import_no_sdk(argv, rc):
    assert imported_after(f"main({argv!r})") == {"rc": rc, "heavy": []}


# --- validate and schema ---------------------------------------------------------------------------


def test_validate_accepts_the_example_configs(capsys):
    code, out, err = run(capsys, "validate", *CONFIGS)
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines()] == [str(c) for c in CONFIGS]
    assert all(line.startswith("warning: ") for line in err.splitlines())


def test_validate_reports_every_bad_spec_on_one_line_each(capsys):
    bad = sorted(BAD.glob("*.yaml"))
    code, out, err = run(capsys, "validate", *bad)
    assert code == 2
    assert len(out.splitlines()) == len(bad) and all("error(s)" in line for line in out.splitlines())
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) >= len(bad) and "Traceback" not in err


def test_validate_json_output(capsys, tmp_path):
    good = write_spec(tmp_path, {"instance": {"type": "ml.g7e.2xlarge"}, "framework": {"version": "2.21"}})
    bad = write_spec(tmp_path, {"instance": {"count": 0}}, name="bad.yaml")
    code, out, _ = run(capsys, "validate", good, bad, "--output", "json")
    result = json.loads(out)
    assert code == 2 and result["valid"] is False
    first, second = result["files"]
    assert first["valid"] and first["errors"] == [] and "not in dfm's catalogue" in first["warnings"][0]
    assert not second["valid"] and second["errors"][0].startswith(f"{bad}:")


def test_validate_applies_set_overrides(capsys, tmp_path):
    spec = write_spec(tmp_path)
    assert run(capsys, "validate", spec, "--set", "data.mode=Pipe", "--set", "framework.version='2.16'")[0] == 2
    assert run(capsys, "validate", spec, "--set", "data.mode=Pipe")[0] == 0


@pytest.mark.parametrize("override, rc, words", [
    ("instance.type=ml.c5.bogus", 2, "did you mean 'ml.c5.xlarge'"),
    ("environment.FEATURES=" + "f" * 600, 2, "600 characters, SageMaker allows at most 512"),
    ("hyperparameters.kmp_affinity=" + "k" * 1000, 0, ""),  # the API allows 2500
])
def test_validate_enforces_the_service_models_limits(capsys, tmp_path, override, rc, words):
    spec = write_spec(tmp_path)
    code, out, err = run(capsys, "validate", spec, "--set", override)
    assert code == rc and words in err and "Traceback" not in err


def test_schema_prints_the_json_schema(capsys):
    code, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    assert code == 0 and schema["title"] == "dfm job spec" and "hyperparameters" in schema["properties"]


# --- launch --dry-run ------------------------------------------------------------------------------


def test_dry_run_json_is_the_only_stdout_and_makes_no_network_call(capsys, no_aws_env, no_network, monkeypatch):
    monkeypatch.delenv("DFM_BUCKET", raising=False)
    code, out, _ = run(capsys, "launch", REPO / "configs" / "ps.yaml", "--dry-run", "--output", "json", "--job-name", JOB,
                       "--set", "hyperparameters.epochs=2")
    assert code == 0 and no_network == []
    document = json.loads(out)
    assert {"job_name", "estimator", "inputs", "argv", "request", "warnings", "cost", "image_uri"} <= set(document)
    assert document["job_name"] == document["request"]["TrainingJobName"] == JOB
    assert document["estimator"]["class"] == "sagemaker.tensorflow.TensorFlow"
    assert document["estimator"]["kwargs"]["distribution"] == {"parameter_server": {"enabled": True}}
    assert set(document["inputs"]) == {"train", "eval"}
    assert document["argv"][document["argv"].index("--epochs") + 1] == "2"
    assert document["image_uri"].endswith("tensorflow-training:2.21.0-cpu-py312-amzn2023-sagemaker")  # SDK v2 lacks 2.21
    assert document["cost"]["max_usd"] == round(3.672 * 2, 2)
    assert any("data.s3_shard" in w for w in document["warnings"])


def test_dry_run_text_shows_each_section(capsys, no_aws_env, no_network):
    code, out, err = run(capsys, "launch", REPO / "configs" / "horovod.yaml", "--dry-run", "--job-name", JOB)
    assert code == 0 and no_network == []
    for heading in ("Estimator", "Channels", "Script argv", "Image", "Cost", "CreateTrainingJob request"):
        assert heading in out
    assert "python train_horovod.py" in out and "train-3" in out and "tensorflow-training:2.12-gpu-py310" in out
    assert err.startswith("warning: ") and "data.s3_shard" in err


@pytest.mark.parametrize("output", ["text", "json"])
def test_dry_run_masks_secret_looking_environment_values(capsys, no_aws_env, no_network, output):
    secrets = ["--set", "environment.DB_PASSWORD=hunter2", "--set", "environment.githubToken=ghp_abc123",
               "--set", "environment.FEATURE_SET=wide"]
    argv = ["launch", REPO / "configs" / "ps.yaml", "--dry-run", "--output", output, "--job-name", JOB, *secrets]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "hunter2" not in out + err and "ghp_abc123" not in out + err
    assert "wide" in out and "****" in out
    if output == "json":
        document = json.loads(out)
        assert document["request"]["Environment"] == {"DB_PASSWORD": "****", "githubToken": "****", "FEATURE_SET": "wide"}
        assert document["estimator"]["kwargs"]["environment"]["DB_PASSWORD"] == "****"
    code, out, err = run(capsys, *argv, "--show-secrets")
    assert code == 0 and out.count("hunter2") == 2 and "ghp_abc123" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dry-run", "--wait"], "nothing to wait for"),
        (["--dry-run", "--channel", "train=x"], "apply to --local runs"),
        (["--local", "--channel", "train"], "expected NAME=PATH"),
        (["--dry-run", "--job-name", "bad_name"], "--job-name"),
        (["--dry-run", "--set", "nope"], "expected dotted.key=value"),
    ],
)
def test_launch_usage_errors_exit_2_on_one_line(capsys, extra, message):
    code, out, err = run(capsys, "launch", REPO / "configs" / "ps.yaml", *extra)
    assert code == 2 and message in err and "Traceback" not in err


def test_launch_invalid_spec_json_lists_the_errors(capsys):
    code, out, err = run(capsys, "launch", BAD / "spot_max_wait.yaml", "--dry-run", "--output", "json")
    assert code == 2 and "spot.max_wait" in json.loads(out)["errors"][0] and err.startswith("error: ")


# --- launch (submit) against moto ------------------------------------------------------------------


def test_launch_submits_the_plan_and_warns_about_idle_hosts(capsys, aws, monkeypatch):
    bucket = "dfm-launch-test"
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="deepfm/train/part-0.tfrecord", Body=b"x")  # one object for two hosts
    s3.put_object(Bucket=bucket, Key="deepfm/eval/part-0.tfrecord", Body=b"x")
    monkeypatch.setenv("DFM_BUCKET", bucket)
    sent = []
    real = sm_aws.boto_session

    def hooked(region):
        session = real(region)
        session.events.register("provide-client-params.sagemaker.CreateTrainingJob", lambda params, **_: sent.append(params))
        return session

    monkeypatch.setattr(sm_aws, "boto_session", hooked)
    code, out, err = run(capsys, "launch", REPO / "configs" / "ps.yaml", "--output", "json", "--job-name", JOB,
                         "--set", "environment.DB_PASSWORD=hunter2")
    assert code == 0, err
    assert json.loads(out)["job_name"] == JOB
    (request,) = sent
    assert request["Environment"] == {"DB_PASSWORD": "hunter2"}  # masking is for what dfm prints, never what it sends
    assert request["TrainingJobName"] == JOB and request["ResourceConfig"]["InstanceCount"] == 2
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/deepfm/train/"
    assert f"s3://{bucket}/deepfm/train/ holds 1 object(s) for 2 hosts" in err
    assert "eval" not in err.split("holds")[0]  # eval is replicated, not sharded: no warning for it


# --- launch --local wiring -------------------------------------------------------------------------


def test_local_launch_passes_the_plan_with_overrides(capsys, monkeypatch, tmp_path):
    import launcher.local

    calls = []

    def record(plan, *, echo, verbose):
        calls.append((plan, plan.local.run_dir, plan.local.timeout_s, verbose))
        return 3

    monkeypatch.setattr(launcher.local, "run_local", record)
    code, _, _ = run(capsys, "launch", REPO / "configs" / "ps.yaml", "--local", "--channel", f"train={tmp_path}",
                     "--run-dir", tmp_path / "runs", "--timeout", "30", "--set", "instance.count=1")
    assert code == 3  # the local run's exit code
    ((plan, run_dir, timeout_s, verbose),) = calls
    assert run_dir == str(tmp_path / "runs") and timeout_s == 30 and plan.instance_count == 1 and not verbose
    assert {c.name: c.local_path for c in plan.channels}["train"] == str(tmp_path)


def test_text_dry_run_wraps_long_values_instead_of_cutting_them(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = run(capsys, "launch", REPO / "configs" / "ps.yaml", "--dry-run")
    assert code == 0
    assert "…" not in out
    unwrapped = "".join(out.split())  # wrapped cells, rejoined
    for uri in ("s3://dfm-example-bucket/deepfm/train/", "s3://dfm-example-bucket/deepfm/eval/"):
        assert uri in unwrapped
