"""Plans and data for the --local tests, built directly (no spec): the stand-in script and small channels."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import psutil

from launcher.contract import render_argv
from launcher.plan import Channel, Distribution, LocalOptions, Plan

STANDIN = Path(__file__).with_name("local_scripts") / "standin.py"


def make_channel_data(root: Path, name: str, files: int, size: int = 64) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (folder / f"part-{i:03d}.tfrecord").write_bytes(os.urandom(size))
    return folder


def standin_plan(tmp_path: Path, *, kind="parameter_server", hosts=2, mode="File", per_host=1,
                 train_files=5, hyperparameters=None, job_name="standin-job", mpi_options="",
                 checkpoint_s3_uri=None, local=None) -> Plan:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    shutil.copy(STANDIN, source / "standin.py")
    data = tmp_path / "data"
    train = make_channel_data(data, "train", train_files)
    evaluation = make_channel_data(data, "eval", 1)
    hps = {"behave": "ok", "pipe_epochs": 2 if mode == "Pipe" else 0, "batch_norm": False,
           "deep_layers": [8, 4], **(hyperparameters or {})}
    channels = (Channel("train", "s3://bucket/train/", input_mode=mode, distribution="ShardedByS3Key",
                        local_path=str(train)),
                Channel("eval", "s3://bucket/eval/", input_mode=mode, local_path=str(evaluation)))
    return Plan(job_name=job_name, region="us-east-1", role="arn:aws:iam::1:role/r",
                entry_point="standin.py", source_dir=str(source), bundled=False, instance_type="ml.c5.2xlarge",
                volume_gb=30, max_run=3600, output_path="s3://bucket/out",
                instance_count=hosts, distribution=Distribution(kind, per_host, mpi_options), input_mode=mode,
                channels=channels, hyperparameters=hps, argv=tuple(render_argv(hps)),
                environment={"DFM_FROM_PLAN": "yes"}, checkpoint_s3_uri=checkpoint_s3_uri,
                local=LocalOptions(**(local or {})))


def assert_no_survivors(pids) -> None:
    """None of a run's recorded processes is still running (zombies count as gone), after a moment to settle."""
    time.sleep(0.3)
    assert pids, "no process of the run was seen"

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    survivors = [pid for pid in pids if alive(pid)]
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

    found = {d.metadata["Name"].lower().replace("_", "-"): d.version
             for d in importlib.metadata.distributions(path=[folder])}
    pins = [Requirement(line.split("#", 1)[0]) for line in TOOLKIT_PINS.read_text().splitlines()
            if line.split("#", 1)[0].strip()]
    return [f"{pin.name} {found.get(pin.name, 'missing')} (images pin {pin.specifier})" for pin in pins
            if pin.name not in found or not pin.specifier.contains(found[pin.name], prereleases=True)]
