"""Which Python a local job runs on: the runtime whose TensorFlow matches the image's, else the launcher's own."""

from __future__ import annotations

import importlib.util
import json
import site
import sys
import venv
from dataclasses import replace
from pathlib import Path

import pytest
from local_plans import assert_no_survivors, local_run, standin_plan

from launcher.local import runtime

OWN = "/opt/launcher/bin/python"


def fake_runtime(root: Path, name: str, tf_version: str | None, *, ready: bool = True) -> Path:
    """A folder shaped like scripts/runtime.sh's output: bin/python, TF's package metadata, .requirements."""
    folder = root / name
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("")
    site_dir = folder / "lib" / "python3.10" / "site-packages"
    site_dir.mkdir(parents=True)
    if tf_version:
        dist = site_dir / f"tensorflow_cpu-{tf_version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: {tf_version}\n")
    if ready:
        (folder / ".requirements").write_text("python=3.10 tensorflow-cpu==...\n")
    return folder


@pytest.mark.parametrize(
    "version, expected",
    [("2.12.0", "2.12"), ("2.12", "2.12"), ("2.9", "2.9"), ("2", None), (None, None), ("latest", None), ("2.x", None)],
)
def test_major_minor(version, expected):
    assert runtime.major_minor(version) == expected


def test_the_images_runtime_when_it_is_set_up(tmp_path):
    folder = fake_runtime(tmp_path, "tf-2.12", "2.12.0")
    chosen = runtime.choose_runtime("2.12.0", root=tmp_path, own_python=OWN, own_tf="2.14.1")
    assert (chosen.python, chosen.tf_version, chosen.name, chosen.own) == (
        str(folder / "bin" / "python"),
        "2.12.0",
        "tf-2.12",
        False,
    )
    assert chosen.note == "TF 2.12.0 (runtime tf-2.12)"
    assert runtime.choose_runtime("2.12", root=tmp_path, own_python=OWN, own_tf="2.14.1").python == chosen.python


def test_the_launchers_own_python_is_the_runtime_of_its_own_tf(tmp_path):
    fake_runtime(tmp_path, "tf-2.14", "2.14.0")  # a built folder does not win over the launcher's own TF
    chosen = runtime.choose_runtime("2.14", root=tmp_path, own_python=OWN, own_tf="2.14.1")
    assert (chosen.python, chosen.own, chosen.name) == (OWN, True, "tf-2.14")
    assert chosen.note.startswith("TF 2.14.1 (runtime tf-2.14")


@pytest.mark.parametrize("layout", ["missing", "half-built", "other TF inside"])
def test_a_runtime_not_set_up_falls_back_to_the_launcher_and_says_so(tmp_path, layout):
    if layout == "half-built":  # scripts/runtime.sh writes .requirements last
        fake_runtime(tmp_path, "tf-2.21", "2.21.0", ready=False)
    elif layout == "other TF inside":
        fake_runtime(tmp_path, "tf-2.21", "2.19.0")
    chosen = runtime.choose_runtime("2.21", root=tmp_path, own_python=OWN, own_tf="2.14.1")
    assert (chosen.python, chosen.tf_version, chosen.own) == (OWN, "2.14.1", True)
    assert chosen.note == (
        "image has TF 2.21 but runtime tf-2.21 is not set up (scripts/runtime.sh tf-2.21): running on TF 2.14.1"
    )


def test_an_image_without_a_known_tf_runs_on_the_launchers(tmp_path):
    fake_runtime(tmp_path, "tf-2.12", "2.12.0")
    chosen = runtime.choose_runtime(None, root=tmp_path, own_python=OWN, own_tf="2.14.1")
    assert chosen.python == OWN and "not known" in chosen.note


def test_the_plan_and_dfm_runtimes_pick_the_folder(tmp_path, monkeypatch):
    folder = fake_runtime(tmp_path / "runtimes", "tf-2.12", "2.12.0")
    monkeypatch.setenv("DFM_RUNTIMES", str(tmp_path / "runtimes"))
    plan = replace(standin_plan(tmp_path), framework_version="2.12")
    assert runtime.for_plan(plan).python == str(folder / "bin" / "python")
    # the launcher's own TF comes from package metadata, as installed here
    assert runtime.for_plan(replace(plan, framework_version=None)).tf_version == runtime.tf_version_in()


@pytest.fixture
def runtime_venv(tmp_path, monkeypatch):
    """A real virtual environment posing as runtime tf-2.12: its own bin/python, TF 2.12.0 in its metadata,
    and the launcher's site-packages reachable through a .pth (so TensorFlow really runs in it)."""
    root = tmp_path / "runtimes"
    folder = root / "tf-2.12"
    venv.create(folder, with_pip=False, symlinks=True)
    (site_dir,) = folder.glob("lib/python3*/site-packages")
    (site_dir / "launcher_site.pth").write_text("\n".join(site.getsitepackages() + sys.path[1:]) + "\n")
    dist = site_dir / "tensorflow_cpu-2.12.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.12.0\n")
    (folder / ".requirements").write_text("test\n")
    monkeypatch.setenv("DFM_RUNTIMES", str(root))
    return folder


def test_a_runtimes_modules_are_looked_up_in_that_runtime(runtime_venv):
    chosen = runtime.choose_runtime("2.12", root=runtime_venv.parent, own_python=sys.executable, own_tf="2.14.1")
    assert not chosen.own and chosen.has_module("json") and not chosen.has_module("no_such_module_anywhere")
    (next(runtime_venv.glob("lib/python3*/site-packages")) / "only_in_runtime.py").write_text("")
    assert chosen.has_module("only_in_runtime") and importlib.util.find_spec("only_in_runtime") is None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_process_of_a_ps_job_runs_on_the_images_runtime(tmp_path, runtime_venv):
    plan = replace(standin_plan(tmp_path, hosts=2, hyperparameters={"probe_ps_s": 1}), framework_version="2.12.0")
    lines = []
    result = local_run(plan, tmp_path, timeout_s=150, echo=lines.append).run()
    assert result.exit_code == 0, lines
    python = str(runtime_venv / "bin" / "python")
    for host in ("algo-1", "algo-2"):
        report = json.loads(
            next((result.job_dir / "hosts" / host / "output" / "data").glob("report-*.json")).read_text()
        )
        assert report["python"] == python
        assert report["path"].split(":")[0] == str(runtime_venv / "bin")  # `python` in the job is the runtime's
        assert report["pythonpath"].split(":")[0] == str(result.job_dir / "hosts" / host / "code")
        assert python in (result.job_dir / "logs" / f"{host}-ps.log").read_text()
    assert any("TF 2.12.0 (runtime tf-2.12)" in line for line in lines if "processes on" in line)
    assert "  ran on: TF 2.12.0 (runtime tf-2.12)" in lines
    assert_no_survivors(result.pids)
