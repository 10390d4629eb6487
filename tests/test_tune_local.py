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

from launcher.compile import compile_spec
from launcher.local import tune_search as search
from launcher.tuning_plan import build_tuning_plan
from spec_helpers import dfm, write_spec

TUNE = {"objective": {"metric": "eval:auc", "goal": "maximize"}, "strategy": "random", "max_jobs": 2,
        "max_parallel_jobs": 2, "random_seed": 3,
        "ranges": {"learning_rate": {"min": 0.001, "max": 0.1, "scaling": "log"}, "batch_size": {"values": [128, 256]}}}


def tuning_plan(tmp_path, tune=None, hyperparameters=None):
    path = write_spec(tmp_path, {"tune": tune or TUNE, "data": {"eval": "s3://dfm-test/eval/"},
                                 "hyperparameters": hyperparameters or {"log_steps": 10}})
    compiled = compile_spec(path, env={})
    assert compiled.ok, compiled.errors
    return build_tuning_plan(compiled.spec, compiled.plan, name="t-261124-000000")


# --- the search's pieces ---------------------------------------------------------------------------------
def test_reports_compare_trials_after_the_same_number_of_examples(tmp_path):
    """Unit = the largest batch (256) x log_steps (10): a 128-batch trial reports once per 20 steps."""
    tplan = tuning_plan(tmp_path)
    unit = search.report_unit(tplan, {"batch_size": 1024, "log_steps": 100})
    assert unit == 2560
    small = search.Reports("train:auc", 128, unit)
    line = "[dfm] train step={} loss=0.5 auc={} examples_per_sec=100"
    fed = [small.feed("algo-1/worker", ("train", {"auc": s / 100, "loss": 0.5}), line.format(s, s / 100))
           for s in (10, 20, 30, 40, 60)]
    assert fed == [[], [(1, 0.2)], [], [(2, 0.4)], [(3, 0.6)]]
    other = small.feed("algo-2/worker", ("train", {"auc": 0.9}), line.format(80, 0.9))
    assert other == []  # one process's lines count


def test_the_untuned_values_are_the_first_trial_only_when_inside_the_ranges(tmp_path):
    tplan = tuning_plan(tmp_path)
    assert search.baseline(tplan, {"learning_rate": 0.01, "batch_size": 256}) == {"learning_rate": 0.01, "batch_size": 256}
    assert search.baseline(tplan, {"learning_rate": 0.01, "batch_size": 1024}) is None
    assert search.baseline(tplan, {"learning_rate": 0.5, "batch_size": 256}) is None


@pytest.mark.parametrize("strategy, extra, sampler, pruner", [
    ("bayesian", {"early_stopping": "auto"}, "TPESampler", "MedianPruner"),
    ("random", {}, "RandomSampler", "NopPruner"),
    ("hyperband", {"hyperband": {"min_resource": 1, "max_resource": 9}}, "RandomSampler", "HyperbandPruner"),
    ("grid", {"ranges": {"batch_size": {"values": [128, 256]}, "optimizer": {"values": ["adam", "adagrad"]}},
              "max_jobs": None, "max_parallel_jobs": 1}, "GridSampler", "NopPruner"),
])
def test_each_strategy_maps_to_its_optuna_sampler_and_pruner(tmp_path, strategy, extra, sampler, pruner):
    tune = {**TUNE, "strategy": strategy, **extra}
    tune = {k: v for k, v in tune.items() if v is not None}
    tplan = tuning_plan(tmp_path, tune)
    assert type(search.sampler(tplan)).__name__ == sampler
    assert type(search.pruner(tplan)).__name__ == pruner
    if strategy == "grid":
        assert tplan.max_jobs == 4


# --- tiny real studies (slow) -----------------------------------------------------------------------------
SMALL_MODEL = {"field_size": 10, "feature_size": 1000, "deep_layers": [8], "log_steps": 5, "embedding_size": 4,
               "export": False}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample")
    result = dfm("data", "synth", "--out", str(out), "--rows", "3000", "--files", "2", "--eval-rows", "1000",
                 "--eval-files", "1", "--seed", "3", "--field-size", "10", "--feature-size", "1000", timeout=240)
    assert result.returncode == 0, result.stderr
    return out


def tiny_spec(tmp_path: Path, sample: Path, **tune) -> Path:
    spec = {
        "name": "tiny", "role": "arn:aws:iam::123456789012:role/dfm", "region": "us-east-1",
        "framework": {"version": "2.14", "python": "py310"}, "output": "s3://dfm-test/out/",
        "entry_point": "deepfm-ps", "instance": {"type": "ml.c5.2xlarge", "count": 1}, "checkpoints": False,
        "data": {"train": "s3://dfm-test/train/", "eval": "s3://dfm-test/eval/"}, "hyperparameters": SMALL_MODEL,
        "tune": {**TUNE, **tune},
        "local": {"channels": {"train": str(sample / "train"), "eval": str(sample / "eval")},
                  "run_dir": str(tmp_path / "runs"), "timeout_s": 200},
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
        config = json.loads((Path(t["job_dir"]) / "hosts" / "algo-1" / "input" / "config" / "hyperparameters.json").read_text())
        assert float(config["learning_rate"]) == pytest.approx(t["hyperparameters"]["learning_rate"])
        assert int(config["batch_size"]) == t["hyperparameters"]["batch_size"]
    best = max(trials, key=lambda t: t["objective"])
    assert document["best"]["trial"] == best["trial"]
    assert f"--set hyperparameters.learning_rate={best['hyperparameters']['learning_rate']!r}" in document["launch"]
    assert Path(document["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[dfm tune] 2/2 trials done" in result.stderr


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
    process = subprocess.Popen([sys.executable, "-m", "launcher.cli", "tune", str(spec), "--local", "--job-name", name],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
    assert "--resume" in rest
    time.sleep(0.5)
    assert _processes_under(runs) == []  # Ctrl-C left no process behind

    result = dfm("tune", str(spec), "--local", "--resume", "--output", "json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = json.loads(result.stdout)["trials"]
    assert [(t["trial"], t["state"], t["retry_of"]) for t in trials] == \
        [(0, "complete", None), (1, "interrupted", None), (2, "complete", 1)]
    assert trials[2]["hyperparameters"] == trials[1]["hyperparameters"]
    assert len({json.dumps(t["hyperparameters"], sort_keys=True) for t in trials if t["state"] == "complete"}) == 2
    assert sorted(os.listdir(runs / name)) == sorted(
        [f"{name}-000", f"{name}-001", f"{name}-002", f"{name}-000.txt", f"{name}-001.txt", f"{name}-002.txt",
         "study.journal", "tuning.json", "study.png", "study.json"])
