"""`dfm init LAYOUT`: a spec that validates once role and bucket are real, on the newest image with the layout."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from launcher.cli import init as init_cli
from launcher.facts import images
from spec_helpers import run

ROLE = "arn:aws:iam::111122223333:role/my-training"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("DFM_ROLE_ARN", "DFM_BUCKET", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(tmp_path / "no-sagemaker-config.yaml"))
    monkeypatch.setenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", str(tmp_path / "no-admin-config.yaml"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("layout", sorted(init_cli.LAYOUTS))
def test_each_layout_validates_with_role_and_bucket_given(capsys, clean_env, tmp_path, layout):
    target = tmp_path / f"{layout}.yaml"
    code, out, err = run(capsys, "init", layout, "-o", target, "--role", ROLE, "--bucket", "my-bucket")
    assert code == 0, err
    code, out, err = run(capsys, "validate", target)
    assert code == 0 and out.startswith(f"{target}: ok"), err
    assert "placeholder" not in err
    spec = yaml.safe_load(target.read_text())
    assert spec["role"] == ROLE and spec["output"].startswith("s3://my-bucket/")


def test_the_image_is_the_newest_that_runs_the_layout():
    newest_horovod = max(
        (i for i in images.IMAGES.values() if i.horovod), key=lambda i: images.version_tuple(i.version)
    )
    assert init_cli.image_for(init_cli.LAYOUTS["horovod"]) == newest_horovod != images.newest()
    assert init_cli.image_for(init_cli.LAYOUTS["mirrored"]) == images.newest()


def test_role_and_bucket_come_from_the_environment_then_the_sdk_config(capsys, clean_env, tmp_path, monkeypatch):
    config = tmp_path / "sagemaker.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "SageMaker": {
                    "TrainingJob": {"RoleArn": ROLE},
                    "PythonSDK": {"Modules": {"Session": {"DefaultS3Bucket": "sdk-bucket"}}},
                }
            }
        )
    )
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(config))
    monkeypatch.setenv("DFM_BUCKET", "env-bucket")
    assert run(capsys, "init", "single", "-o", "a.yaml")[0] == 0
    spec = yaml.safe_load((tmp_path / "a.yaml").read_text())
    assert spec["role"] == ROLE and spec["output"] == "s3://env-bucket/deepfm-single/"


def _sdk_config(path, role=None, bucket=None):
    sagemaker = {"TrainingJob": {"RoleArn": role}} if role else {}
    if bucket:
        sagemaker["PythonSDK"] = {"Modules": {"Session": {"DefaultS3Bucket": bucket}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"SageMaker": sagemaker}))


def test_the_sdk_config_is_found_where_the_sdk_looks(capsys, clean_env, tmp_path, monkeypatch):
    """No override: platformdirs' user config dir (XDG_CONFIG_HOME here), and the admin config in its site config
    dir (XDG_CONFIG_DIRS), the user's values over the admin's, as the SDK merges them."""
    monkeypatch.delenv("SAGEMAKER_USER_CONFIG_OVERRIDE")
    monkeypatch.delenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "site"))
    _sdk_config(tmp_path / "site" / "sagemaker" / "config.yaml", role=ROLE, bucket="admin-bucket")
    _sdk_config(tmp_path / "user" / "sagemaker" / "config.yaml", bucket="user-bucket")
    assert init_cli.sdk_defaults() == {
        "role": ROLE,
        "bucket": "user-bucket",
        "bucket_from": f"{tmp_path / 'user' / 'sagemaker' / 'config.yaml'}: DefaultS3Bucket",
    }
    assert run(capsys, "init", "single", "-o", "a.yaml")[0] == 0
    spec = yaml.safe_load((tmp_path / "a.yaml").read_text())
    assert spec["role"] == ROLE and spec["output"] == "s3://user-bucket/deepfm-single/"


def test_the_admin_override_and_a_folder_override_are_read(clean_env, tmp_path, monkeypatch):
    _sdk_config(tmp_path / "admin.yaml", role=ROLE)
    _sdk_config(tmp_path / "userdir" / "config.yaml", bucket="dir-bucket")
    monkeypatch.setenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", str(tmp_path / "admin.yaml"))
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(tmp_path / "userdir"))
    assert init_cli.sdk_defaults() == {
        "role": ROLE,
        "bucket": "dir-bucket",
        "bucket_from": f"{tmp_path / 'userdir' / 'config.yaml'}: DefaultS3Bucket",
    }


@pytest.mark.parametrize("where", ["--bucket", "DFM_BUCKET", "sdk"])
def test_an_invalid_bucket_name_is_refused_before_writing(capsys, clean_env, tmp_path, monkeypatch, where):
    arguments = ["init", "single", "-o", "bad.yaml", "--role", ROLE]
    if where == "--bucket":
        arguments += ["--bucket", "My_Bucket"]
    elif where == "DFM_BUCKET":
        monkeypatch.setenv("DFM_BUCKET", "My_Bucket")
    else:
        _sdk_config(tmp_path / "sdk.yaml", bucket="My_Bucket")
        monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(tmp_path / "sdk.yaml"))
    code, out, err = run(capsys, *arguments)
    assert code == 2 and not (tmp_path / "bad.yaml").exists()
    (line,) = err.strip().splitlines()
    named = str(tmp_path / "sdk.yaml") if where == "sdk" else where
    assert line.startswith(f"dfm: {named}") and "'My_Bucket' is not an S3 bucket name" in line, line


def test_without_role_or_bucket_the_spec_validates_with_a_warning_naming_each_variable(capsys, clean_env, tmp_path):
    assert run(capsys, "init", "-o", "p.yaml")[0] == 0
    code, out, err = run(capsys, "validate", tmp_path / "p.yaml")
    assert code == 0
    assert "role: " in err and "set DFM_ROLE_ARN" in err and "set DFM_BUCKET" in err
    (role_line,) = [line for line in err.splitlines() if "DFM_ROLE_ARN" in line]
    assert role_line.startswith(f"warning: {tmp_path / 'p.yaml'}:")


def test_it_refuses_to_overwrite_without_force(capsys, clean_env, tmp_path):
    (tmp_path / "mine.yaml").write_text("keep me\n")
    code, _, err = run(capsys, "init", "-o", "mine.yaml", "--role", ROLE, "--bucket", "my-bucket")
    assert code == 2 and "--force" in err and (tmp_path / "mine.yaml").read_text() == "keep me\n"
    assert run(capsys, "init", "-o", "mine.yaml", "--role", ROLE, "--bucket", "my-bucket", "--force")[0] == 0


@pytest.mark.parametrize("terminal", [False, True])
def test_it_asks_for_what_is_missing_only_on_a_terminal(clean_env, tmp_path, monkeypatch, terminal):
    monkeypatch.setattr(init_cli, "on_terminal", lambda: terminal)
    result = CliRunner().invoke(init_cli.init, ["single", "-o", "t.yaml"], input=f"{ROLE}\nasked-bucket\n")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "t.yaml").read_text()
    assert (f"role: {ROLE}" in text and "s3://asked-bucket/" in text) == terminal
    assert ("${DFM_ROLE_ARN:-" in text) != terminal


def test_shell_completion_as_documented(tmp_path):
    import os
    import subprocess
    import sys

    from spec_helpers import REPO

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "COMP_WORDS": "dfm in",
        "COMP_CWORD": "1",
        "_DFM_COMPLETE": "bash_complete",
    }
    done = subprocess.run([sys.executable, "-m", "launcher.cli"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "init" in done.stdout.split()[0]
    env["_DFM_COMPLETE"] = "bash_source"
    done = subprocess.run([sys.executable, "-m", "launcher.cli"], env=env, capture_output=True, text=True, timeout=60)
    assert "_dfm_completion()" in done.stdout and "complete -o nosort -F _dfm_completion dfm" in done.stdout
