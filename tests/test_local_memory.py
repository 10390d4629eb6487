"""Each simulated host's memory (local.memory_per_host): held to its limit as an instance's is, a host over it ending
the run as SageMaker ends it, and every run's peaks per host and per process, in the summary and in memory.json."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from launcher.local import host_memory
from launcher.local.local_request import build_request
from launcher.local.runner import LocalRun
from local_plans import assert_no_survivors, in_run_dir, local_run, standin_plan, standin_spec
from spec_helpers import REPO, run

MIB = 1 << 20
CGROUPS = host_memory.own_group() is not None
# algo-1, the chief, writes its checkpoint first, then holds 300 MB: more than the 150 MiB its host may have
GREEDY_CHIEF = {"allocate_mb": 300, "on_host": "algo-1", "behave": "sleep", "sleep_s": 60}


@pytest.fixture(params=["cgroup", "sampler"])
def mechanism(request, monkeypatch) -> str:
    if request.param == "cgroup" and not CGROUPS:
        pytest.skip("no writable cgroup v1 memory controller here (needs root)")
    if request.param == "sampler":
        monkeypatch.setenv(host_memory.CGROUPS_ENV, "0")
    return request.param


def _reports(job_dir: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in (job_dir / "hosts").glob("algo-*/output/data/report-*.json")}


@pytest.mark.slow  # processes, seconds
def test_a_host_over_its_memory_is_killed_and_the_run_fails_naming_it_its_peak_and_its_limit(tmp_path, mechanism):
    plan = standin_plan(
        tmp_path,
        kind="none",
        hosts=2,
        checkpoint_s3_uri="s3://bucket/ckpt/",
        local={"memory_per_host": "150MiB"},
        hyperparameters=GREEDY_CHIEF,
    )
    lines: list[str] = []
    runner = local_run(plan, tmp_path, timeout_s=120, echo=lines.append)
    groups = [Path(h.memory_group) for h in runner.request.hosts if h.memory_group]
    result = runner.run()

    assert result.exit_code == 1
    assert result.reason.startswith("algo-1 ran out of memory: peak ") and "of its 150 MiB" in result.reason
    peak = int(result.reason.split("peak ")[1].split(" MiB")[0])
    assert peak >= 150 if mechanism == "cgroup" else peak > 150  # the kernel stops it at the limit
    assert result.signal is None  # running out of memory is no lost instance: recover: would not restart it
    document = json.loads((result.job_dir / host_memory.SUMMARY_FILE).read_text())
    assert document["hosts"]["algo-1"]["over"] and not document["hosts"]["algo-2"]["over"]
    assert document["hosts"]["algo-1"]["limit_bytes"] == 150 * MIB
    assert document["mechanism"].startswith("cgroup" if mechanism == "cgroup" else "sampler")
    summary = "\n".join(lines)
    assert "[dfm local] FAILED: algo-1 ran out of memory" in summary
    assert "[dfm local] last lines of algo-1/train:" in summary and "[dfm] train step=20" in summary
    assert "  memory: algo-1 peak " in summary and " of 150 MiB (resident peaks: train " in summary
    # nothing left behind: no process, no cgroup; the chief's checkpoint, written before it ran over, was kept
    assert_no_survivors(result.pids)
    assert (len(groups) == 2) == (mechanism == "cgroup") and not any(g.exists() or g.parent.exists() for g in groups)
    store = Path(runner.request.checkpoint_store)
    assert (store / "count.txt").read_text() == "1"


@pytest.mark.slow  # processes, seconds
def test_a_host_out_of_memory_is_not_run_again_by_recover(tmp_path, mechanism):
    from launcher.local import run_local
    from launcher.plans.training_plan import build_plan
    from launcher.spec import load_spec

    spec = standin_spec(
        tmp_path,
        kind="none",
        hosts=2,
        checkpoint_s3_uri="s3://bucket/ckpt/",
        local={"memory_per_host": "150MiB", "timeout_s": 120},
        hyperparameters=GREEDY_CHIEF,
    )
    data = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**data, "recover": {"max_restarts": 2, "backoff_s": 1}}))
    lines: list[str] = []
    assert run_local(build_plan(load_spec(spec), job_name="oom-job"), echo=lines.append) == 1
    output = "\n".join(lines)
    assert "  1. oom-job: algo-1 ran out of memory: peak " in output and "attempt 2/" not in output


@pytest.mark.slow  # processes, seconds
def test_every_run_reports_each_hosts_peak_and_each_processs(tmp_path, mechanism):
    lines: list[str] = []
    runner = local_run(standin_plan(tmp_path, kind="none", hosts=2), tmp_path, timeout_s=120, echo=lines.append)
    result = runner.run()
    assert result.exit_code == 0
    document = json.loads((result.job_dir / host_memory.SUMMARY_FILE).read_text())
    assert document["limit_bytes"] is None
    for host in ("algo-1", "algo-2"):
        measured = document["hosts"][host]
        process = measured["processes"][f"{host}/train"]
        # a Python interpreter's own resident memory: more than 5 MB, less than a GB
        assert process["role"] == "train" and 5 * MIB < process["peak_bytes"] < 1024 * MIB
        assert measured["peak_bytes"] > 0 and measured["limit_bytes"] is None
        [line] = [line for line in lines if line.startswith(f"  memory: {host} peak ")]
        assert " MiB (resident peaks: train " in line and " of " not in line
    if mechanism == "cgroup":  # every process of a host ran in that host's group
        for name, report in _reports(result.job_dir).items():
            assert report["memory_cgroup"].endswith("/" + report["host"]), name


@pytest.mark.slow  # processes, seconds
@pytest.mark.skipif(not CGROUPS, reason="no writable cgroup v1 memory controller here (needs root)")
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun not installed")
def test_each_mpi_rank_runs_in_its_own_hosts_memory_group(tmp_path):
    # a rank is mpirun's child, not the launcher's: its peak is what the samples saw, so the ranks hold until the
    # samples have labelled rank 1 as algo-2's
    release = tmp_path / "release"
    plan = standin_plan(tmp_path, kind="horovod", hosts=2, per_host=1, hyperparameters={"hold_until": str(release)})
    runner = local_run(plan, tmp_path, timeout_s=120)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(runner.run()))
    thread.start()
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline and "algo-2/rank1" not in _sampled(runner, "algo-2"):
        time.sleep(0.05)
    release.touch()
    thread.join(timeout=120)
    [result] = outcome
    assert result.exit_code == 0, result.reason
    reports = _reports(result.job_dir)
    assert {r["rank"] for r in reports.values()} == {"0", "1"}
    for report in reports.values():
        assert report["memory_cgroup"].endswith(f"/algo-{int(report['rank']) + 1}")
    document = json.loads((result.job_dir / host_memory.SUMMARY_FILE).read_text())
    assert set(document["hosts"]["algo-2"]["processes"]) == {"algo-2/rank1"}
    assert "algo-1/rank0" in document["hosts"]["algo-1"]["processes"]


def _sampled(runner: LocalRun, host: str) -> set[str]:
    memory = getattr(runner, "memory", None)
    return set(memory.hosts[host].process_peaks) if memory is not None else set()


# ---- the spec, the rule, the dry run ----
@pytest.mark.parametrize(
    ("text", "expected"),
    [("6GiB", 6 << 30), ("512MiB", 512 << 20), ("1.5GiB", 3 << 29), ("8GB", 8 * 10**9), ("6 GiB", 6 << 30)],
)
def test_sizes_in_binary_and_decimal_units(text, expected):
    from launcher.spec import size_bytes

    assert size_bytes(text) == expected


def test_an_ambiguous_or_unknown_size_is_refused_with_the_forms_it_could_be(tmp_path, capsys):
    spec = standin_spec(tmp_path, local={"memory_per_host": "6G"})
    code, _, err = run(capsys, "validate", str(spec))
    assert code == 2
    assert "local.memory_per_host: '6G' is not a size like 512MiB, 6GiB or 8GB" in err
    assert "6GiB for 2^30 bytes per unit, 6GB for 10^9" in err


def test_a_limit_below_what_the_tables_need_is_refused_before_anything_runs(tmp_path, capsys):

    big = ["--set", "hyperparameters.feature_size=10000000"]  # the chief's host: its ps share, chief, checkpoints
    code, out, err = run(
        capsys, "launch", str(REPO / "configs" / "ps.yaml"), "--local", "--memory-per-host", "2GiB", *big
    )
    [found] = [line for line in err.splitlines() if "local.memory_per_host" in line]
    assert code == 2 and found.startswith("error: ")
    assert "2GiB is less than the 4.5 GiB the busiest simulated host needs" in found
    assert "split over the 2 hosts' parameter servers" in found
    assert "[dfm local]" not in out + err  # refused before the run started
    code, _, err = run(
        capsys, "validate", str(REPO / "configs" / "ps.yaml"), "--set", "local.memory_per_host=5GiB", *big
    )
    assert "local.memory_per_host" not in err


def test_memory_per_host_applies_to_local_runs_only(tmp_path, capsys):
    code, _, err = run(capsys, "launch", str(standin_spec(tmp_path)), "--dry-run", "--memory-per-host", "1GiB")
    assert code == 2 and "--memory-per-host" in err and "apply to --local runs" in err


def test_a_limit_above_this_machines_memory_is_a_warning():
    gib = 1 << 30
    [alone] = host_memory.limit_warnings(64 * gib, 2, 16 * gib)
    assert "local.memory_per_host 64.0 GiB is more than this machine's 16.0 GiB" in alone
    [together] = host_memory.limit_warnings(12 * gib, 2, 16 * gib)
    assert "2 simulated host(s) x local.memory_per_host 12.0 GiB is more than this machine's 16.0 GiB" in together
    assert host_memory.limit_warnings(6 * gib, 2, 16 * gib) == [] and host_memory.limit_warnings(None, 2, gib) == []


def test_the_dry_run_shows_each_hosts_limit_and_warns_of_one_above_the_machine(tmp_path, capsys):
    spec = standin_spec(tmp_path, kind="none")
    code, out, err = run(capsys, "launch", str(spec), "--local", "--dry-run", "--memory-per-host", "6GiB")
    assert code == 0
    shown = [line for line in out.splitlines() if line.startswith("  memory: ")]
    assert len(shown) == 2 and all("6.0 GiB at most for every process of this host together" in s for s in shown)
    code, out, err = run(capsys, "launch", str(spec), "--local", "--dry-run", "--output", "json")
    assert json.loads(out)["memory_per_host"] is None
    code, out, err = run(capsys, "launch", str(spec), "--local", "--dry-run", "--memory-per-host", "64TiB")
    assert "local.memory_per_host 64.0 TiB is more than this machine's" in out


def test_each_host_of_the_request_gets_a_group_of_its_own_named_after_the_run(tmp_path):
    plan = in_run_dir(standin_plan(tmp_path, local={"memory_per_host": "1GiB"}), tmp_path / "runs")
    request = build_request(plan)
    assert request.memory_per_host == 1 << 30
    groups = [h.memory_group for h in request.hosts]
    if CGROUPS:
        assert [Path(g).name for g in groups] == ["algo-1", "algo-2"] and len({Path(g).parent for g in groups}) == 1
        assert Path(groups[0]).parent.name.startswith("dfm-standin-job-")
    else:
        assert groups == ["", ""]
    assert LocalRun(request).memory.mechanism.startswith("cgroup" if CGROUPS else "sampler")
