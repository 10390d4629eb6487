"""A planted overfit for the model-selection tests (best_of, early stopping) of every distribution.

2,000 training rows over a 5,000-id vocabulary, a wide MLP, Adam at 0.05 and no regularization: the model
learns the teacher's signal in the first epochs and then memorizes the training rows, so the eval AUC
peaks early (epoch 2 on one host: 0.709) and falls every epoch after (0.689 at epoch 3, 0.659 at epoch 6),
far beyond the noise of shuffling or of summation order across workers. (At 0.02, two MWMS workers, which
take half the steps per epoch, declined by only 0.003 in two epochs on TF 2.21.) The best evaluation is therefore never
the
last one, and a run with patience P stops P evaluations after it.
"""

import numpy as np
import tensorflow as tf

import entry_support as es

HPS = {
    "field_size": 10,
    "feature_size": 5000,
    "deep_layers": [64, 64],
    "batch_size": 128,
    "optimizer": "adam",
    "learning_rate": 0.05,
    "l2_reg": 0.0,
    "l2_dense": 0.0,
    "dropout": 0.0,
    "epochs": 6,
    "log_steps": 1000,
    "checkpoint_steps": 1000,
    "shuffle_buffer": 500,
    "scale_lr": False,
    "best_of": "eval:auc",
    "early_stopping_patience": 2,
}


def planted_overfit(rows=2000, eval_rows=1000):
    """-> (train, eval) SynthData of the overfit."""
    return es.synth_split(rows, eval_rows, seed=3, feature_size=HPS["feature_size"], field_size=HPS["field_size"])


def exported_auc(export_dir, evaluation):
    """Exact ROC AUC of the SavedModel in export_dir (its one version) on the eval rows."""
    from launcher.data.synth import roc_auc

    (version,) = list(export_dir.iterdir())
    serve = tf.saved_model.load(str(version)).signatures["serving_default"]
    probs = serve(feat_ids=tf.constant(evaluation.ids, tf.int64), feat_vals=tf.constant(evaluation.values, tf.float32))[
        "probabilities"
    ].numpy()
    return roc_auc(evaluation.labels, probs)


def every(eval_steps):
    """HPS evaluating every `eval_steps` steps instead of after every epoch."""
    return dict(HPS, eval_steps=eval_steps)


def assert_best_kept_and_stopped_early(log, export_dir, evaluation, hps=HPS):
    """The run evaluated every epoch (or every eval_steps steps, when hps sets it), stopped `patience`
    evaluations after its best and before its last epoch ended, repeated the best evaluation's line last,
    and exported the model of the best evaluation, not the last."""
    *evaluations, repeated = es.metric_lines(log, "eval")
    aucs = [row["auc"] for row in evaluations]
    best = int(np.argmax(aucs))
    patience = hps["early_stopping_patience"]
    assert len(evaluations) == best + 1 + patience, aucs
    every = hps.get("eval_steps")
    if every:
        steps = [int(row["step"]) for row in evaluations]
        assert steps == list(range(every, every * (len(steps) + 1), every)), steps
    else:
        assert len(evaluations) < hps["epochs"], aucs
        assert log.count(" done at step ") == len(evaluations)  # one evaluation per epoch
    assert log.count("early stopping at step") == 1 and f"{hps['epochs']}/{hps['epochs']} done" not in log
    assert repeated == evaluations[best]
    assert f"exporting the model of step {int(evaluations[best]['step'])}" in log
    auc = exported_auc(export_dir, evaluation)
    # the exported model is the best evaluation's, and the last evaluation was worse (by how much varies under
    # asynchronous ps updates: a fixed margin failed there by chance)
    assert abs(auc - aucs[best]) < 0.003 and aucs[best] > aucs[-1] and abs(auc - aucs[-1]) > abs(auc - aucs[best]), (
        auc,
        aucs,
    )
