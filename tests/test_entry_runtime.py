"""What the entry points do in an image that lacks what the job needs (no PipeModeDataset, no Horovod),
and the test gate that tells a missing feature a runtime should have from one it never has."""

import os
import subprocess

import pytest

import entry_support as es
import deepfm_container

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too

# Run a script as __main__ with some modules made unfindable, as in an image that does not ship them.
_WITHOUT = """
import runpy, sys

for name in sys.argv[1].split(","):
    sys.modules[name] = None  # importlib.util.find_spec -> None, import -> ImportError
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_without(modules, base, script, env, timeout=60):
    return subprocess.run(
        [es.PYTHON, "-c", _WITHOUT, ",".join(modules), script, "--epochs", "1"],
        cwd=base / "code",
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_pipe_mode_problem_names_the_piped_channels_and_the_fix(tmp_path):
    es.make_container(tmp_path, ["train", "eval"], input_mode="Pipe")
    env = deepfm_container.load_env({"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_CHANNELS": '["eval", "train"]'})
    problem = deepfm_container.pipe_mode_problem(env, find_spec=lambda name: None)
    assert "eval, train" in problem and "File or FastFile" in problem and "2.14" in problem
    assert deepfm_container.pipe_mode_problem(env, find_spec=lambda name: object()) is None
    es.make_container(tmp_path / "file", ["train"], input_mode="FastFile")
    fast_file = deepfm_container.load_env({"SAGEMAKER_BASE_DIR": str(tmp_path / "file"), "SM_CHANNELS": '["train"]'})
    assert deepfm_container.pipe_mode_problem(fast_file, find_spec=lambda name: None) is None


@pytest.mark.parametrize("script", ["train_ps.py", "train_mirrored.py", "train_horovod.py"])
def test_pipe_mode_without_pipemodedataset_exits_at_once_with_the_fix(tmp_path, script):
    """No FIFO is ever provided: a script that tried to read one would wait for it for hours."""
    env = es.make_container(tmp_path, ["train"], input_mode="Pipe")
    done = run_without(["sagemaker_tensorflow"], tmp_path, script, env)
    problem = deepfm_container.pipe_mode_problem(deepfm_container.load_env(env), find_spec=lambda name: None)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip() == f"{script}: error: {problem}"  # one line: no traceback, TF never started


def test_horovod_script_without_horovod_exits_naming_the_alternatives(tmp_path):
    env = es.make_container(tmp_path, ["train"])
    done = run_without(["horovod"], tmp_path, "train_horovod.py", env)
    assert done.returncode == 1
    assert "no Horovod" in done.stderr and "2.12" in done.stderr and "multi_worker_mirrored" in done.stderr


def test_a_missing_feature_skips_naming_the_runtime_that_has_it(monkeypatch):
    monkeypatch.setitem(es.FEATURES, "pipe", ("dfm_no_such_module", "the tf-9.9 runtime runs this test"))
    monkeypatch.delenv(es.EXPECT_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no dfm_no_such_module .* the tf-9.9 runtime"):
        es.require("pipe")


def test_a_missing_feature_the_runtime_is_expected_to_have_fails(monkeypatch):
    monkeypatch.setitem(es.FEATURES, "pipe", ("dfm_no_such_module", "the tf-9.9 runtime runs this test"))
    monkeypatch.setenv(es.EXPECT_ENV, "horovod, pipe")
    with pytest.raises(pytest.fail.Exception, match="DFM_EXPECT says this runtime has pipe"):
        es.require("pipe")
    monkeypatch.setenv(es.EXPECT_ENV, "pipes")
    with pytest.raises(pytest.fail.Exception, match="unknown features"):
        es.require("pipe")


def test_expected_features_are_really_present(monkeypatch):
    """In a runtime whose DFM_EXPECT lists features, each is importable (a typo'd or broken build fails here)."""
    for feature in filter(None, (f.strip() for f in os.environ.get(es.EXPECT_ENV, "").split(","))):
        es.require(feature)
