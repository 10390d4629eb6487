"""Model selection during training: which evaluation is the best (`best_of`), the model of the best
evaluation to export instead of the last, and early stopping after `early_stopping_patience` evaluations
without improvement. The best model is kept as a checkpoint of its own (CheckpointKeeper.save_best) when the
tables are partitioned across ps tasks: no process gathers them; else as a copy of the model on rank 0's CPU
(replicated tables fit each replica already).

One object per run, on every worker of a synchronous run and on the parameter-server chief. Every
worker sees the same evaluation (its metrics are summed over the workers), but only rank 0 decides:
its decision reaches the others through one collective (`stop_together`), so all stop at the same
step and nobody waits on a collective the others have left. Only rank 0 keeps a copy of the model.

TensorFlow is imported inside the functions that need it.
"""

import math
import operator

from deepfm_log import emit, format_metric, log

LAST = "last"
METRICS = {"eval:auc": ("auc", operator.gt), "eval:loss": ("loss", operator.lt)}  # best_of -> (metric, better)


def monitored(hp):
    """-> (metric name, better) that best_of and early stopping follow, or None (best_of last)."""
    return METRICS.get(hp.best_of)


class ModelSelection:
    """Follows the evaluations of a run: keeps rank 0's best model and counts evaluations without improvement.
    `rank`: this worker's rank (0 decides and keeps the best model); `keeper`: its CheckpointKeeper, which keeps
    the best model of a partitioned one as a checkpoint."""

    def __init__(self, hp, rank=0, keeper=None):
        self.hp, self.rank, self.keeper = hp, rank, keeper
        self.checkpointed = False  # the best evaluation's model is keeper's best checkpoint
        self.metric = monitored(hp)
        self.patience = hp.early_stopping_patience
        self.best = None  # (value, step, loss, auc) of the best evaluation so far
        self.stale = 0  # evaluations since the best
        self.copy = None  # rank 0: unpartitioned model holding the best evaluation's values
        self.exported_best = False  # model_to_export chose the best evaluation's model over the last state

    def observe(self, model, step, loss, auc):
        """Record one evaluation of `model` at `step`. -> True when training should stop (rank 0's view)."""
        if self.metric is None or math.isnan(loss if self.metric[0] == "loss" else auc):
            return False
        name, better = self.metric
        value = loss if name == "loss" else auc
        if self.best is None or better(value, self.best[0]):
            self.best, self.stale = (value, step, loss, auc), 0
            if self.rank == 0:
                self.keep(model, step)
            return False
        self.stale += 1
        if self.patience and self.stale >= self.patience:
            if self.rank == 0:
                log(
                    f"early stopping at step {step}: {self.stale} evaluation(s) without a better "
                    f"{self.hp.best_of} than {self.best[0]:.6f} (step {self.best[1]})"
                )
            return True
        return False

    def keep(self, model, step):
        from deepfm_variables import partitioned

        if self.keeper is not None and partitioned(model):
            self.keeper.save_best(step)
            self.checkpointed = True
        else:
            self.copy = copy_model(model, self.hp, self.copy)

    def model_to_export(self, model, step):
        """The best evaluation's copy when it is not the last state, else `model`. Rank 0 states which,
        and repeats the chosen evaluation's metric line last, so the final value SageMaker and the tuner
        read is that of the exported model."""
        if (self.copy is None and not self.checkpointed) or self.best[1] == step and self.stale == 0:
            return model
        value, best_step, loss, auc = self.best
        self.exported_best = True
        log(f"best_of {self.hp.best_of}: exporting the model of step {best_step} ({value:.6f}), not of step {step}")
        emit(format_metric("eval", best_step, loss, auc))
        if self.checkpointed:  # training is over and its last state checkpointed: the model takes the best's values
            self.keeper.restore_best()
            return model
        return self.copy


def stop_together(collectives, stop):
    """Rank 0's decision, on every worker (one collective): all stop at the same step."""
    import numpy as np
    import tensorflow as tf

    vote = tf.constant([1.0 if stop and collectives.rank == 0 else 0.0], tf.float64)
    return bool(np.asarray(collectives.sum(vote)).reshape(-1)[0] > 0.5)


def copy_model(model, hp, into=None):
    """Copy the model's values into a plain, unpartitioned model on this process's CPU (`into`, or a new
    one): the model of an evaluation, kept while training goes on."""
    import tensorflow as tf
    from deepfm_model import build_model
    from deepfm_variables import full_value

    if into is None:
        with tf.distribute.get_strategy().scope(), tf.device("/cpu:0"):
            into = build_model(hp)
    for dst, src in zip(into.all_variables, model.all_variables):
        dst.assign(full_value(src))
    into.is_copy = True
    return into
