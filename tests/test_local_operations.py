"""Operations of a local run: TensorBoard summaries and learning curves, the stall watchdog, local recovery.

The stand-in script (tests/local_scripts/standin.py) runs the launcher-side tests in seconds; the bundled
scripts run end to end on small synthetic data where the scripts' own part is under test.
"""

from __future__ import annotations

import glob
import re
import time
from pathlib import Path

import pytest
import yaml
from local_plans import assert_no_survivors
from test_local_e2e import WatchedRun, e2e_spec, kill_once, sample  # noqa: F401  (sample: the module's data fixture)

from launcher.facts import contract
from launcher.local import curves
from launcher.metric_lines import Progress
from launcher.plans.training_plan import build_plan
from launcher.spec import load_spec


def with_sections(spec_path: Path, **sections) -> Path:
    """The spec at `spec_path` with top-level sections added (tensorboard, stall_timeout, recover, ...)."""
    spec = yaml.safe_load(spec_path.read_text())
    spec.update(sections)
    spec_path.write_text(yaml.safe_dump(spec))
    return spec_path


def test_the_scripts_parse_the_tensorboard_dir_the_plan_passes(tmp_path):
    from spec_helpers import BASE, merged

    path = tmp_path / "tb.yaml"
    path.write_text(yaml.safe_dump(merged(BASE, {"tensorboard": True})))
    plan = build_plan(load_spec(path), job_name="tb-job")
    args = contract.bundled_hparams().parse_hyperparameters(plan.argv)
    assert args.tensorboard_dir == "/opt/ml/output/tensorboard"
    path.write_text(yaml.safe_dump(BASE))
    assert (
        contract.bundled_hparams().parse_hyperparameters(build_plan(load_spec(path), job_name="j").argv).tensorboard_dir
        == ""
    )


def test_curves_take_each_step_once_and_mark_the_best_evaluation(tmp_path):
    progress = Progress()
    for line in (
        "[dfm] train step=10 loss=0.7 auc=0.55 examples_per_sec=100.0",
        "[dfm] eval step=10 loss=0.6 auc=0.61",
        "[dfm] train step=20 loss=0.6 auc=0.65 examples_per_sec=100.0",
        "[dfm] eval step=20 loss=0.65 auc=0.58",
        "[dfm] eval step=10 loss=0.6 auc=0.61",
    ):  # the chief repeats the exported evaluation's line last
        progress.feed("algo-1/master", line)
    found = curves.series(progress.history)
    assert sorted(found["train"]) == [10, 20] and sorted(found["eval"]) == [10, 20]
    assert curves.best_eval(found["eval"]) == (10, 0.61)
    pytest.importorskip("matplotlib")
    drawn = curves.plot(progress.history, tmp_path / "curves.png", "job")
    assert drawn is not None and drawn.read_bytes().startswith(b"\x89PNG")
    assert curves.plot([], tmp_path / "none.png", "job") is None


def event_scalars(folder: Path) -> dict[str, list[int]]:
    """tag -> steps, as TensorBoard's own reader loads the event files in `folder`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [event.step for event in events.Tensors(tag)] for tag in events.Tags()["tensors"]}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_parameter_server_run_writes_tensorboard_summaries_and_learning_curves(tmp_path, sample):  # noqa: F811
    # best_of last: under eval:auc a step-20 evaluation below step 10's (asynchronous updates) would repeat step 10's
    # eval line at the end, and its scalar with it
    spec = e2e_spec(
        tmp_path,
        name="ops-tb",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={"max_steps": 20, "eval_steps": 10, "best_of": "last"},
    )
    run = WatchedRun("launch", str(with_sections(spec, tensorboard=True)), "--local")
    assert run.wait() == 0, run.output[-3000:]
    job = run.job_dir(tmp_path / "runs")
    folder = job / "hosts" / "algo-1" / "output" / "tensorboard"
    assert f"tensorboard --logdir {folder}" in run.output
    scalars = event_scalars(folder)
    assert set(scalars) == {
        "train/loss",
        "train/auc",
        "train/examples_per_sec",
        "train/examples",
        "train/learning_rate",
        "eval/loss",
        "eval/auc",
    }
    assert scalars["train/auc"] == [10, 20] and scalars["eval/auc"] == [10, 20]
    assert not glob.glob(str(job / "hosts" / "algo-2" / "output" / "tensorboard" / "*"))  # the chief's alone
    png = job / curves.PLOT_FILE
    assert f"learning curves: {png}" in run.output and png.read_bytes().startswith(b"\x89PNG")


def standin_run(tmp_path: Path, echo, **sections):
    """A LocalRun of the stand-in on two hosts (no distribution), the spec's top-level `sections` added: algo-2
    stops itself (SIGSTOP) after its train lines, algo-1 prints its own once algo-2 has stopped, then sleeps."""
    from local_plans import local_run, standin_spec

    hyperparameters = {"behave": "sleep", "sleep_s": 300, "stop_on": "algo-2", "stop_marker": str(tmp_path / "stopped")}
    spec = standin_spec(tmp_path, kind="none", hosts=2, hyperparameters=hyperparameters)
    plan = build_plan(load_spec(with_sections(spec, **sections)), job_name="stall-job")
    return local_run(plan, tmp_path, timeout_s=200, echo=echo)


# Counted from the start of supervision until the chief's first metric line: longer than both stand-ins take to
# start on a loaded machine, so the chief falls silent after its lines rather than before them.
STALL_TIMEOUT_S = 10


def test_the_stall_watchdog_stops_a_hung_run_and_names_the_stopped_process(tmp_path):

    seen: list[str] = []
    result = standin_run(tmp_path, seen.append, stall_timeout=STALL_TIMEOUT_S).run()
    output = "\n".join(seen)
    assert result.exit_code == 1, output
    assert any("[dfm] train step=" in line for line in seen), output
    # algo-2 stopped itself after its train lines (SIGSTOP); algo-1 only sleeps, its CPU idle as well
    stalled = re.search(
        rf"FAILED: no metric line from the chief for (\d+) s \(stall_timeout {STALL_TIMEOUT_S} s\); stopped\. "
        r"Likely culprit: algo-2/train \(pid \d+, stopped by a signal, last line ",
        output,
    )
    assert stalled, output
    # the silence it measured: at least the stall_timeout, and the run stopped soon after
    assert STALL_TIMEOUT_S <= int(stalled[1]) < STALL_TIMEOUT_S + 10, output
    assert "[dfm local] stalled: algo-1/train (pid " in output
    assert "last lines of algo-2/train:" in output
    assert_no_survivors(result.pids)


def kill_chiefs_worker_once_training(killed: list[float]):
    """Once a train line is out, SIGKILL the worker task the chief started itself (train_ps.py, child of
    train_ps.py): no process the launcher started ends."""
    return kill_once(
        killed,
        "[dfm] train step=",
        lambda proc: "train_ps.py" in " ".join(proc.cmdline()) and "train_ps.py" in " ".join(proc.parent().cmdline()),
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_chief_fails_with_a_line_when_a_worker_task_dies(tmp_path, sample):  # noqa: F811
    spec = e2e_spec(
        tmp_path,
        name="ops-dead-worker",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={"max_steps": 100000, "epochs": 1000},
    )
    run = WatchedRun("launch", str(with_sections(spec, environment={"DFM_WORKER_WAIT_S": "5"})), "--local")
    killed: list[float] = []
    assert run.wait(until=kill_chiefs_worker_once_training(killed)) == 1, run.output[-3000:]
    assert killed and time.monotonic() - killed[0] < 90, "the chief waited for its dead worker"
    lost = re.search(r"\[dfm\] error: worker task 1 \([^)]*\) has been unreachable for (\d+) s", run.output)
    assert lost, run.output[-3000:]
    # the measured wait: DFM_WORKER_WAIT_S's 5 s at least, and well short of the 60 s it is without it
    assert 5 <= int(lost[1]) < 60, run.output[-3000:]
    assert "FAILED: algo-1/master exited with code 1" in run.output
    assert_no_survivors(run.processes)


def recovering_plan(tmp_path: Path, interrupt: str, behave: str = "ok", max_restarts: int = 2):
    from local_plans import in_run_dir, standin_spec

    spec = standin_spec(
        tmp_path,
        kind="none",
        hosts=2,
        checkpoint_s3_uri="s3://bucket/ckpt/recover-job",
        hyperparameters={"interrupt": interrupt, "behave": behave, "on_host": "algo-2"},
    )
    spec = with_sections(spec, recover={"max_restarts": max_restarts, "backoff_s": 2})
    return in_run_dir(build_plan(load_spec(spec), job_name="recover-job"), tmp_path / "runs", 200)


def chief_report(result) -> dict:
    import json

    return json.loads((result.job_dir / "hosts" / "algo-1" / "output" / "data" / "report-algo-1.json").read_text())


def test_an_interrupted_local_run_is_run_again_from_its_checkpoints(tmp_path):
    from launcher.local.local_recovery import run_recovering

    lines, waits = [], []
    results = run_recovering(recovering_plan(tmp_path, "first"), echo=lines.append, sleep=waits.append)
    output = "\n".join(lines)
    assert [r.exit_code for r in results] == [1, 0], output
    assert [r.job_dir.name for r in results] == ["recover-job", "recover-job-r1"]
    assert chief_report(results[1])["resumed_from"] == 1  # the first attempt's checkpoint reached the second
    assert waits == [2]
    assert (
        "[dfm local] attempt 1/3 ended: algo-1/train exited with code -9 (SIGKILL: an interruption); "
        "restarting in 2 s from the checkpoints" in output
    )
    assert "  1. recover-job: algo-1/train exited with code -9 (SIGKILL: an interruption) (exit 1)" in output
    assert "  2. recover-job-r1: finished (exit 0)" in output
    for result in results:
        assert_no_survivors(result.pids)


def test_recovery_gives_up_after_max_restarts_with_the_last_exit_code(tmp_path):
    from launcher.local.local_recovery import run_recovering

    lines, waits = [], []
    results = run_recovering(recovering_plan(tmp_path, "always", max_restarts=2), echo=lines.append, sleep=waits.append)
    assert [r.exit_code for r in results] == [1, 1, 1] and waits == [2, 4]  # the back-off doubles
    runs = [(r.job_dir / "hosts" / "algo-1" / "checkpoints" / "count.txt").read_text() for r in results]
    assert runs == ["1", "2", "3"]  # each attempt started from the one before's checkpoint


def test_a_failing_script_is_not_run_again(tmp_path):
    from launcher.local import run_local

    lines = []
    assert run_local(recovering_plan(tmp_path, "never", behave="fail"), echo=lines.append) == 1
    output = "\n".join(lines)
    assert "  1. recover-job: algo-2/train exited with code 3 (exit 1)" in output
    assert "attempt 2/" not in output


def kill_host_after_a_checkpoint(host: str, killed: list[float]):
    """Once the chief has saved a checkpoint, SIGKILL train_ps.py on `host` (a lost instance)."""
    return kill_once(
        killed,
        "[dfm] checkpoint step=",
        lambda proc: "train_ps.py" in " ".join(proc.cmdline()) and f"/hosts/{host}/" in proc.cwd() + "/",
    )


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_run_that_lost_a_host_resumes_from_its_checkpoint_and_finishes(tmp_path, sample):  # noqa: F811
    import re

    spec = e2e_spec(
        tmp_path,
        name="ops-recover",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={"max_steps": 200, "epochs": 100, "checkpoint_steps": 20},
        checkpoints="s3://dfm-test/checkpoints/ops-recover/",
    )
    run = WatchedRun("launch", str(with_sections(spec, recover={"max_restarts": 1, "backoff_s": 0})), "--local")
    killed: list[float] = []
    assert run.wait(timeout=380, until=kill_host_after_a_checkpoint("algo-2", killed)) == 0, run.output[-3000:]
    assert killed
    first, second = run.output.split("[dfm local] attempt 2/2: ")
    assert "attempt 1/2 ended: algo-2/worker exited with code -9 (SIGKILL: an interruption)" in first
    saved = max(int(step) for step in re.findall(r"\[dfm\] checkpoint step=(\d+)", first))
    resumed = int(re.search(r"continuing at step (\d+)", second).group(1))
    assert 0 < resumed == saved < 200  # from the first attempt's last checkpoint, not from 0
    steps = [int(step) for step in re.findall(r"\[dfm\] train step=(\d+)", second)]
    assert steps[0] > resumed and steps[-1] == 200
    auc = float(re.search(r"final eval: loss=\S+ auc=(\S+)", second).group(1))
    assert auc > 0.72, second[-2000:]  # uninterrupted: 0.758; resumed at step 20: 0.759 (docs/local.md)
    assert re.search(
        r"  1\. ops-recover-\S+: algo-2/worker exited with code -9 \(SIGKILL: an interruption\) \(exit 1\)", second
    )
    assert re.search(r"  2\. ops-recover-\S+-r1: finished \(exit 0\)", second)
    assert_no_survivors(run.processes)
