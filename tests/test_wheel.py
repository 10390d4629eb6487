"""The wheel is what ships: build it, install it with its extras into a fresh virtual environment, and run
dfm from outside the checkout (an editable install would hide a package or a script left out of it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spec_helpers import REPO, ROLE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("dfm-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel and its extras (`local`: TensorFlow for the data tools; `tune`),
    resolved from the package index as a user's install would be. uv, not pip: the same wheel and requirements,
    installed from uv's cache in seconds where pip takes a minute or more on TensorFlow."""
    env = tmp_path_factory.mktemp("venv")
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "-q", "--python", sys.executable, str(env)], check=True, capture_output=True)
    subprocess.run(
        [*uv, "pip", "install", "-q", "--python", str(env / "bin" / "python"), f"{wheel}[local,tune]"],
        check=True,
        capture_output=True,
    )
    return env / "bin" / "dfm"


def dfm(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFM_ROLE_ARN": ROLE, "PYTHONPATH": ""}
    return subprocess.run([str(installed), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_every_package_and_every_bundled_script(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "launcher").rglob("__init__.py")}
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set()
    scripts = {p.name for p in (REPO / "entrypoints").glob("*.py")}
    assert {s for s in scripts if f"launcher/_bundled/{s}" not in names} == set()
    assert not any(name.startswith("entrypoints/") for name in names)


def test_installed_dfm_runs_outside_the_checkout(installed, tmp_path):
    assert dfm(installed, "--help", cwd=tmp_path).returncode == 0
    configs = sorted(str(p) for p in (REPO / "configs").glob("*.yaml"))
    result = dfm(installed, "validate", *configs, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "config, hosts",
    [
        ("ps.yaml", {"InstanceCount": 2}),
        ("horovod.yaml", {"InstanceCount": 2}),
        ("hetero-ps.yaml", {"InstanceGroups": [4, 4]}),
    ],
)
def test_installed_dry_run_builds_the_request(installed, tmp_path, config, hosts):
    result = dfm(installed, "launch", str(REPO / "configs" / config), "--dry-run", "--output", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    resources = json.loads(result.stdout)["request"]["ResourceConfig"]
    if "InstanceGroups" in hosts:
        assert [g["InstanceCount"] for g in resources["InstanceGroups"]] == hosts["InstanceGroups"]
    else:
        assert resources["InstanceCount"] == hosts["InstanceCount"]


def test_installed_local_dry_run_finds_the_bundled_scripts(installed, tmp_path):
    data = tmp_path / "sample"
    made = dfm(
        installed,
        "data",
        "synth",
        "--out",
        str(data),
        "--rows",
        "2000",
        "--files",
        "2",
        "--eval-rows",
        "500",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    result = dfm(
        installed,
        "launch",
        str(REPO / "configs" / "ps.yaml"),
        "--local",
        "--dry-run",
        "--channel",
        f"train={data / 'train'}",
        "--channel",
        f"eval={data / 'eval'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "train_ps.py" in result.stdout and "/launcher/_bundled" in result.stdout
