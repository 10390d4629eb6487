"""What a local run shows while it trains: on a terminal a progress bar (steps and examples of the total the plan
tells, examples/s, the last loss, time left), fed by the metric lines and the scripts' progress lines between
them; off a terminal and with -o json nothing new. And the learning curves of a run shorter than one log window."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from rich.console import Console

from launcher.local import run_total
from launcher.plans import step_total
from launcher.local.progress import LiveDisplay, PlainDisplay, TerminalFilter
from launcher.metric_lines import Progress
from launcher.watching import Total
from test_local_e2e import e2e_spec, sample  # noqa: F401


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=160, color_system=None), out


def test_the_total_is_max_steps_else_the_epochs_rows_over_the_examples_a_step_trains():
    rows = (6000, "prepare/prepare.json")
    assert step_total.total_steps(200, 1, 256, None) == Total(200, 256, "max_steps 200")
    assert step_total.total_steps(0, 2, 256, rows).steps == 2 * 24  # 23.4 batches: the short last one is a step
    assert (
        "2 epoch(s) x 6,000 rows (prepare/prepare.json) / 256 examples a step"
        in step_total.total_steps(0, 2, 256, rows).how
    )
    assert step_total.total_steps(500, 1, 256, rows).steps == 24  # the epochs end first
    assert step_total.total_steps(0, 1, 256, None).steps is None


def test_train_rows_are_read_from_prepare_json_or_counted_in_tfrecord_files(tmp_path):
    from launcher.data.tfrecord import write_records

    channel = tmp_path / "train"
    channel.mkdir()
    write_records(channel / "part-0.tfrecord", [b"x" * n for n in range(1, 8)])
    write_records(channel / "part-1.tfrecord", [b"y" * 300] * 5)
    assert run_total.counted_rows(sorted(channel.iterdir())) == 12
    (channel / "notes.txt").write_text("not records\n")
    assert run_total.counted_rows(sorted(channel.iterdir())) is None  # not cheap to know: no total
    (tmp_path / "prepare").mkdir()
    (tmp_path / "prepare" / "prepare.json").write_text(json.dumps({"train": {"rows": 1234}}))
    assert run_total.prepared_rows(channel) == (1234, str(tmp_path / "prepare" / "prepare.json"))


def test_the_bar_shows_steps_and_examples_of_the_total_speed_and_loss_from_progress_and_metric_lines():
    console, out = terminal()
    display = LiveDisplay(console)
    display.total = Total(54, 512, "about 1 epoch(s) x 27,648 rows (counted) / 512 examples a step")
    progress = Progress()
    with display:
        progress.feed("algo-1/master", "[dfm] progress step=30")
        display.progress(progress, 0.0)
        display.bar.progress.refresh()
        assert "30/54" in out.getvalue() and "15,360/27,648 examples" in out.getvalue()
        progress.feed("algo-1/master", "[dfm] train step=54 loss=0.4711 auc=0.7 examples_per_sec=9000.0")
        display.progress(progress, 1.0)
    shown = out.getvalue()
    assert "[dfm local] progress: 54 steps; about 1 epoch(s) x 27,648 rows (counted)" in shown
    assert "54/54" in shown and "9,000 examples/s" in shown and "loss 0.4711" in shown


def test_progress_lines_stay_off_the_plain_display_and_the_terminals_scroll():
    lines = []
    plain, progress = PlainDisplay(lines.append), Progress()
    assert not progress.feed("algo-1/master", "[dfm] progress step=12")
    plain.progress(progress, 100.0)
    assert lines == [] and progress.steps_done == 12 and progress.history == []
    assert not TerminalFilter().shows("algo-1/master", "[dfm] progress step=12")
    assert TerminalFilter(verbose=True).shows("algo-1/master", "[dfm] progress step=12")


SHORT = {"max_steps": 0, "epochs": 1, "log_steps": 100, "optimizer": "adagrad", "best_of": "last"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_shorter_than_one_log_window_shows_progress_on_a_terminal_and_a_curve(tmp_path, sample, monkeypatch):  # noqa: F811
    pytest.importorskip("matplotlib")
    from launcher.compile import compile_spec
    from launcher.local import curves
    from launcher.local.local_request import build_request
    from launcher.local.runner import LocalRun

    spec = e2e_spec(
        tmp_path,
        name="short",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters=SHORT,
    )
    compiled = compile_spec(str(spec), ())
    assert compiled.ok, compiled.errors
    figures = []
    draw = curves.draw
    monkeypatch.setattr(curves, "draw", lambda *args: figures.append(draw(*args)) or figures[-1])
    console, out = terminal()
    run = LocalRun(build_request(compiled.plan), echo=lambda line: None)
    run.display = LiveDisplay(console)  # the terminal, at the boundary
    result = run.run()
    assert result.exit_code == 0, out.getvalue()[-3000:]
    shown = out.getvalue()
    chief = (result.job_dir / "logs" / "algo-1-master.log").read_text()
    assert "[dfm] progress step=0" in chief and chief.count("[dfm] train step=") == 1  # one window, at its end
    # 4 files of 1,500 records, counted: 6,000 rows / 256 a step, each worker's last batch short (2 x 12 steps)
    assert f"progress: 24 steps; about 1 epoch(s) x 6,000 rows (records counted in {sample / 'train'})" in shown
    assert "24/24" in shown and "6,144/6,144 examples" in shown
    assert "[dfm] progress" not in shown  # the bar's lines, not the terminal's
    (fig,) = figures
    auc_axis, loss_axis = fig.axes
    train = {line.get_label(): line for line in auc_axis.lines + loss_axis.lines}
    for name in ("train auc", "train loss", "eval auc", "eval loss"):
        assert list(train[name].get_xdata()) == [24] and train[name].get_marker() not in ("None", "", None), name
    assert (result.job_dir / curves.PLOT_FILE).read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("output", ["text", "json"])
def test_nothing_new_is_printed_off_a_terminal_or_with_json(tmp_path, sample, output):  # noqa: F811
    spec = e2e_spec(
        tmp_path,
        name="plain",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters=SHORT,
    )
    done = subprocess.run(
        [sys.executable, "-m", "launcher.cli", "launch", str(spec), "--local", "-o", output],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (job,) = [p for p in (tmp_path / "runs").iterdir() if (p / "hosts").is_dir()]
    assert "[dfm] progress step=0" in (job / "logs" / "algo-1-master.log").read_text()  # the scripts print them
    for stream in (done.stdout, done.stderr):
        # no ticker lines, no bar's header or control codes; the plain progress line (every 10 s while a train line
        # has come, PlainDisplay) is what a log gets, and a parameter-server chief's lines may come mid-run
        assert "[dfm] progress" not in stream and "progress: 24 steps" not in stream
        assert "\x1b[" not in stream  # no terminal control: no bar
    if output == "json":
        assert json.loads(done.stdout) == {"job_name": job.name, "exit_code": 0}
