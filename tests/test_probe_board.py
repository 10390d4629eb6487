"""`dfm probe --local` while it runs: one line per candidate state (and a live table on a terminal), the processes'
lines kept in each run's logs folder, and each candidate measured from what its processes printed. The runs here
are scripted (their lines fed as a run's processes would print them); test_probe_local.py runs real ones."""

from __future__ import annotations

from pathlib import Path

from spec_helpers import LOCAL_BASE, write_spec

from launcher.compile import compile_spec
from launcher.local import probe_runs
from launcher.local.probe_board import BoardRow, ProbeBoard
from launcher.local.runner import RunResult
from launcher.plans import probe_plan
from launcher.spec import load_spec


def _request(tmp_path):
    path = write_spec(tmp_path, {"local": {"run_dir": str(tmp_path / "runs")}}, base=LOCAL_BASE)

    def compile_candidate(lines, job_name):
        compiled = compile_spec(str(path), lines, job_name)
        return compiled.plan, compiled.errors

    probe = probe_plan.build_probe_plan(
        load_spec(path), compile_candidate, tries=["instance.count=1,2"], name="board-t", local=True
    )
    return probe_runs.dryrun(probe)


SCRIPTS = {
    1: ([f"[dfm] train step={s} loss=0.5 auc=0.6 examples_per_sec={1000 + s}.0" for s in range(30, 330, 30)], 0),
    2: (["[dfm] train step=30 loss=0.5 auc=0.6 examples_per_sec=800.0", "Traceback: ResourceExhausted"], 1),
}


class ScriptedRun(probe_runs.ProbeRun):
    def run(self) -> RunResult:
        Path(self.request.log_dir).mkdir(parents=True)
        lines, code = SCRIPTS[self.number]
        for line in lines:
            self._on_line("algo-1", line)
            self.display.progress(self.progress, 0.0)
        self.echo(f"[dfm local] {'done' if code == 0 else 'FAILED: algo-1 exited with code 1'}")
        return RunResult(code, Path(self.request.job_dir), "" if code == 0 else "algo-1 exited with code 1")


def test_a_local_probe_shows_a_line_per_candidate_state_not_its_processes_lines(tmp_path):
    request = _request(tmp_path)
    echoed: list[str] = []
    rows = [BoardRow(number, run.job_name, 300) for number, run in request.runs]
    board = ProbeBoard(rows, echoed.append, clock=lambda: 0.0)

    measured = probe_runs.execute(request, echo=echoed.append, run_class=ScriptedRun, board=board)

    assert echoed == [
        "[dfm probe] candidate 1 (board-t-1): running",
        "[dfm probe] candidate 1 (board-t-1): done, step 300/300, 1,195 examples/s, 1,090-1,300 over 8 windows",
        "[dfm probe] candidate 2 (board-t-2): running",
        "[dfm probe] candidate 2 (board-t-2): failed, step 30/300, algo-1 exited with code 1",
    ]
    one, two = measured
    assert (one.status, one.examples_per_sec, one.throughput.windows) == ("Completed", 1195.0, 8)
    assert (two.status, two.examples_per_sec) == ("Failed", None)
    logs = Path(request.runs[0][1].log_dir) / probe_runs.ProbeRun.LOG
    assert logs.read_text() == "[dfm local] done\n"


def test_the_board_throttles_progress_lines_and_draws_a_table():
    now = [0.0]
    echoed: list[str] = []
    board = ProbeBoard(
        [BoardRow(1, "p-1", 60), BoardRow(2, "p-2", 60)], echoed.append, every_s=10, clock=lambda: now[0]
    )
    board.update(1, state="running")
    board.update(1, step=6, examples_per_sec=100.0)  # within 10 s of the last line: not shown
    now[0] = 10.0
    board.update(1, step=12, examples_per_sec=110.0)
    board.update(1, step=12, examples_per_sec=110.0)  # nothing changed
    assert echoed == [
        "[dfm probe] candidate 1 (p-1): running",
        "[dfm probe] candidate 1 (p-1): running, step 12/60, 110 examples/s",
    ]

    import io

    from rich.console import Console

    console = Console(width=100, record=True, file=io.StringIO())
    console.print(board.table())
    text = console.export_text()
    assert "running" in text and "12/60" in text and "waiting" in text and "-/60" in text


def test_sigterm_like_ctrl_c_stops_the_probe_after_the_running_candidate(tmp_path):
    import pytest

    from launcher.plans.probe_results import ProbeInterrupted

    started: list[int] = []

    class Terminated(probe_runs.ProbeRun):
        def run(self) -> RunResult:
            started.append(self.number)
            Path(self.request.log_dir).mkdir(parents=True)
            return RunResult(1, Path(self.request.job_dir), "stopped by SIGTERM")

    request = _request(tmp_path)
    rows = [BoardRow(number, run.job_name, 300) for number, run in request.runs]
    with pytest.raises(ProbeInterrupted) as stopped:
        probe_runs.execute(request, run_class=Terminated, board=ProbeBoard(rows, lambda line: None))
    assert started == [1] and [(m.number, m.status) for m in stopped.value.measurements] == [(1, "Stopped")]
