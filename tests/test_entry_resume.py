"""What a run may resume from (deepfm_resume): the checkpoint's optimizer and shapes against this run's, and the
record of a finished run, whose job a restart of the same job (or of dfm's recovery attempts) matches."""

import pytest

import entry_support as es  # noqa: F401  puts entrypoints/ on sys.path
from deepfm_resume import FINISHED, SLOTS, finished_by, mark_finished, mismatch, same_job

V = "/.ATTRIBUTES/VARIABLE_VALUE"


def keys(slots, embeddings=(1000, 8)):
    saved = {f"model/embeddings{V}": list(embeddings), f"model/kernels/0{V}": [312, 16], f"optimizer/iterations{V}": []}
    for index in range(2):
        saved.update({f"optimizer/slots/{index}/{name}{V}": [3] for name in slots})
    return saved


def test_a_checkpoint_of_another_optimizer_is_named_with_both_optimizers_and_their_slots():
    expected = {f"model/embeddings{V}": [1000, 8]}
    assert mismatch(keys(["accum"]), expected, "adam") == (
        "was written with optimizer adagrad (slots: accum), this run uses adam (slots: m, v)"
    )
    assert mismatch(keys([]), expected, "ftrl") == (
        "was written with optimizer sgd (no slots), this run uses ftrl (slots: accum, linear)"
    )
    assert mismatch(keys(["m", "v"]), expected, "adam") is None


def test_a_variable_of_another_shape_or_missing_is_named_with_both_shapes():
    expected = {f"model/embeddings{V}": [2000, 8], f"model/kernels/0{V}": [312, 16]}
    assert mismatch(keys(["accum"]), expected, "adagrad") == (
        "holds model/embeddings in shape [1000, 8], this run's is [2000, 8]"
    )
    with_scale = {f"model/kernels/0{V}": [312, 16], f"loss_scale/scale{V}": []}
    assert mismatch(keys(["accum"]), with_scale, "adagrad") == (
        "has no loss scale (float32 compute), this run computes in float16 (mixed_precision)"
    )
    assert mismatch(keys(["accum"]), {f"model/bn_params/0/gamma{V}": [8]}, "adagrad") is None  # stored elsewhere


def test_restarts_of_one_job_are_the_same_job_and_other_jobs_are_not():
    from launcher.plans.recovery import attempt_name

    first = "deepfm-ps-2026-11-28-22-00-00-123"
    long_first = "d" * 60 + "-x"  # cut by the recovery's 63 characters
    for name in (first, long_first):
        for attempt in (1, 2, 12):
            assert same_job(attempt_name(name, attempt), name) and same_job(name, attempt_name(name, attempt))
        assert same_job(attempt_name(name, 1), attempt_name(name, 3))
    assert same_job("", "")
    assert not same_job(first, "deepfm-ps-2026-11-29-09-00-00-456")
    assert not same_job(first, "")
    assert not same_job("deepfm", "deepfm-2")


def test_the_finished_record_names_its_step_and_job_and_is_replaced_whole(tmp_path):
    assert finished_by(str(tmp_path), 54) is None
    mark_finished(str(tmp_path), 54, "day-1")
    assert finished_by(str(tmp_path), 54) == "day-1" and finished_by(str(tmp_path), 55) is None
    mark_finished(str(tmp_path), 80, "day-2")
    assert finished_by(str(tmp_path), 80) == "day-2" and finished_by(str(tmp_path), 54) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [FINISHED]
    (tmp_path / FINISHED).write_text("{not json")
    assert finished_by(str(tmp_path), 80) is None


@pytest.mark.runtimes  # where tf.train.Checkpoint stores each variable is TensorFlow's choice
@pytest.mark.parametrize("kind", ["adam", "adagrad", "ftrl", "sgd"])
def test_each_optimizers_own_checkpoint_fits_it(kind, tmp_path):
    import tensorflow as tf

    import deepfm_hparams
    from deepfm_checkpoint import CheckpointKeeper
    from deepfm_resume import expected_shapes
    from deepfm_training import build_trainer

    hp = deepfm_hparams.parse_hyperparameters(
        ["--optimizer", kind, "--feature_size", "100", "--deep_layers", "8", "--batch_norm", "true"]
    )
    trainer = build_trainer(hp)
    path = CheckpointKeeper(trainer, str(tmp_path), 10).maybe_save(1, force=True)
    expected = expected_shapes(trainer.model, trainer.optimizer, trainer.loss_scale)
    saved = dict(tf.train.list_variables(path))
    compared = set(expected) & set(saved)  # every saved variable and slot is compared, under one of its paths
    assert compared == {key for key in saved if key.startswith(("model/", "optimizer/slots/"))}
    assert len(compared) == len(trainer.variables) + 2 + len(trainer.variables) * len(SLOTS[kind])  # + bn's moving
    assert mismatch(saved, expected, kind) is None
