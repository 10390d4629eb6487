"""`dfm tune SPEC --local`: the search's pieces (fast), then tiny real studies of the bundled script (slow):
one to the end (table, JSON, PNG, --set overrides), and one interrupted by a real SIGINT and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from launcher.compile import compile_spec, compile_trial
from launcher.local import tune_search as search
from launcher.metric_lines import parse_metric_line
from launcher.plans.tuning_plan import build_tuning_plan
from launcher.rules.tuning_objective import objective_schedule
from spec_helpers import dfm, write_spec
from local_plans import assert_no_survivors, sigkill_once_running_and_find_holders

from launcher.local import netns

TUNE = {
    "objective": {"metric": "eval:auc", "goal": "maximize"},
    "strategy": "random",
    "max_jobs": 2,
    "max_parallel_jobs": 2,
    "random_seed": 3,
    "ranges": {"learning_rate": {"min": 0.001, "max": 0.1, "scaling": "log"}, "batch_size": {"values": [128, 256]}},
}


def tuning_plan(tmp_path, tune=None, hyperparameters=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_spec(
        tmp_path,
        {
            "tune": tune or TUNE,
            "data": {"eval": "s3://dfm-test/eval/"},
            "checkpoints": False,
            "hyperparameters": hyperparameters or {"log_steps": 10, "epochs": 3},
        },
    )
    compiled = compile_spec(path, env={})
    assert compiled.ok, compiled.errors
    return build_tuning_plan(
        compiled.spec, compiled.plan, schedule=objective_schedule(compiled.spec), name="t-261124-000000"
    )


# --- the search's pieces ---------------------------------------------------------------------------------
def test_reports_compare_trials_after_the_same_number_of_examples(tmp_path):
    """A trial that evaluates once, at its end, reports train:auc; unit = the largest batch (256) x log_steps
    (10): a 128-batch trial reports once per 20 steps."""
    tplan = tuning_plan(tmp_path, hyperparameters={"log_steps": 10})
    metric, unit = search.report_plan(tplan, {"batch_size": 1024, "log_steps": 100})
    assert (metric, unit) == ("train:auc", 2560)
    small = search.Reports("train:auc", 128, unit)
    line = "[dfm] train step={} loss=0.5 auc={} examples_per_sec=100"
    fed = [
        small.feed("algo-1/worker", ("train", {"auc": s / 100, "loss": 0.5}), line.format(s, s / 100))
        for s in (10, 20, 30, 40, 60)
    ]
    assert fed == [[], [(1, 0.2)], [], [(2, 0.4)], [(3, 0.6)]]
    other = small.feed("algo-2/worker", ("train", {"auc": 0.9}), line.format(80, 0.9))
    assert other == []  # one process's lines count


def test_trials_that_evaluate_while_running_report_the_objective_itself(tmp_path):
    """Pruning compared train:auc, measured with dropout on: biased against the dropout and l2_dense a search
    tunes. Wherever trials print eval lines before their end, the reports are the objective's."""
    every = tuning_plan(tmp_path, hyperparameters={"log_steps": 10, "eval_steps": 20})
    metric, unit = search.report_plan(every, {"batch_size": 1024, "log_steps": 100})
    assert (metric, unit) == ("eval:auc", 256 * 20)
    reports = search.Reports(metric, 128, unit)
    fed = [
        reports.feed("algo-1/worker", parse_metric_line(line), line)
        for line in (
            "[dfm] train step=20 loss=0.5 auc=0.99 examples_per_sec=100",  # training-side: not reported
            "[dfm] eval step=20 loss=0.6 auc=0.61",
            "[dfm] eval step=40 loss=0.6 auc=0.62",
            "[dfm] eval step=60 loss=0.6 auc=0.63",
            "[dfm] eval step=80 loss=0.6 auc=0.64",
        )
    ]
    assert fed == [[], [], [(1, 0.62)], [], [(2, 0.64)]]  # a 128-batch trial: once per 40 steps (5120 examples)
    per_epoch = tuning_plan(tmp_path / "epochs", hyperparameters={"log_steps": 10, "epochs": 3})
    assert search.report_plan(per_epoch, {}) == ("eval:auc", None)  # one report per evaluation
    hyperband = tuning_plan(
        tmp_path / "hyperband",
        {**TUNE, "strategy": "hyperband", "hyperband": {"min_resource": 1, "max_resource": 3}},
        hyperparameters={"log_steps": 10, "epochs": 0, "max_steps": 60, "eval_steps": 20},
    )
    assert hyperband.objective_lines == 3
    assert search.report_plan(hyperband, {}) == ("eval:auc", None)  # Hyperband's resource: objective values


def test_the_untuned_values_are_the_first_trial_only_when_inside_the_ranges(tmp_path):
    tplan = tuning_plan(tmp_path)
    assert search.baseline(tplan, {"learning_rate": 0.01, "batch_size": 256}) == {
        "learning_rate": 0.01,
        "batch_size": 256,
    }
    assert search.baseline(tplan, {"learning_rate": 0.01, "batch_size": 1024}) is None
    assert search.baseline(tplan, {"learning_rate": 0.5, "batch_size": 256}) is None


@pytest.mark.parametrize(
    "strategy, extra, sampler, pruner",
    [
        ("bayesian", {"early_stopping": "auto"}, "TPESampler", "MedianPruner"),
        ("random", {}, "RandomSampler", "NopPruner"),
        ("hyperband", {"hyperband": {"min_resource": 1, "max_resource": 3}}, "RandomSampler", "HyperbandPruner"),
        (
            "grid",
            {
                "ranges": {"batch_size": {"values": [128, 256]}, "optimizer": {"values": ["adam", "adagrad"]}},
                "max_jobs": None,
                "max_parallel_jobs": 1,
            },
            "GridSampler",
            "NopPruner",
        ),
    ],
)
def test_each_strategy_maps_to_its_optuna_sampler_and_pruner(tmp_path, strategy, extra, sampler, pruner):
    tune = {**TUNE, "strategy": strategy, **extra}
    tune = {k: v for k, v in tune.items() if v is not None}
    tplan = tuning_plan(tmp_path, tune)
    assert sampler in [cls.__name__ for cls in type(search.sampler(tplan)).__mro__]
    assert type(search.pruner(tplan)).__name__ == pruner
    if strategy == "grid":
        assert tplan.max_jobs == 4


def _study(tmp_path, tune, resume=False):
    from launcher.local.tuning_study import LocalTuning

    path = write_spec(
        tmp_path,
        {
            "tune": tune,
            "data": {"eval": "s3://dfm-test/eval/"},
            "checkpoints": False,
            "hyperparameters": {"log_steps": 10, "epochs": 3},
        },
    )
    compiled = compile_spec(path, env={})
    assert compiled.ok, compiled.errors
    tplan = build_tuning_plan(
        compiled.spec, compiled.plan, schedule=objective_schedule(compiled.spec), name="t-261124-000000"
    )
    return LocalTuning(tplan, compiled.spec, tmp_path / "runs", compile_trial).open_study(resume), tplan


def _ask(study, tplan, count: int) -> list[dict]:
    asked = []
    for _ in range(count):
        trial = study.ask()
        asked.append(search.suggest(trial, tplan))
        study.tell(trial, 0.5)
    return asked


def test_a_grid_study_ends_without_optunas_stop_error(tmp_path):
    """Optuna's GridSampler calls Study.stop from `tell` after the last grid point; outside optimize() that
    raised RuntimeError, so a grid study crashed before its table, study.png and study.json."""
    tune = {
        **TUNE,
        "strategy": "grid",
        "max_parallel_jobs": 1,
        "ranges": {"batch_size": {"values": [128, 256]}, "optimizer": {"values": ["adam", "adagrad"]}},
    }
    tune.pop("max_jobs")
    study, tplan = _study(tmp_path, tune)
    asked = _ask(study, tplan, tplan.max_jobs)
    assert sorted(json.dumps(a, sort_keys=True) for a in asked) == sorted(
        json.dumps({"batch_size": b, "optimizer": o}, sort_keys=True) for b in (128, 256) for o in ("adam", "adagrad")
    )


@pytest.mark.parametrize(
    "strategy, extra",
    [("random", {}), ("bayesian", {}), ("hyperband", {"hyperband": {"min_resource": 1, "max_resource": 3}})],
)
def test_resume_does_not_repeat_the_first_sessions_seeded_suggestions(tmp_path, strategy, extra):
    """A seeded sampler created again from the seed alone replays the same values (random, Hyperband's random
    sampling, TPE's random start-up trials)."""
    tune = {
        **TUNE,
        "strategy": strategy,
        "max_jobs": 15,
        "max_parallel_jobs": 1,
        **extra,
    }  # TPE: 5 random start-up trials
    study, tplan = _study(tmp_path, tune)
    first = _ask(study, tplan, 2)
    resumed, _ = _study(tmp_path, tune, resume=True)
    second = _ask(resumed, tplan, 2)
    assert not [values for values in second if values in first]
    (tmp_path / "again").mkdir()
    again, _ = _study(tmp_path / "again", tune)  # a fresh study with the same seed is reproducible
    assert _ask(again, tplan, 2) == first


# --- tiny real studies (slow) -----------------------------------------------------------------------------
SMALL_MODEL = {
    "field_size": 10,
    "feature_size": 1000,
    "deep_layers": [8],
    "log_steps": 5,
    "embedding_size": 4,
    "export": False,
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
        "3000",
        "--files",
        "2",
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
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    return out


def tiny_spec(tmp_path: Path, sample: Path, **tune) -> Path:
    spec = {
        "name": "tiny",
        "role": "arn:aws:iam::123456789012:role/dfm",
        "region": "us-east-1",
        "framework": {"version": "2.14", "python": "py310"},
        "output": "s3://dfm-test/out/",
        "entry_point": "deepfm-ps",
        "instance": {"type": "ml.c5.2xlarge", "count": 1},
        "checkpoints": False,
        "data": {"train": "s3://dfm-test/train/", "eval": "s3://dfm-test/eval/"},
        "hyperparameters": SMALL_MODEL,
        "tune": {**TUNE, **tune},
        "local": {
            "channels": {"train": str(sample / "train"), "eval": str(sample / "eval")},
            "run_dir": str(tmp_path / "runs"),
            "timeout_s": 200,
        },
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_local_study_ends_with_table_json_plot_and_overrides(tmp_path, sample):
    spec = tiny_spec(tmp_path, sample)
    result = dfm("tune", str(spec), "--local", "--output", "json", "--job-name", "tiny-261124-000000", timeout=380)
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    trials = document["trials"]
    assert [t["state"] for t in trials] == ["complete", "complete"]
    assert all(0 < t["objective"] < 1 and t["seconds"] > 0 for t in trials)
    for t in trials:  # each trial its own run folder, its hyperparameters in the script's argv
        config = json.loads(
            (Path(t["job_dir"]) / "hosts" / "algo-1" / "input" / "config" / "hyperparameters.json").read_text()
        )
        assert float(config["learning_rate"]) == pytest.approx(t["hyperparameters"]["learning_rate"])
        assert int(config["batch_size"]) == t["hyperparameters"]["batch_size"]
    best = max(trials, key=lambda t: t["objective"])
    assert document["best"]["trial"] == best["trial"]
    assert f"--set hyperparameters.learning_rate={best['hyperparameters']['learning_rate']!r}" in document["launch"]
    assert Path(document["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[dfm tune] 2/2 trials done" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_local_grid_study_ends_with_its_table_json_and_plot(tmp_path, sample):
    spec = tiny_spec(tmp_path, sample, strategy="grid", max_jobs=None, ranges={"batch_size": {"values": [128, 256]}})
    config = yaml.safe_load(spec.read_text())
    config["tune"].pop("max_jobs")
    spec.write_text(yaml.safe_dump(config))
    result = dfm("tune", str(spec), "--local", "--output", "json", "--job-name", "tiny-261124-000004", timeout=380)
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert sorted((t["hyperparameters"]["batch_size"], t["state"]) for t in document["trials"]) == [
        (128, "complete"),
        (256, "complete"),
    ]
    folder = Path(document["folder"])
    assert json.loads((folder / "study.json").read_text())["best"] == document["best"]
    assert (folder / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _processes_under(folder: Path) -> list[int]:
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            text = " ".join(process.info["cmdline"] or []) + " " + (process.info["cwd"] or "")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(folder) in text:
            found.append(process.info["pid"])
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ctrl_c_then_resume_completes_the_study_without_a_duplicate_trial(tmp_path, sample):
    """One trial at a time: SIGINT once trial 1 started (trial 0 done), then --resume runs trial 1's values
    again (as trial 2) and nothing else."""
    spec = tiny_spec(tmp_path, sample, max_parallel_jobs=1)
    name = "tiny-261124-000001"
    runs = tmp_path / "runs"
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "tune", str(spec), "--local", "--job-name", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith("[dfm tune] trial 1 started"):
            # SIGINT as soon as trial 1's processes are up: a fixed 3 s wait let a fast trial end first in CI
            deadline = time.monotonic() + 60
            while not _processes_under(runs / name / f"{name}-001") and time.monotonic() < deadline:
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            break
    rest, _ = process.communicate(timeout=120)
    seen.append(rest)
    assert process.returncode == 130, "".join(seen)[-3000:]
    assert f"`dfm tune {spec} --local --resume --job-name {name}` continues" in rest  # a command that works as printed
    time.sleep(0.5)
    assert _processes_under(runs) == []  # Ctrl-C left no process behind

    result = dfm("tune", str(spec), "--local", "--resume", "--output", "json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = json.loads(result.stdout)["trials"]
    assert [(t["trial"], t["state"], t["retry_of"]) for t in trials] == [
        (0, "complete", None),
        (1, "interrupted", None),
        (2, "complete", 1),
    ]
    assert trials[2]["hyperparameters"] == trials[1]["hyperparameters"]
    assert len({json.dumps(t["hyperparameters"], sort_keys=True) for t in trials if t["state"] == "complete"}) == 2
    assert sorted(os.listdir(runs / name)) == sorted(
        [
            f"{name}-000",
            f"{name}-001",
            f"{name}-002",
            f"{name}-000.txt",
            f"{name}-001.txt",
            f"{name}-002.txt",
            "study.journal",
            "tuning.json",
            "study.png",
            "study.json",
        ]
    )


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_hyperband_stops_a_trial_at_max_resource_objective_lines(tmp_path, sample):
    """Hyperband's resource is the count of objective values (SageMaker's): a trial that would print about 115
    eval lines (eval_steps 4, 20 epochs of ~23 steps) stops after its 2nd, with that line's value as its objective.
    The stop reaches the trial's processes a moment after the line: the trial is long enough that it is never
    over by then, however busy the machine."""
    spec = tiny_spec(
        tmp_path,
        sample,
        strategy="hyperband",
        max_jobs=1,
        max_parallel_jobs=1,
        hyperband={"min_resource": 1, "max_resource": 2},
        ranges={"learning_rate": {"min": 0.001, "max": 0.1}},
    )
    config = yaml.safe_load(spec.read_text())
    config["hyperparameters"] = {**config["hyperparameters"], "eval_steps": 4, "batch_size": 128, "epochs": 20}
    spec.write_text(yaml.safe_dump(config))
    result = dfm("tune", str(spec), "--local", "--output", "json", "--job-name", "tiny-261124-000002", timeout=380)
    assert result.returncode == 0, result.stderr[-3000:]
    (trial,) = json.loads(result.stdout)["trials"]
    assert trial["state"] == "complete" and trial["stopped"] == "reached max_resource 2"
    log = "".join(p.read_text() for p in (Path(trial["job_dir"]) / "logs").glob("*.log"))
    evals = [parse_metric_line(line)[1]["auc"] for line in log.splitlines() if line.startswith("[dfm] eval step=")]
    assert 2 <= len(evals) < 50 and trial["objective"] == pytest.approx(evals[1])  # stopped long before its end


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_max_runtime_s_stops_the_running_trials_and_starts_no_more(tmp_path, sample):
    """The study's clock jumps past max_runtime_s once trial 0 started: trial 0 stops, trial 1 never starts,
    and the time spent is kept for a --resume."""
    from launcher.local.tuning_study import ELAPSED, LocalTuning

    spec_path = tiny_spec(tmp_path, sample, max_runtime_s=600, max_parallel_jobs=1)
    compiled = compile_spec(str(spec_path), env={})
    assert compiled.ok, compiled.errors
    tplan = build_tuning_plan(
        compiled.spec, compiled.plan, schedule=objective_schedule(compiled.spec), name="tiny-261124-000003"
    )
    late, lines = [0.0], []

    def echo(line: str) -> None:
        lines.append(line)
        if "trial 0 started" in line:
            late[0] = 10_000.0

    tuning = LocalTuning(
        tplan, compiled.spec, tmp_path / "runs", compile_trial, echo=echo, clock=lambda: time.monotonic() + late[0]
    )
    study = tuning.run()
    (trial,) = study.get_trials()
    assert trial.state.name == "FAIL" and "max_runtime_s (600 s) ran out" in trial.user_attrs["stopped"]
    assert any("max_runtime_s (600 s) ran out: 1 running trial(s) stopped" in line for line in lines)
    assert study.user_attrs[ELAPSED] >= 10_000
    assert _processes_under(tmp_path / "runs") == []


def test_a_study_whose_trials_all_fail_exits_1_with_each_reason_and_resumes_only_unchanged(tmp_path, sample):
    """An empty train folder: each trial fails before it starts a process, as SageMaker refuses an empty prefix;
    no trial is crowned. A --resume that changes a fixed setting is refused, naming it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    spec = tiny_spec(tmp_path, sample)
    config = yaml.safe_load(spec.read_text())
    config["local"]["channels"]["train"] = str(empty)
    spec.write_text(yaml.safe_dump(config))
    name = "tiny-261127-000000"
    result = dfm("tune", str(spec), "--local", "--job-name", name)
    assert result.returncode == 1, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"dfm: no trial of {name} completed (trial 0: channel 'train': {empty} holds no files")
    assert "trial 1: channel 'train'" in error and "best:" not in result.stdout

    changed = dfm(
        "tune", str(spec), "--local", "--resume", "--job-name", name, "--set", "hyperparameters.max_steps=200"
    )
    assert changed.returncode == 2, changed.stderr
    assert "hyperparameters.max_steps: (not set) -> 200" in changed.stderr and "drop --resume" in changed.stderr


def test_a_failed_trials_reason_is_its_scripts_last_error_line():
    from launcher.local.tuning_study import failure_reason

    lines = [
        "[algo-1/master] [dfm] train step=5 loss=nan auc=0.5",
        "[algo-1/master] [dfm] error: training diverged at step 5: train loss=nan; no checkpoint was saved",
        "[dfm local] FAILED: algo-1/master exited with code 1",
    ]
    assert failure_reason(lines, 1, "algo-1/master exited with code 1", "eval:auc").startswith(
        "training diverged at step 5"
    )
    assert (
        failure_reason(lines[2:], 1, "algo-1/master exited with code 1", "eval:auc")
        == "algo-1/master exited with code 1"
    )
    assert failure_reason([], 0, "", "eval:auc") == "no eval:auc line"


def test_a_trial_the_rules_refuse_fails_as_dfm_validate_would(tmp_path):
    """Trials go through the rules: a suggested value the rules refuse (here an MLP layer of 0 units, which the
    scripts' parser refuses) fails that trial with the rules' message, without starting a process."""
    from launcher.errors import DfmError

    compiled = compile_spec(
        write_spec(
            tmp_path,
            {
                "tune": {
                    "objective": {"metric": "eval:auc", "goal": "maximize"},
                    "strategy": "random",
                    "max_jobs": 2,
                    "ranges": {"dropout": {"min": 0.0, "max": 0.5}},
                },
                "data": {"eval": "s3://dfm-test/eval/"},
            },
        )
    )
    assert compiled.ok, compiled.errors
    ok = compile_trial(compiled.spec, {"dropout": 0.25}, "t-261125-000000-000", str(tmp_path / "runs"))
    assert ok.hyperparameters["dropout"] == 0.25 and ok.local.run_dir == str(tmp_path / "runs")
    with pytest.raises(DfmError) as refused:
        compile_trial(compiled.spec, {"batch_size": 0}, "t-261125-000000-001", str(tmp_path / "runs"))
    assert refused.value.exit_code == 2
    assert "trial t-261125-000000-001 refused" in refused.value.message
    assert "hyperparameters.batch_size: must be at least 1, got 0" in refused.value.message


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not (netns.wanted() and netns.possible()), reason="no loopback-only namespace on this machine")
def test_a_sigkilled_local_study_leaves_no_namespace_holder(tmp_path, sample):
    """SIGKILL runs none of dfm's cleanup: the holders of the trials' network namespaces die with dfm."""
    spec = tiny_spec(tmp_path, sample)
    holders = sigkill_once_running_and_find_holders(["tune", str(spec), "--local", "--job-name", "tiny-261124-000002"])
    assert_no_survivors(holders)
