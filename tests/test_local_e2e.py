"""`dfm launch SPEC --local` end to end with the bundled entry points on small synthetic data.

Each test writes a spec under tmp_path, runs the real CLI in a subprocess, watches its process tree with
psutil, and checks the run's outcome, its tree under the run dir, and that no process survived it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from local_plans import assert_no_survivors, sigkill_once_running_and_find_holders
from spec_helpers import LOCAL_BASE, dfm, write_spec

from launcher.local import netns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SMALL_MODEL = {
    "field_size": 10,
    "feature_size": 1000,
    "batch_size": 256,
    "deep_layers": [16, 16],
    "log_steps": 10,
    "embedding_size": 4,
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample")
    result = dfm(
        "data",
        "synth",
        "--out",
        str(out),
        "--rows",
        "6000",
        "--files",
        "4",
        "--eval-rows",
        "1000",
        "--eval-files",
        "1",
        "--seed",
        "3",
        "--field-size",
        "10",
        "--feature-size",
        "1000",
    )
    assert result.returncode == 0, result.stderr
    split = dfm("data", "split", str(out / "train"), "--out", str(out / "split"), "--workers", "2", "--multi-path")
    assert split.returncode == 0, split.stderr
    return out


def e2e_spec(
    tmp_path: Path,
    *,
    name: str,
    entry_point: str,
    distribution,
    hyperparameters: dict,
    sample: Path | None = None,
    channels: dict[str, Path] | None = None,
    count: int = 2,
    mode: str = "File",
    train="s3://dfm-test/train/",
    checkpoints=None,
    framework="2.14",
) -> Path:
    """A local job's spec on SMALL_MODEL: by default two hosts in File mode on `sample`'s train and eval folders."""
    channels = channels or {"train": sample / "train", "eval": sample / "eval"}
    changes = {
        "name": name,
        "framework": {"version": framework},
        "entry_point": entry_point,
        "instance": {"count": count},
        "distribution": distribution,
        "data": {"mode": mode, "s3_shard": True, "train": train},
        "hyperparameters": {**SMALL_MODEL, **hyperparameters},
        "local": {
            "channels": {k: str(v) for k, v in channels.items()},
            "run_dir": str(tmp_path / "runs"),
            "timeout_s": 240,
        },
    }
    if checkpoints is not None:
        changes["checkpoints"] = checkpoints
    return write_spec(tmp_path, changes, name=f"{name}.yaml", base=LOCAL_BASE)


class WatchedRun:
    """The CLI in a subprocess; every process of its tree is recorded while it runs."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "launcher.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.processes: set[psutil.Process] = set()  # by identity: a reused pid is another process
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    def descendants(self) -> list[psutil.Process]:
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.processes.update(found)
        return found

    def wait(self, timeout: float = 280, until=None) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            found = self.descendants()
            if until is not None and until(found, self.lines):
                until = None
            time.sleep(0.2)
        code = self.proc.wait(timeout=max(1, deadline - time.monotonic()))
        self._reader.join(timeout=5)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def job_dir(self, runs: Path) -> Path:
        (job,) = [p for p in runs.iterdir() if (p / "hosts").is_dir()]
        return job


def test_two_host_parameter_server_job(tmp_path, sample):
    spec = e2e_spec(
        tmp_path,
        name="e2e-ps",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={"max_steps": 30, "optimizer": "adagrad", "local_steps": 4},
    )
    run = WatchedRun("launch", str(spec), "--local")
    assert run.wait() == 0, run.output[-3000:]
    job = run.job_dir(tmp_path / "runs")
    logs = {p.name for p in (job / "logs").iterdir()}
    assert logs == {"algo-1-master.log", "algo-1-ps.log", "algo-2-ps.log", "algo-2-worker.log"}
    for host in ("algo-1", "algo-2"):  # ShardedByS3Key: 4 files, 2 each, disjoint
        assert len(list((job / "hosts" / host / "input" / "data" / "train").iterdir())) == 2
    assert "[algo-1/master] [dfm] eval step=" in run.output and "final eval:" in run.output
    chief = (job / "logs" / "algo-1-master.log").read_text()
    assert "each worker trains 4 local steps between exchanges" in chief
    batches = -(-6000 // 2 // SMALL_MODEL["batch_size"])  # a worker's 2 of the 4 files: its last group is short
    assert f"epoch 1/1 done at step {2 * batches}" in chief  # every batch trained once, as ordinary steps do
    assert list((job / "hosts" / "algo-1" / "model").glob("*/saved_model.pb"))
    for host in ("algo-1", "algo-2"):  # each host's ps went with its host's script
        assert "ps server stopping: SIGTERM" in (job / "logs" / f"{host}-ps.log").read_text()
    assert_no_survivors(run.processes)
    # each host's and each process's peak memory, by role: TensorFlow processes, each above 50 MB, under 4 GB
    memory = json.loads((job / "memory.json").read_text())["hosts"]
    roles = {h: {p["role"]: p["peak_bytes"] for p in memory[h]["processes"].values()} for h in ("algo-1", "algo-2")}
    assert set(roles["algo-1"]) == {"master", "ps"} and set(roles["algo-2"]) == {"worker", "ps"}
    assert all(50 << 20 < peak < 4 << 30 for peaks in roles.values() for peak in peaks.values()), roles
    assert all(memory[h]["peak_bytes"] > 0 for h in roles)
    shown = {line.split()[1]: line for line in run.output.splitlines() if line.startswith("  memory: algo-")}
    assert "master " in shown["algo-1"] and "worker " in shown["algo-2"] and "ps " in shown["algo-2"], shown


def test_two_host_multi_worker_mirrored_job(tmp_path, sample):
    spec = e2e_spec(
        tmp_path,
        name="e2e-mwms",
        entry_point="deepfm-mirrored",
        distribution="multi_worker_mirrored",
        sample=sample,
        hyperparameters={"max_steps": 6},
    )
    run = WatchedRun("launch", str(spec), "--local")
    assert run.wait() == 0, run.output[-3000:]
    job = run.job_dir(tmp_path / "runs")
    assert {p.name for p in (job / "logs").iterdir()} == {"algo-1-worker.log", "algo-2-worker.log"}
    assert "[algo-1/worker] [dfm] eval step=" in run.output
    assert list((job / "hosts" / "algo-1" / "model").glob("*/saved_model.pb"))
    assert_no_survivors(run.processes)


def horovod_runtime_missing() -> str | None:
    """Why the TF 2.12 runtime (the last image with Horovod) cannot run a Horovod job here, or None."""
    from launcher.local import runtime

    chosen = runtime.choose_runtime(
        "2.12", root=runtime.runtimes_root(), own_python=sys.executable, own_tf=runtime.tf_version_in()
    )
    if runtime.major_minor(chosen.tf_version) != "2.12":
        return f"runtime tf-2.12 not built (scripts/runtime.sh tf-2.12): {chosen.note}"
    if not chosen.has_module("horovod.tensorflow"):
        return f"runtime tf-2.12 at {chosen.python} has no Horovod (scripts/runtime.sh tf-2.12 builds it)"
    return None


@pytest.mark.horovod
@pytest.mark.skipif(horovod_runtime_missing() is not None, reason=str(horovod_runtime_missing()))
def test_horovod_two_ranks_in_pipe_mode_one_channel_per_worker(tmp_path, sample):
    # TF 2.12 is the last image with Horovod: the job runs on that image's runtime, whatever the launcher's TF
    spec = e2e_spec(
        tmp_path,
        name="e2e-hvd",
        entry_point="deepfm-horovod",
        distribution={"horovod": {"processes_per_host": 2}},
        count=1,
        mode="Pipe",
        train=["s3://dfm-test/split/train/", "s3://dfm-test/split/train-1/"],
        channels={
            "train": sample / "split" / "train",
            "train-1": sample / "split" / "train-1",
            "eval": sample / "eval",
        },
        hyperparameters={"max_steps": 6},
        framework="2.12",
    )
    run = WatchedRun("launch", str(spec), "--local")
    assert run.wait() == 0, run.output[-3000:]
    assert "ran on: TF 2.12.0 (runtime tf-2.12)" in run.output
    # their command (`python -m mpi4py` with the runtime's Python): test_local_request
    for rank in (0, 1):  # each rank's own report of the TensorFlow it imported
        assert f"[algo-1/rank{rank}] [dfm] tensorflow 2.12.0 " in run.output
    job = run.job_dir(tmp_path / "runs")
    assert {"algo-1-rank0.log", "algo-1-rank1.log", "mpirun.log"} <= {p.name for p in (job / "logs").iterdir()}
    config = json.loads((job / "hosts" / "algo-1" / "input" / "config" / "inputdataconfig.json").read_text())
    assert {c["TrainingInputMode"] for c in config.values()} == {"Pipe"}
    # every channel was read through FIFOs, and none is left behind
    assert not list((job / "hosts" / "algo-1" / "input" / "data").iterdir())
    assert "[algo-1/rank0] [dfm] eval step=" in run.output
    assert list((job / "hosts" / "algo-1" / "model").glob("*/saved_model.pb"))
    assert_no_survivors(run.processes)


def kill_once(killed: list[float], after: str, chooses):
    """A WatchedRun.wait `until`: once a line holds `after`, SIGKILL the first process `chooses(proc)` and note when."""

    def kill(found, lines) -> bool:
        if not any(after in line for line in lines):
            return False
        for proc in found:
            try:
                if chooses(proc):
                    proc.kill()
                    killed.append(time.monotonic())
                    return True
            except (psutil.NoSuchProcess, AttributeError):  # gone, or its parent gone (None)
                continue
        return False

    return kill


def kill_script_once_training(host: str, killed: list[float]):
    """Once a train step is logged, SIGKILL train_ps.py on `host`."""
    return kill_once(
        killed, "[dfm] train step=", lambda proc: "train_ps.py" in " ".join(proc.cmdline()) and host in proc.cwd()
    )


def test_killed_worker_fails_the_run_fast_and_leaves_nothing(tmp_path, sample):
    spec = e2e_spec(
        tmp_path,
        name="e2e-kill",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={"max_steps": 100000, "epochs": 1000},
    )
    run = WatchedRun("launch", str(spec), "--local")
    killed: list[float] = []
    assert run.wait(until=kill_script_once_training("algo-2", killed)) == 1, run.output[-3000:]
    assert killed
    assert "FAILED: algo-2/worker exited with code -9" in run.output
    assert "last lines of algo-2/worker" in run.output
    assert_no_survivors(run.processes)


def test_resumed_run_continues_from_the_checkpoint(tmp_path, sample):
    def launch(max_steps: int, code: int = 0) -> WatchedRun:
        spec = e2e_spec(
            tmp_path,
            name="e2e-resume",
            entry_point="deepfm-ps",
            distribution="none",
            count=1,
            sample=sample,
            hyperparameters={"max_steps": max_steps, "checkpoint_steps": 5, "epochs": 5},
            checkpoints="s3://dfm-test/checkpoints/e2e-resume/",
        )
        run = WatchedRun("launch", str(spec), "--local")
        assert run.wait() == code, run.output[-3000:]
        return run

    first = launch(10)
    assert "starting at step 0" in first.output
    second = launch(20)
    assert "continuing at step 10" in second.output
    # a third job on the same checkpoints with the same settings would train nothing: it fails saying so
    third = launch(20, code=1)
    assert "[dfm local] cause: algo-1/" in third.output and "nothing left to train: ckpt-20 in " in third.output
    assert "done in" not in third.output and "exported:" not in third.output
    for run in (first, second, third):
        assert_no_survivors(run.processes)


HETERO = {"parameter_server": {"ps": {"type": "ml.r5.large", "count": 1, "per_host": 2}}}


def test_parameter_servers_on_their_own_group(tmp_path, sample):
    spec = e2e_spec(
        tmp_path,
        name="e2e-hetero",
        entry_point="deepfm-ps",
        distribution=HETERO,
        sample=sample,
        hyperparameters={"max_steps": 30},
    )
    run = WatchedRun("launch", str(spec), "--local")
    assert run.wait() == 0, run.output[-3000:]
    job = run.job_dir(tmp_path / "runs")
    assert {p.name for p in (job / "logs").iterdir()} == {"algo-1-train.log", "algo-2-train.log", "algo-3-train.log"}
    for host in ("algo-1", "algo-2"):  # the worker group shares the 4 training files
        assert len(list((job / "hosts" / host / "input" / "data" / "train").iterdir())) == 2
    assert not list((job / "hosts" / "algo-3" / "input" / "data").iterdir())  # the ps host gets no data
    assert "[algo-1/train] [dfm] eval step=" in run.output and "final eval:" in run.output
    assert list((job / "hosts" / "algo-1" / "model").glob("*/saved_model.pb"))
    assert "ps:0, ps:1" in (job / "logs" / "algo-3-train.log").read_text()  # two parameter servers on algo-3
    assert_no_survivors(run.processes)


def test_a_killed_ps_host_fails_the_run_fast_naming_it(tmp_path, sample):
    spec = e2e_spec(
        tmp_path,
        name="e2e-hetero-kill",
        entry_point="deepfm-ps",
        distribution=HETERO,
        sample=sample,
        hyperparameters={"max_steps": 100000, "epochs": 1000},
    )
    run = WatchedRun("launch", str(spec), "--local")
    killed: list[float] = []
    assert run.wait(until=kill_script_once_training("algo-3", killed)) == 1, run.output[-3000:]
    assert killed and time.monotonic() - killed[0] < 60, "the run outlived its parameter servers by a minute"
    assert "FAILED: algo-3/train exited with code -9" in run.output
    assert_no_survivors(run.processes)


@pytest.mark.skipif(not (netns.wanted() and netns.possible()), reason="no loopback-only namespace on this machine")
def test_a_sigkilled_local_launch_leaves_no_namespace_holder(tmp_path, sample):
    """SIGKILL runs none of dfm's cleanup: the holder of the run's network namespace dies with dfm by itself."""
    spec = e2e_spec(
        tmp_path,
        name="e2e-kill",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={"max_steps": 100000},
    )
    holders = sigkill_once_running_and_find_holders(["launch", str(spec), "--local"])
    assert_no_survivors(holders)
