"""Plans and data for the --local tests: the stand-in script and small channels, in a spec built the real way
(load_spec + build_plan, as `dfm launch` does)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import psutil
import yaml

from launcher.local.local_request import build_request
from launcher.local.runner import LocalRun
from launcher.plans.training_plan import Plan, build_plan
from launcher.spec import load_spec

STANDIN = Path(__file__).with_name("local_scripts") / "standin.py"
ROLE = "arn:aws:iam::123456789012:role/dfm"


def make_channel_data(root: Path, name: str, files: int, size: int = 64) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (folder / f"part-{i:03d}.tfrecord").write_bytes(os.urandom(size))
    return folder


def _distribution(kind: str, per_host: int, mpi_options: str, ps_hosts: int):
    if kind == "horovod":
        return {"horovod": {"processes_per_host": per_host, "mpi_options": mpi_options}}
    if ps_hosts:
        return {"parameter_server": {"ps": {"type": "ml.r5.large", "count": ps_hosts, "per_host": per_host}}}
    return kind


def standin_spec(
    tmp_path: Path,
    *,
    kind="parameter_server",
    hosts=2,
    mode="File",
    per_host=1,
    train_files=5,
    hyperparameters=None,
    mpi_options="",
    checkpoint_s3_uri=None,
    checkpoint_local_path=None,
    local=None,
    second_train: Path | None = None,
    efs: Path | None = None,
    ps_hosts: int = 0,
) -> Path:
    """A spec for the stand-in script (tests/local_scripts/standin.py) with `train` (sharded by S3 key) and
    `eval` channels of small files; `second_train` adds channel train-1, `efs` an EFS channel `checkpoints`;
    `ps_hosts` puts the parameter servers on their own group of that many hosts (`per_host` each)."""
    source = tmp_path / "src"
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(STANDIN, source / "standin.py")
    data = tmp_path / "data"
    channels = {"train": make_channel_data(data, "train", train_files), "eval": make_channel_data(data, "eval", 1)}
    train = ["s3://bucket/train/", "s3://bucket/train-1/"] if second_train else "s3://bucket/train/"
    if second_train:
        channels["train-1"] = second_train
    extra = {}
    if efs:
        extra["checkpoints"] = {"file_system_id": "fs-0123456789abcdef0", "directory_path": "/efs/ckpt"}
        channels["checkpoints"] = efs
    checkpoints = False
    if checkpoint_s3_uri:
        checkpoints = {
            "s3": checkpoint_s3_uri,
            **({"local_path": checkpoint_local_path} if checkpoint_local_path else {}),
        }
    spec = {
        "name": "standin",
        "role": ROLE,
        "region": "us-east-1",
        "entry_point": "standin.py",
        "source_dir": "src",
        "framework": {"version": "2.14"},
        "instance": {"type": "ml.c5.2xlarge", "count": hosts},
        "distribution": _distribution(kind, per_host, mpi_options, ps_hosts),
        "data": {"mode": mode, "s3_shard": True, "train": train, "eval": "s3://bucket/eval/", "channels": extra},
        "output": "s3://bucket/out/",
        "checkpoints": checkpoints,
        "hyperparameters": {
            "behave": "ok",
            "pipe_epochs": 2 if mode == "Pipe" else 0,
            "batch_norm": False,
            "deep_layers": [8, 4],
            **(hyperparameters or {}),
        },
        "environment": {"DFM_FROM_PLAN": "yes"},
        "local": {
            "channels": {k: str(v) for k, v in channels.items()},
            "run_dir": str(tmp_path / "runs"),
            **(local or {}),
        },
    }
    path = tmp_path / "standin.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def standin_plan(tmp_path: Path, *, job_name="standin-job", **options) -> Plan:
    """The Plan `dfm launch` builds from standin_spec(tmp_path, **options)."""
    return build_plan(load_spec(standin_spec(tmp_path, **options)), job_name=job_name)


def in_run_dir(plan: Plan, run_dir: Path | str, timeout_s: float | None = None) -> Plan:
    """`plan` with its local runs under run_dir (as `--run-dir` and `--timeout` set them)."""
    timeout_s = plan.local.timeout_s if timeout_s is None else timeout_s
    return replace(plan, local=replace(plan.local, run_dir=str(run_dir), timeout_s=timeout_s))


def local_run(plan: Plan, tmp_path: Path, *, timeout_s: float | None = None, echo=lambda line: None) -> LocalRun:
    """The runner for `plan`'s request, its runs under tmp_path/runs."""
    return LocalRun(build_request(in_run_dir(plan, tmp_path / "runs", timeout_s)), echo=echo)


def assert_no_survivors(processes, settle_s: float = 10.0) -> None:
    """None of a run's recorded processes is still running (zombies count as gone), given `settle_s` to finish
    exiting. A psutil.Process is checked by identity (its pid and creation time), so a pid the system has since
    given to another process does not read as a survivor; a bare pid (an int) is checked by number alone."""
    assert processes, "no process of the run was seen"

    def alive(proc) -> bool:
        try:
            if isinstance(proc, int):
                proc = psutil.Process(proc)
            elif not proc.is_running():  # ended, or its pid reused
                return False
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + settle_s
    survivors = [proc for proc in processes if alive(proc)]
    while survivors and time.monotonic() < deadline:
        time.sleep(0.1)
        survivors = [proc for proc in survivors if alive(proc)]
    assert not survivors, f"processes of the run still running: {survivors}"


def toolkit_pythonpath() -> str | None:
    """Where the SageMaker toolkits (sagemaker-training, sagemaker-tensorflow-training) can be imported from.

    They are not dfm dependencies (their pins would downgrade numpy/protobuf in the venv); install them
    without dependencies anywhere (`pip install --no-deps --target DIR -r scripts/sagemaker-toolkits.txt`, the
    versions the images pin) and point DFM_SAGEMAKER_TOOLKIT at DIR to run the comparison tests;
    scripts/setup.sh puts them in .venv/sagemaker-toolkits, which is looked at too.
    """
    import importlib.util

    set_aside = Path(__file__).resolve().parents[1] / ".venv" / "sagemaker-toolkits"  # scripts/setup.sh
    for candidate in (os.environ.get("DFM_SAGEMAKER_TOOLKIT"), set_aside):
        if candidate and (Path(candidate) / "sagemaker_training").is_dir():
            return str(candidate)
    spec = importlib.util.find_spec("sagemaker_training")
    if spec and spec.submodule_search_locations:
        return str(Path(list(spec.submodule_search_locations)[0]).parent)
    return None


TOOLKIT_PINS = Path(__file__).resolve().parents[1] / "scripts" / "sagemaker-toolkits.txt"


def toolkit_versions_off_pin(folder: str) -> list[str]:
    """The toolkits in `folder` whose versions are not those the images pin (scripts/sagemaker-toolkits.txt)."""
    import importlib.metadata

    from packaging.requirements import Requirement

    found = {
        d.metadata["Name"].lower().replace("_", "-"): d.version for d in importlib.metadata.distributions(path=[folder])
    }
    pins = [
        Requirement(line.split("#", 1)[0])
        for line in TOOLKIT_PINS.read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]
    return [
        f"{pin.name} {found.get(pin.name, 'missing')} (images pin {pin.specifier})"
        for pin in pins
        if pin.name not in found or not pin.specifier.contains(found[pin.name], prereleases=True)
    ]


def sigkill_once_running_and_find_holders(argv: list[str], bound_s: float = 120.0) -> list[psutil.Process]:
    """Run `python -m launcher.cli *argv`; once the run's network-namespace holder (`sleep infinity`) and a
    process started inside the namespace are up, SIGKILL the dfm process (no cleanup of its own runs) and
    return the holders seen. The run's other processes are killed here afterwards (the test started them)."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    seen: set[psutil.Process] = set()
    holders: list[psutil.Process] = []
    deadline = time.monotonic() + bound_s
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                found = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                break
            seen.update(found)
            holders = [p for p in seen if _cmdline(p) == ["sleep", "infinity"]]
            started = [p for p in found if p not in holders and "python" in " ".join(_cmdline(p))]
            if holders and started:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "dfm ended before its run was up"
        assert holders, f"no namespace holder within {bound_s:.0f} s"
        proc.kill()
        proc.wait(timeout=30)
        return holders
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for other in seen - set(holders):
            try:
                other.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []
