"""The logistic-regression baseline the bundled scripts train beside DeepFM (deepfm_baseline): its own weights and
optimizer on the same batches, its AUC on the eval line the launcher's regexes read, checkpointed with the model
(an old checkpoint without it still resumes), never exported."""

import re

import numpy as np
import pytest

import entry_support  # noqa: F401  (the entry points on sys.path)
import deepfm_log
from test_entry_model import random_batch, small_hp

tf = pytest.importorskip("tensorflow")
import deepfm_checkpoint as C  # noqa: E402
import deepfm_metrics as DM  # noqa: E402
import deepfm_training as T  # noqa: E402

pytestmark = pytest.mark.runtimes


def test_the_eval_line_carries_baseline_auc_and_the_metric_definitions_read_it():
    from launcher.facts.conventions import METRIC_DEFINITIONS

    line = deepfm_log.format_metric("eval", 300, 0.45, 0.7441, baseline_auc=0.7453)
    assert line == "[dfm] eval step=300 loss=0.450000 auc=0.744100 baseline_auc=0.745300"
    found = {d["Name"]: float(m.group(1)) for d in METRIC_DEFINITIONS if (m := re.search(d["Regex"], line))}
    assert found == {"eval:loss": 0.45, "eval:auc": 0.7441, "eval:baseline_auc": 0.7453}
    plain = deepfm_log.format_metric("eval", 300, 0.45, 0.7441)
    assert not any(d["Name"] == "eval:baseline_auc" and re.search(d["Regex"], plain) for d in METRIC_DEFINITIONS)


def test_the_baseline_trains_on_its_own_weights_and_leaves_the_models_steps_as_they_were():
    hp_on, hp_off = small_hp(dropout=0, baseline="true"), small_hp(dropout=0)
    on, off = T.build_trainer(hp_on), T.build_trainer(hp_off)
    assert off.baseline is None and off.baseline_metrics is None
    assert on.baseline.optimizer is not on.optimizer and on.baseline.optimizer.kind == "adam"
    for trainer in (on, off):
        step = tf.function(trainer.train_step)
        for seed in range(5):
            step(random_batch(hp_on, seed=seed))
    for a, b in zip(on.model.all_variables, off.model.all_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert int(on.baseline.optimizer.iterations.numpy()) == 5
    assert float(tf.reduce_sum(tf.abs(on.baseline.weights))) > 0 and float(on.baseline.bias.numpy()) != 0


def test_an_evaluation_reports_the_baselines_auc_of_its_own_predictions(capsys):
    hp = small_hp(baseline="true")
    trainer = T.build_trainer(hp)
    step = tf.function(trainer.train_step)
    for seed in range(10):
        step(random_batch(hp, seed=seed))
    features, labels = random_batch(hp, rows=512, seed=42)
    DM.evaluate(trainer, [(features, labels)], 10)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    logits, _ = trainer.baseline.logits(features["ids"], features["values"])
    metrics = DM.StreamingMetrics()
    metrics.update(labels, tf.sigmoid(logits), tf.zeros_like(logits))
    expected = metrics.result()[1]
    assert re.search(r"baseline_auc=([0-9.]+)", line).group(1) == f"{expected:.6f}"
    DM.evaluate(small_trainer := T.build_trainer(small_hp()), [(features, labels)], 10)
    assert small_trainer.baseline is None and "baseline_auc" not in capsys.readouterr().out


def test_the_baseline_is_not_in_the_exported_saved_model(tmp_path):
    hp = small_hp(baseline="true")
    trainer = T.build_trainer(hp)
    tf.function(trainer.train_step)(random_batch(hp))
    without = T.build_trainer(small_hp(baseline="false"))
    keys = [
        {key for key, _ in tf.train.list_variables(f"{path}/variables/variables") if "VARIABLE_VALUE" in key}
        for path in (
            C.export_saved_model(trainer.model, hp, str(tmp_path / "on"), version=1),
            C.export_saved_model(without.model, hp, str(tmp_path / "off"), version=1),
        )
    ]
    assert keys[0] == keys[1] and not any("baseline" in key for key in keys[0])


def test_a_resume_keeps_the_baseline_and_an_old_checkpoint_without_it_still_resumes(tmp_path, capsys):
    hp = small_hp(baseline="true")
    first = T.build_trainer(hp)
    step = tf.function(first.train_step)
    for seed in range(3):
        step(random_batch(hp, seed=seed))
    C.CheckpointKeeper(first, str(tmp_path / "with"), 10).maybe_save(3, force=True)
    again = T.build_trainer(hp)
    assert C.CheckpointKeeper(again, str(tmp_path / "with"), 10).restore_latest() == 3
    np.testing.assert_array_equal(again.baseline.weights.numpy(), first.baseline.weights.numpy())
    np.testing.assert_array_equal(
        again.baseline.optimizer.slots[0]["v"].numpy(), first.baseline.optimizer.slots[0]["v"].numpy()
    )
    assert "holds no logistic regression" not in capsys.readouterr().out

    old = T.build_trainer(small_hp(baseline="false"))  # a checkpoint written before the baseline, or with it off
    tf.function(old.train_step)(random_batch(hp))
    C.CheckpointKeeper(old, str(tmp_path / "old"), 10).maybe_save(1, force=True)
    resumed = T.build_trainer(hp)
    assert C.CheckpointKeeper(resumed, str(tmp_path / "old"), 10).restore_latest() == 1
    np.testing.assert_array_equal(resumed.model.embeddings.numpy(), old.model.embeddings.numpy())
    assert not resumed.baseline.weights.numpy().any()
    out = capsys.readouterr().out
    assert "holds no logistic regression; it trains from zero from step 1" in out
    # and a checkpoint with the baseline restores into a run with it off
    off = T.build_trainer(small_hp(baseline="false"))
    assert C.CheckpointKeeper(off, str(tmp_path / "with"), 10).restore_latest() == 3
