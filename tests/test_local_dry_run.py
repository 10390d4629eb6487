"""`dfm launch SPEC --local --dry-run`: the local request printed (text or JSON); nothing started, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from local_plans import make_channel_data

from launcher.cli import main
from spec_helpers import REPO

PS = REPO / "configs" / "ps.yaml"
SECRETS = ["--set", "environment.DB_PASSWORD=hunter2", "--set", "environment.FEATURE_SET=wide"]


@pytest.fixture
def nothing_starts(monkeypatch):
    """Any process started fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


def dry_run(capsys, tmp_path, *extra):
    data = tmp_path / "data"
    channels = [
        "--channel",
        f"train={make_channel_data(data, 'train', 4)}",
        "--channel",
        f"eval={make_channel_data(data, 'eval', 1)}",
    ]
    code = main(
        [
            "launch",
            str(PS),
            "--local",
            "--dry-run",
            "--run-dir",
            str(tmp_path / "runs"),
            "--job-name",
            "deepfm-ps-local",
            *channels,
            *SECRETS,
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_text_lists_every_process_with_command_cwd_and_environment(capsys, tmp_path, nothing_starts):
    code, out, err = dry_run(capsys, tmp_path)
    assert code == 0, err
    job = tmp_path / "runs" / "deepfm-ps-local"
    for label, role in (
        ("algo-1/ps", "ps"),
        ("algo-2/ps", "ps"),
        ("algo-1/master", "master"),
        ("algo-2/worker", "worker"),
    ):
        block = out.split(f"  {label}  ({role})\n", 1)[1].split("\n  algo-", 1)[0]
        assert block.startswith("    command  ") and "\n    cwd      " in block and "\n    env      " in block
        assert "TF_CONFIG=" in block and f"log      {job}/logs/{label.replace('/', '-')}.log" in block
    assert f"cwd      {job}/hosts/algo-2/code" in out and "train_ps.py --baseline True --batch_size 512" in out
    assert "channel train: File, ShardedByS3Key" in out
    assert "DB_PASSWORD=****" in out and "hunter2" not in out + err and "FEATURE_SET=wide" in out
    assert not (tmp_path / "runs").exists()  # nothing written


def test_json_is_the_request_with_secrets_masked_unless_asked(capsys, tmp_path, nothing_starts):
    code, out, err = dry_run(capsys, tmp_path, "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    assert [p["label"] for p in document["processes"]] == ["algo-1/ps", "algo-2/ps", "algo-1/master", "algo-2/worker"]
    master = document["processes"][2]
    assert master["argv"][1] == "train_ps.py" and master["cwd"].endswith("/hosts/algo-1/code")
    assert json.loads(master["env"]["TF_CONFIG"])["task"] == {"index": 0, "type": "master"}
    assert master["env"]["DB_PASSWORD"] == "****" and "hunter2" not in out
    assert sorted(len(c["files"]) for h in document["hosts"] for c in h["channels"] if c["name"] == "train") == [2, 2]
    assert not (tmp_path / "runs").exists()
    code, out, _ = dry_run(capsys, tmp_path, "--output", "json", "--show-secrets")
    assert code == 0 and json.loads(out)["processes"][2]["env"]["DB_PASSWORD"] == "hunter2"


def test_each_host_shows_its_cores_and_a_time_shared_layout_its_warning(capsys, tmp_path, nothing_starts, monkeypatch):
    from launcher.local import cores

    monkeypatch.setattr(cores, "machine_cpus", lambda: (0, 1, 2, 3))
    code, out, err = dry_run(capsys, tmp_path, "--set", "local.cores_per_host=2")
    assert code == 0, err
    algo1, algo2 = (out.split(f"\nhost {h}  ", 1)[1].split("\n")[1] for h in ("algo-1", "algo-2"))
    assert algo1 == "  cores: 0-1 (SM_NUM_CPUS=2): every process of this host runs on these only"
    assert algo2.startswith("  cores: 2-3 (SM_NUM_CPUS=2)") and "Warnings" not in out
    code, out, err = dry_run(capsys, tmp_path, "--set", "local.cores_per_host=3")
    assert code == 0, err
    assert "  cores: 0-2 (SM_NUM_CPUS=3)" in out and "  cores: 0-1,3 (SM_NUM_CPUS=3)" in out
    assert "need 6 cores, this machine has 4: the hosts time-share them" in out.split("\nWarnings\n", 1)[1]


def test_missing_local_data_is_shown_whole_and_the_exit_code_says_it_cannot_run(capsys, tmp_path, nothing_starts):
    code = main(
        [
            "launch",
            str(PS),
            "--local",
            "--dry-run",
            "--run-dir",
            str(tmp_path / "runs"),
            "--channel",
            f"train={tmp_path / 'none'}",
            "--channel",
            f"eval={tmp_path / 'none'}",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Cannot run as it is" in out and f"local data {tmp_path / 'none'} does not exist" in out
    assert "algo-2/worker  (worker)" in out and not (tmp_path / "runs").exists()
    assert (
        err.splitlines()[0].startswith("error: --local: ")
        and f"{tmp_path / 'none'} does not exist" in err.splitlines()[0]
    )


def test_the_local_dry_run_imports_neither_tensorflow_nor_the_sdk(tmp_path):
    for name in ("train", "eval"):  # local data of its own: a fresh clone has no data/sample yet
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-0.tfrecord").write_bytes(b"")
    channels = [f"--channel={name}={tmp_path / name}" for name in ("train", "eval")]
    script = (
        "import json, sys\nfrom launcher.cli import main\n"
        f"rc = main(['launch', {str(PS)!r}, '--local', '--dry-run', '--run-dir', {str(tmp_path / 'runs')!r}, "
        f"*{channels!r}])\n"
        "print(json.dumps([rc, sorted({m.split('.')[0] for m in sys.modules} & {'sagemaker', 'tensorflow'})]),"
        " file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [0, []]


def test_mpi_listing_shows_mpirun_and_what_each_rank_changes(tmp_path):
    from local_plans import standin_plan

    from launcher.local.describe import render_request, request_document
    from launcher.local.local_request import build_request

    plan = standin_plan(tmp_path, kind="horovod", hosts=2, per_host=1)
    text = render_request(request_document(build_request(plan)))
    mpirun = text.split("  mpirun  (mpirun)\n", 1)[1]
    assert mpirun.startswith("    command  ") and " -x SM_HOSTS " in mpirun.split("\n", 1)[0]
    rank1 = text.split("  algo-2/rank1  (rank 1, started by mpirun through rank_exec.py)\n", 1)[1]
    assert "    env      mpirun's, with\n" in rank1
    assert f"SAGEMAKER_BASE_DIR={tmp_path}/runs/standin-job/hosts/algo-2" in rank1
    assert "SM_CURRENT_HOST" not in rank1  # every rank keeps the first host's, as mpirun exports it
