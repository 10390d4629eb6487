"""The logistic-regression baseline seen from a local run: baseline_auc on every eval line of the bundled scripts,
the summary's comparison and the second curve; `baseline: false` turns all of it off."""

from __future__ import annotations

import re

import pytest
from local_plans import assert_no_survivors
from test_local_e2e import WatchedRun, e2e_spec, sample  # noqa: F401  (sample: the module's data fixture)

from launcher.local import curves
from launcher.metric_lines import Progress, baseline_line


@pytest.mark.parametrize(
    "auc,baseline,verdict",
    [
        (0.7441, 0.7453, "the deep part adds nothing here"),
        (0.7473, 0.7453, "the deep part adds nothing here"),
        (0.7500, 0.7453, "the deep part adds 0.0047 AUC"),
        (0.7400, 0.7453, "the deep part is worse here: 0.0053 AUC below it"),
    ],
)
def test_the_summary_compares_the_final_evaluation_with_the_baseline(auc, baseline, verdict):
    progress = Progress()
    progress.feed("algo-1/master", f"[dfm] eval step=20 loss=0.45 auc={auc} baseline_auc={baseline}")
    assert progress.eval == {"loss": 0.45, "auc": auc, "baseline_auc": baseline}
    assert baseline_line(progress.eval) == (
        f"  DeepFM {auc:.4f}, logistic regression {baseline:.4f} on the same data: {verdict}"
    )
    assert baseline_line({"loss": 0.45, "auc": auc}) == "" and baseline_line(None) == ""


def test_the_curves_draw_the_baselines_eval_auc_beside_the_models():
    pytest.importorskip("matplotlib")
    history = [
        ("eval", {"step": 10.0, "loss": 0.6, "auc": 0.61, "baseline_auc": 0.6}),
        ("eval", {"step": 20.0, "loss": 0.5, "auc": 0.66, "baseline_auc": 0.64}),
    ]
    auc_axis = curves.draw(history, "job").axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in auc_axis.lines}
    assert lines["eval auc, logistic regression"] == [0.6, 0.64] and lines["eval auc"] == [0.61, 0.66]
    plain = curves.draw(
        [(kind, {k: v for k, v in values.items() if k != "baseline_auc"}) for kind, values in history], "j"
    )
    assert "eval auc, logistic regression" not in {line.get_label() for line in plain.axes[0].lines}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("baseline", [True, False])
def test_a_parameter_server_run_evaluates_the_baseline_at_each_evaluation_unless_it_is_off(tmp_path, sample, baseline):  # noqa: F811
    # the demo's layout: two hosts, Adagrad, local steps (the baseline's own local steps), an evaluation every 10 steps
    spec = e2e_spec(
        tmp_path,
        name=f"baseline-{str(baseline).lower()}",
        entry_point="deepfm-ps",
        distribution="parameter_server",
        sample=sample,
        hyperparameters={
            "max_steps": 20,
            "eval_steps": 10,
            "best_of": "last",
            "optimizer": "adagrad",
            "learning_rate": 0.3,
            "local_steps": 4,
            "baseline": baseline,
        },
    )
    run = WatchedRun("launch", str(spec), "--local")
    assert run.wait(timeout=560) == 0, run.output[-3000:]
    evals = re.findall(r"\[dfm\] eval step=(\d+) loss=\S+ auc=\S+(?: baseline_auc=([0-9.]+))?", run.output)
    assert [int(step) for step, _ in evals] == [10, 20]
    summary = re.search(r"DeepFM (\S+), logistic regression (\S+) on the same data: the deep part", run.output)
    if baseline:
        assert all(float(auc) > 0.55 for _, auc in evals), evals  # it learned something of the planted teacher
        assert summary and float(summary.group(2)) == pytest.approx(float(evals[-1][1]), abs=1e-4)
    else:
        assert all(auc == "" for _, auc in evals) and summary is None and "baseline_auc" not in run.output
    assert_no_survivors(run.processes)
