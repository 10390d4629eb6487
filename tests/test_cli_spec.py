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
    assert first["valid"] and first["errors"] == [] and "not in dfm's catalogue" in first["warnings"][0]["message"]
    assert first["warnings"][0]["field"] == "instance.type"
    (error,) = second["errors"]
    assert not second["valid"] and set(error) == {"file", "line", "field", "message"}
    assert error["file"] == str(bad) and error["field"] == "instance.count" and isinstance(error["line"], int)


def test_validate_applies_set_overrides(capsys, tmp_path):
    spec = write_spec(tmp_path)
    assert run(capsys, "validate", spec, "--set", "data.mode=Pipe", "--set", "framework.version='2.16'")[0] == 2
    assert run(capsys, "validate", spec, "--set", "data.mode=Pipe")[0] == 0


@pytest.mark.parametrize(
    "override, rc, words",
    [
        ("instance.type=ml.c5.bogus", 2, "did you mean 'ml.c5.xlarge'"),
        ("environment.FEATURES=" + "f" * 600, 2, "600 characters, SageMaker allows at most 512"),
        ("hyperparameters.kmp_affinity=" + "k" * 1000, 0, ""),  # the API allows 2500
    ],
)
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
    code, out, _ = run(
        capsys,
        "launch",
        REPO / "configs" / "ps.yaml",
        "--dry-run",
        "--output",
        "json",
        "--job-name",
        JOB,
        "--set",
        "hyperparameters.epochs=2",
    )
    assert code == 0 and no_network == []
    document = json.loads(out)
    assert {"job_name", "estimator", "inputs", "argv", "request", "warnings", "cost", "image_uri"} <= set(document)
    assert document["job_name"] == document["request"]["TrainingJobName"] == JOB
    assert document["estimator"]["class"] == "sagemaker.tensorflow.TensorFlow"
    assert document["estimator"]["kwargs"]["distribution"] == {"parameter_server": {"enabled": True}}
    assert set(document["inputs"]) == {"train", "eval"}
    assert document["argv"][document["argv"].index("--epochs") + 1] == "2"
    assert document["image_uri"].endswith(
        "tensorflow-training:2.21.0-cpu-py312-amzn2023-sagemaker"
    )  # SDK v2 lacks 2.21
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
    secrets = [
        "--set",
        "environment.DB_PASSWORD=hunter2",
        "--set",
        "environment.githubToken=ghp_abc123",
        "--set",
        "environment.FEATURE_SET=wide",
    ]
    argv = ["launch", REPO / "configs" / "ps.yaml", "--dry-run", "--output", output, "--job-name", JOB, *secrets]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "hunter2" not in out + err and "ghp_abc123" not in out + err
    assert "wide" in out and "****" in out
    if output == "json":
        document = json.loads(out)
        assert document["request"]["Environment"] == {
            "DB_PASSWORD": "****",
            "githubToken": "****",
            "FEATURE_SET": "wide",
        }
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
    error = json.loads(out)["errors"][0]
    assert code == 2 and error["field"] == "spot.max_wait" and error["file"].endswith("spot_max_wait.yaml")
    assert err.startswith("error: ")


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
        session.events.register(
            "provide-client-params.sagemaker.CreateTrainingJob", lambda params, **_: sent.append(params)
        )
        return session

    monkeypatch.setattr(sm_aws, "boto_session", hooked)
    code, out, err = run(
        capsys,
        "launch",
        REPO / "configs" / "ps.yaml",
        "--output",
        "json",
        "--job-name",
        JOB,
        "--set",
        "environment.DB_PASSWORD=hunter2",
    )
    assert code == 0, err
    assert json.loads(out)["job_name"] == JOB
    (request,) = sent
    assert request["Environment"] == {"DB_PASSWORD": "hunter2"}  # masking is for what dfm prints, never what it sends
    assert request["TrainingJobName"] == JOB and request["ResourceConfig"]["InstanceCount"] == 2
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/deepfm/train/"
    assert f"s3://{bucket}/deepfm/train/ holds 1 object(s) for 2 hosts" in err
    assert "eval" not in err.split("holds")[0]  # eval is replicated, not sharded: no warning for it
    assert "data.s3_shard" not in err  # the bucket was listed: no guess of what it might hold


def test_the_shard_file_count_warning_is_given_only_where_nothing_counts_the_files(
    capsys, tmp_path, no_aws_env, no_network
):
    """validate and the SageMaker dry run cannot look at the bucket: they warn. A --local run counts its local
    files (and warns per host of one left without any), so the guess does not apply there."""
    spec = REPO / "configs" / "ps.yaml"
    for argv in (["validate", spec], ["launch", spec, "--dry-run", "--job-name", JOB]):
        code, _, err = run(capsys, *argv)
        assert code == 0
        (line,) = [line for line in err.splitlines() if "data.s3_shard" in line]
        assert "channel train: ShardedByS3Key deals whole objects to its 2 hosts" in line
    for name in ("train/a", "train/b", "eval/a"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    channels = ["--channel", f"train={tmp_path / 'train'}", "--channel", f"eval={tmp_path / 'eval'}"]
    code, _, err = run(capsys, "launch", spec, "--local", "--dry-run", *channels, "--job-name", JOB)
    assert code == 0 and "data.s3_shard" not in err and "no files" not in err
    (tmp_path / "train" / "b").unlink()  # one file for two hosts: the local run says so, per host
    code, out, err = run(capsys, "launch", spec, "--local", "--dry-run", *channels, "--job-name", JOB)
    assert "data.s3_shard" not in err and "algo-2: channel 'train' has no files on this host" in out + err
    tune = REPO / "configs" / "tune-ps.yaml"
    code, out, _ = run(capsys, "tune", tune, "--dry-run", "--output", "json")
    assert code == 0 and any("channel train: ShardedByS3Key" in w for w in json.loads(out)["warnings"])


# --- launch --local wiring -------------------------------------------------------------------------


def test_local_launch_passes_the_plan_with_overrides(capsys, monkeypatch, tmp_path):
    import launcher.local
    from launcher.local.local_request import request_plan

    calls = []

    def record(request, *, echo, verbose):
        plan = request_plan(request)
        calls.append((plan, plan.local.run_dir, plan.local.timeout_s, verbose))
        return 3

    monkeypatch.setattr(launcher.local, "run_request", record)
    code, _, _ = run(
        capsys,
        "launch",
        REPO / "configs" / "ps.yaml",
        "--local",
        "--channel",
        f"train={tmp_path}",
        "--run-dir",
        tmp_path / "runs",
        "--timeout",
        "30",
        "--set",
        "instance.count=1",
    )
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


# --- a bug in dfm -----------------------------------------------------------------------------------


def _crash(*args, **kwargs):
    raise KeyError("instance\nsecond line")


def test_an_unexpected_exception_is_one_line_naming_a_dfm_bug_with_exit_3(capsys, monkeypatch):
    monkeypatch.setattr("launcher.compile.rules.check", _crash)
    code, out, err = run(capsys, "validate", str(CONFIGS[0]))
    assert code == 3 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and "bug in dfm" in err and "KeyError" in err and "second line" in err
    assert "rerun with --debug for the traceback" in err


def test_debug_shows_the_unexpected_exceptions_traceback(capsys, monkeypatch):
    monkeypatch.setattr("launcher.compile.rules.check", _crash)
    with pytest.raises(KeyError):
        run(capsys, "--debug", "validate", str(CONFIGS[0]))


def test_the_dry_run_leads_with_a_summary_of_what_costs_and_ships(capsys, no_aws_env, no_network, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # piped: never wrapped at the terminal's width, whatever it is
    code, out, err = run(capsys, "launch", REPO / "configs" / "ps.yaml", "--dry-run", "--job-name", JOB)
    assert code == 0
    head = out.splitlines()[:15]
    labels = [line.split(" ")[0] for line in head if line and not line.startswith(" ")]
    assert labels[:8] == ["Job", "Image", "Hosts", "Channels", "Checkpoints", "Cost", "Upload", "Warnings"]
    assert (
        f"s3://dfm-example-bucket/deepfm/{JOB}/checkpoints"
        in out.splitlines()[head.index(next(line for line in head if line.startswith("Checkpoints")))]
    )
    assert any(line.startswith("Cost") and "$7.34" in line for line in head)
    assert any(line.startswith("Upload") and "files" in line and "entrypoints" in line for line in head)
    assert "s3://dfm-example-bucket/deepfm/train/" in out  # whole, on one line
    assert not any(line != line.rstrip() for line in out.splitlines())


def _submit_runner(monkeypatch, terminal: bool):
    from click.testing import CliRunner

    from launcher.cli import _register, cli
    from launcher.cli import spec as spec_cli
    from launcher.sagemaker_backend import attempts

    _register()
    submitted = []
    monkeypatch.setattr(attempts, "launch", lambda plan, **_: submitted.append(plan.job_name) or plan.job_name)
    if terminal:
        monkeypatch.setattr(spec_cli, "on_terminal", lambda: True)
    return CliRunner(), cli, submitted


@pytest.mark.parametrize(
    "answer, extra, asked, sent",
    [
        ("n\n", [], True, False),
        ("y\n", [], True, True),
        ("", ["--yes"], False, True),
    ],
)
def test_launch_on_a_terminal_shows_the_summary_and_asks(
    no_aws_env, no_network, monkeypatch, answer, extra, asked, sent
):
    runner, cli, submitted = _submit_runner(monkeypatch, terminal=True)
    result = runner.invoke(cli, ["launch", str(REPO / "configs" / "ps.yaml"), "--job-name", JOB, *extra], input=answer)
    assert ("Submit this job?" in result.output) == asked
    assert ("Cost        at most $7.34" in result.output) == asked
    assert submitted == ([JOB] if sent else [])
    if not sent:
        assert result.exception.message == "not submitted" and result.exception.exit_code == 1


def test_launch_without_a_terminal_never_asks(no_aws_env, no_network, monkeypatch):
    runner, cli, submitted = _submit_runner(monkeypatch, terminal=False)
    result = runner.invoke(cli, ["launch", str(REPO / "configs" / "ps.yaml"), "--job-name", JOB])
    assert result.exit_code == 0 and "Submit this job?" not in result.output and submitted == [JOB]


def test_a_placeholder_role_or_bucket_is_a_warning_naming_the_variable(capsys, monkeypatch):
    monkeypatch.delenv("DFM_ROLE_ARN", raising=False)
    monkeypatch.delenv("DFM_BUCKET", raising=False)
    code, out, err = run(capsys, "validate", REPO / "configs" / "ps.yaml")
    assert code == 0 and "set DFM_ROLE_ARN" in err and "set DFM_BUCKET" in err
    monkeypatch.setenv("DFM_ROLE_ARN", "arn:aws:iam::111122223333:role/real")
    monkeypatch.setenv("DFM_BUCKET", "real-bucket")
    code, out, err = run(capsys, "validate", REPO / "configs" / "ps.yaml")
    assert code == 0 and "DFM_ROLE_ARN" not in err and "DFM_BUCKET" not in err


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "my.yaml:7: distribution.horovod.processes_per_host: use at most 4",
            {
                "file": "my.yaml",
                "line": 7,
                "field": "distribution.horovod.processes_per_host",
                "message": "use at most 4",
            },
        ),
        ("my.yaml: not a mapping", {"file": "my.yaml", "line": None, "field": None, "message": "not a mapping"}),
        (
            "--job-name: 'a_b' is not a job name",
            {"file": None, "line": None, "field": "--job-name", "message": "'a_b' is not a job name"},
        ),
        (
            "--set: instance.count: must be >= 1",
            {"file": "--set", "line": None, "field": "instance.count", "message": "must be >= 1"},
        ),
    ],
)
def test_json_findings_are_objects(line, expected):
    from launcher.cli.compile_errors import as_object

    assert as_object(line) == expected
