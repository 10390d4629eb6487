"""What `dfm tune` shows while it runs: trials done (of max_jobs), running and failed, and the best so far; on a
terminal as a bar, locally and with --wait."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from launcher.cli.tune import show_local_counts, show_sagemaker_counts
from launcher.local.tuning_study import LocalTuning, counts_text
from launcher.watching import CountBar


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=160, color_system=None), out


def test_a_local_studys_counts_are_done_running_failed_pruned_and_the_best():
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for value in (0.70, 0.72):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=value))
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, state=optuna.trial.TrialState.FAIL))
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, state=optuna.trial.TrialState.PRUNED))
    interrupted = optuna.trial.create_trial(
        params={}, distributions={}, state=optuna.trial.TrialState.FAIL, user_attrs={"interrupted": True}
    )
    study.add_trial(interrupted)  # a Ctrl-C's: runs again, does not count
    tplan = SimpleNamespace(max_jobs=8, objective_metric="eval:auc", maximize=True)
    tuning = LocalTuning(tplan, spec=None, run_dir=Path("."), plan_trial=None)
    tuning.active = {5: object(), 6: object()}
    seen = []
    tuning.counts = seen.append
    line = tuning._line(study)
    counts = {
        "done": 4,
        "max_jobs": 8,
        "pruned": 1,
        "failed": 1,
        "running": 2,
        "objective": "eval:auc",
        "best": (0.72, 1),
    }
    assert seen == [counts]
    assert line == "[dfm tune] 4/8 trials done (1 pruned, 1 failed), 2 running, best eval:auc=0.7200 (trial 1)"
    assert counts_text({**counts, "best": None}) == "4/8 trials done (1 pruned, 1 failed), 2 running"
    console, out = terminal()
    with CountBar("trials", 8, console) as bar:
        show_local_counts(bar, counts)
    assert "4/8" in out.getvalue() and "2 running, 1 failed, 1 pruned, best eval:auc=0.7200 (trial 1)" in out.getvalue()


def test_a_tuning_jobs_counts_on_a_bar_follow_each_describe():
    summaries = [
        {"status": "InProgress", "max_jobs": 6, "trials": {"completed": 0, "running": 2, "stopped": 0, "failed": 0}},
        {
            "status": "InProgress",
            "max_jobs": 6,
            "trials": {"completed": 2, "running": 2, "stopped": 0, "failed": 1},
            "objective": {"metric": "eval:auc"},
            "best": {"objective": 0.7345},
        },
    ]
    console, out = terminal()
    with CountBar("trials", 6, console) as bar:
        show_sagemaker_counts(bar, summaries[0])
        assert "0/6" in out.getvalue() and "InProgress: 2 running, 0 failed, 0 stopped" in out.getvalue()
        show_sagemaker_counts(bar, summaries[1])
    assert "3/6" in out.getvalue() and "2 running, 1 failed, 0 stopped, best eval:auc=0.7345" in out.getvalue()
