"""Supervision of a local run with the stand-in script: streaming, logs, failure, timeout, Ctrl-C, no orphans.

The stand-in (tests/local_scripts/standin.py) reports what the container gave it; the ps servers are real
TensorFlow servers, so these tests start TensorFlow processes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from local_plans import assert_no_survivors, local_run, standin_plan

from launcher.local import cores, netns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def reports(result_dir: Path) -> dict:
    found = {}
    for path in result_dir.glob("hosts/*/output/data/report-*.json"):
        found[path.stem.removeprefix("report-")] = json.loads(path.read_text())
    return found


def start_in_background(tmp_path, plan, host):
    """Run `plan` in a thread; once `host`'s stand-in has reported, return (run, thread, outcome, report)."""
    run = local_run(plan, tmp_path, timeout_s=150)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", run.run()))
    thread.start()
    report = tmp_path / "runs" / plan.job_name / "hosts" / host / "output" / "data" / f"report-{host}.json"
    while not report.exists() and thread.is_alive():
        time.sleep(0.2)
    assert report.exists(), f"the run ended before {host} reported: {outcome.get('result')}"
    return run, thread, outcome, json.loads(report.read_text())


REPORTED = ("SM_", "TF_CONFIG", "SAGEMAKER_", "DFM_", "CURRENT_HOST", "TRAINING_JOB_NAME")  # what standin.py reports


def assert_ran_as_requested(report: dict, process) -> None:
    """The script saw its request entry: argv, working directory, Python and (the reported part of) env."""
    script_at = process.argv.index("standin.py")
    assert report["argv"] == list(process.argv[script_at + 1 :]) and report["cwd"] == process.cwd
    assert report["python"] == process.argv[0]
    wanted = {k: v for k, v in process.env.items() if k.startswith(REPORTED)}
    assert wanted and {k: report["env"].get(k) for k in wanted} == wanted


def test_two_host_ps_job_runs_what_the_request_says(tmp_path):
    lines = []
    plan = standin_plan(tmp_path, hosts=2, hyperparameters={"behave": "sleep", "sleep_s": 1})
    run = local_run(plan, tmp_path, timeout_s=120, echo=lines.append)
    result = run.run()
    assert result.exit_code == 0, lines
    found = reports(result.job_dir)
    assert set(found) == {"algo-1", "algo-2"}
    for host, role in (("algo-1", "master"), ("algo-2", "worker")):
        assert_ran_as_requested(found[host], run.request.process(f"{host}/{role}"))
        feeds = {c.name: [key for key, _ in c.files] for c in run.request.hosts[int(host[-1]) - 1].channels}
        assert found[host]["files"] == feeds  # the channel folders hold the request's share of files
    logs = sorted(p.name for p in (result.job_dir / "logs").iterdir())
    assert logs == sorted(Path(p.log_file).name for p in run.request.processes)
    assert "[dfm] eval" in (result.job_dir / "logs" / "algo-2-worker.log").read_text()
    assert any(line.startswith("[algo-2/worker] [dfm] train step=") for line in lines)
    assert any("final eval:" in line and "auc=0.7" in line for line in lines)
    assert_no_survivors(result.pids)


def test_the_summary_repeats_the_scripts_warnings_once(tmp_path):
    lines = []
    warning = "the exported model is no better than chance: eval auc=0.5012 at step 20 (below 0.52"
    plan = standin_plan(tmp_path, hosts=1, hyperparameters={"warning": warning})
    result = local_run(plan, tmp_path, timeout_s=120, echo=lines.append).run()
    assert result.exit_code == 0, lines
    summary = lines[[i for i, line in enumerate(lines) if line.startswith("[dfm local] done in")][0] :]
    assert [line for line in summary if "warning" in line] == [f"  warning: {warning}"]
    assert_no_survivors(result.pids)


@pytest.mark.skipif(len(cores.machine_cpus()) < 2, reason="needs 2 cores to give 2 hosts one each")
def test_each_host_runs_on_cores_of_its_own_and_sm_num_cpus_says_how_many(tmp_path):
    plan = standin_plan(
        tmp_path, hosts=2, local={"cores_per_host": 1}, hyperparameters={"behave": "sleep", "sleep_s": 300}
    )
    run, thread, outcome, worker = start_in_background(tmp_path, plan, "algo-2")
    try:
        wanted = {h.name: list(h.cpus) for h in run.request.hosts}
        assert len(wanted["algo-1"]) == len(wanted["algo-2"]) == 1 and wanted["algo-1"] != wanted["algo-2"]
        report = tmp_path / "runs" / plan.job_name / "hosts" / "algo-1" / "output" / "data" / "report-algo-1.json"
        while not report.exists() and thread.is_alive():
            time.sleep(0.2)
        master = json.loads(report.read_text())
        for host, report in (("algo-1", master), ("algo-2", worker)):
            assert report["cpus"] == report["thread_cpus"] == report["child_cpus"] == wanted[host]
            assert report["num_cpus"] == "1"
        # the toolkit's ps servers (real TensorFlow servers) run on their host's cores too
        servers = {c.label: c for c in run.supervisor.children if c.role == "ps"}
        assert {label: sorted(psutil.Process(c.popen.pid).cpu_affinity()) for label, c in servers.items()} == {
            "algo-1/ps": wanted["algo-1"],
            "algo-2/ps": wanted["algo-2"],
        }
    finally:
        os.kill(worker["pid"], signal.SIGTERM)
        thread.join(timeout=120)
    assert_no_survivors(outcome["result"].pids)


def test_a_hosts_ps_ends_with_that_hosts_script_as_on_sagemaker(tmp_path):
    # The toolkit serves each host's ps from its own process, which on a non-master host ends as soon as the
    # host's script does: a worker that exits early takes its ps shard with it while the master still trains.
    plan = standin_plan(tmp_path, hosts=3, hyperparameters={"probe_ps_s": 40})
    lines = []
    result = local_run(plan, tmp_path, timeout_s=150, echo=lines.append).run()
    assert result.exit_code == 0, lines
    master = reports(result.job_dir)["algo-1"]
    assert master["ps_all_up"]
    assert master["ps_up"] == [True, False, False]  # the master's own ps lives on; the finished workers' are gone
    assert_no_survivors(result.pids)


def test_failing_script_stops_everything_and_names_the_process(tmp_path):
    lines = []
    plan = standin_plan(tmp_path, hosts=2, hyperparameters={"behave": "fail", "on_host": "algo-2", "spawn_child": True})
    result = local_run(plan, tmp_path, timeout_s=120, echo=lines.append).run()
    assert result.exit_code == 1
    assert "algo-2/worker exited with code 3" in result.reason
    text = "\n".join(lines)
    assert "FAILED: algo-2/worker exited with code 3" in text and "stand-in failing on purpose" in text
    assert lines[-1] == "[dfm local] cause: algo-2/worker: [dfm] error: stand-in failing on purpose"  # last, named
    children = [r["child_pid"] for r in reports(result.job_dir).values()]
    assert_no_survivors(result.pids | set(children))


def test_worker_killed_mid_run_fails_fast_with_no_orphans(tmp_path):
    plan = standin_plan(tmp_path, hosts=2, hyperparameters={"behave": "sleep", "sleep_s": 300, "spawn_child": True})
    _, thread, outcome, worker = start_in_background(tmp_path, plan, "algo-2")
    os.kill(worker["pid"], signal.SIGKILL)
    thread.join(timeout=120)
    result = outcome["result"]
    assert result.exit_code == 1 and "algo-2/worker exited with code -9" in result.reason
    children = [r["child_pid"] for r in reports(result.job_dir).values()]
    assert_no_survivors(result.pids | set(children))


def test_overall_timeout_stops_the_run(tmp_path):
    plan = standin_plan(tmp_path, kind="none", hosts=1, hyperparameters={"behave": "sleep", "sleep_s": 300})
    result = local_run(plan, tmp_path, timeout_s=2).run()
    assert result.exit_code == 1 and "timed out" in result.reason
    assert_no_survivors(result.pids)


DRIVER = """
import json, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from local_plans import local_run, standin_plan
plan = standin_plan(Path({tmp!r}), hosts=2, hyperparameters={{"behave": "sleep", "sleep_s": 300, "spawn_child": True}})
result = local_run(plan, Path({tmp!r}), echo=lambda line: print(line, flush=True)).run()
print("PIDS", json.dumps(sorted(result.pids)), flush=True)
sys.exit(result.exit_code)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_everything(tmp_path, signum):
    driver = DRIVER.format(tests=str(Path(__file__).parent), tmp=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    report = tmp_path / "runs" / "standin-job" / "hosts" / "algo-2" / "output" / "data" / "report-algo-2.json"
    while not report.exists() and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert f"stopped by {signal.Signals(signum).name}" in out
    pids = set(json.loads(out.split("PIDS ", 1)[1]))
    children = [r["child_pid"] for r in reports(tmp_path / "runs" / "standin-job").values()]
    assert_no_survivors(pids | set(children))


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun not installed")
def test_mpi_ranks_run_on_their_hosts_as_the_request_says(tmp_path):
    plan = standin_plan(tmp_path, kind="horovod", hosts=2, per_host=2, mpi_options="--NCCL_DEBUG WARN")
    lines = []
    run = local_run(plan, tmp_path, timeout_s=120, echo=lines.append)
    result = run.run()
    assert result.exit_code == 0, lines
    found = reports(result.job_dir)
    assert set(found) == {"algo-1-rank0", "algo-1-rank1", "algo-2-rank2", "algo-2-rank3"}
    for name, report in found.items():  # rank_exec.py put each rank into its host: env, cwd, /opt/ml arguments
        assert_ran_as_requested(report, run.request.process(name.replace("-rank", "/rank")))
        assert report["env"]["SM_CURRENT_HOST"] == "algo-1"
    # ShardedByS3Key is per host: both ranks of a host see the same files, the hosts disjoint ones
    assert found["algo-1-rank0"]["files"]["train"] == found["algo-1-rank1"]["files"]["train"]
    assert not set(found["algo-1-rank0"]["files"]["train"]) & set(found["algo-2-rank2"]["files"]["train"])
    assert {f"algo-{h}/rank{r}" for h, r in ((1, 0), (1, 1), (2, 2), (2, 3))} <= {
        line.split("]")[0][1:] for line in lines if line.startswith("[algo-")
    }
    assert {"algo-1-rank0.log", "algo-2-rank3.log", "mpirun.log"} <= {
        p.name for p in (result.job_dir / "logs").iterdir()
    }
    assert_no_survivors(result.pids)


def test_pipe_mode_feeds_each_host_its_share_epoch_after_epoch(tmp_path):
    import hashlib

    plan = standin_plan(tmp_path, kind="none", hosts=2, mode="Pipe")
    result = local_run(plan, tmp_path, timeout_s=120).run()
    assert result.exit_code == 0
    found = reports(result.job_dir)
    train = sorted((tmp_path / "data" / "train").iterdir())
    for index, host in enumerate(("algo-1", "algo-2")):
        share = hashlib.sha256(b"".join(p.read_bytes() for p in train[index::2])).hexdigest()
        assert found[host]["pipes"]["train"] == [share, share]  # two epochs, the host's files in key order
        assert found[host]["files"] == {}
    assert found["algo-1"]["pipes"]["eval"] == found["algo-2"]["pipes"]["eval"]  # FullyReplicated
    assert_no_survivors(result.pids)


def test_hosts_still_running_after_the_master_finished_fail_the_run(tmp_path):
    # On SageMaker such a job would hang until max_run: the other hosts must end on their own.
    plan = standin_plan(
        tmp_path,
        kind="none",
        hosts=2,
        local={"master_grace_s": 1},
        hyperparameters={"behave": "sleep", "on_host": "algo-2", "sleep_s": 300},
    )
    result = local_run(plan, tmp_path, timeout_s=120).run()
    assert result.exit_code == 1 and "algo-2/train still running" in result.reason
    assert_no_survivors(result.pids)


def test_fastfile_behaves_as_file_and_efs_channels_are_shared_folders(tmp_path):
    shared = tmp_path / "efs"
    shared.mkdir()
    (shared / "note.txt").write_text("on the file system")
    plan = standin_plan(tmp_path, kind="none", hosts=2, mode="FastFile", efs=shared)
    result = local_run(plan, tmp_path, timeout_s=120).run()
    assert result.exit_code == 0
    found = reports(result.job_dir)
    assert found["algo-1"]["files"]["train"] and found["algo-1"]["files"]["checkpoints"] == ["note.txt"]
    for host in ("algo-1", "algo-2"):
        data = result.job_dir / "hosts" / host / "input" / "data"
        assert (data / "checkpoints").resolve() == shared  # one folder for every host, writable
        config = json.loads((data.parent / "config" / "inputdataconfig.json").read_text())
        assert config["train"]["TrainingInputMode"] == "FastFile"
    assert_no_survivors(result.pids)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun not installed")
def test_failing_rank_fails_the_mpi_job_and_shows_its_lines(tmp_path):
    plan = standin_plan(tmp_path, kind="horovod", hosts=2, hyperparameters={"behave": "fail", "on_host": "algo-2"})
    lines = []
    result = local_run(plan, tmp_path, timeout_s=120, echo=lines.append).run()
    assert result.exit_code == 1 and result.reason.startswith("mpirun exited with code")
    text = "\n".join(lines)
    assert "last lines of algo-2/rank1:" in text and "stand-in failing on purpose" in text
    assert_no_survivors(result.pids)


@pytest.mark.skipif(not (netns.wanted() and netns.possible()), reason="no loopback-only namespace on this machine")
def test_processes_run_in_a_loopback_only_network_namespace(tmp_path):
    import socket

    plan = standin_plan(
        tmp_path, kind="none", hosts=1, hyperparameters={"behave": "sleep", "sleep_s": 300, "listen": True}
    )
    run, thread, outcome, seen = start_in_background(tmp_path, plan, "algo-1")
    try:
        assert seen["loopback_reachable"]  # inside, 127.0.0.1 works
        with pytest.raises(OSError):  # outside, the port bound on 0.0.0.0 does not exist
            socket.create_connection(("127.0.0.1", seen["listen_port"]), timeout=2).close()
    finally:
        run._stop_reason = "test over"
        thread.join(timeout=60)
    assert outcome["result"].isolated and outcome["result"].exit_code == 1
    assert_no_survivors(outcome["result"].pids)
