"""What a run leaves behind: checkpoints (resume after a spot interruption or a restart) and the
SavedModel export of the trained model.

TensorFlow is imported inside the functions that use it.
"""

import math
import os
import time

from deepfm_log import emit, error_line, format_exported, log


def checkpoint_dir(hp, env):
    """checkpoint_dir hyperparameter; else model_dir when it is a local/EFS path (not S3, not the
    model output dir); else $SAGEMAKER_BASE_DIR/checkpoints (synced to checkpoint_s3_uri). A tuning
    trial's goes one folder deeper, named after the trial: SageMaker gives every trial the same
    checkpoint location, and a trial must not restore another's (the TF toolkit does the same to
    model_dir)."""
    directory = _shared_checkpoint_dir(hp, env)
    if env.tuning_trial and env.job_name:
        return os.path.join(directory, env.job_name)
    return directory


def _shared_checkpoint_dir(hp, env):
    if hp.checkpoint_dir:
        return hp.checkpoint_dir
    model_dir = hp.model_dir
    if model_dir and "://" not in model_dir and os.path.abspath(model_dir) != os.path.abspath(env.model_dir):
        return model_dir
    return os.path.join(env.base_dir, "checkpoints")


def shared_by_every_host(directory, env):
    """Whether every host reaches `directory` at the same path: a channel's folder under input/data (checkpoints
    on EFS/FSx: the plan passes --checkpoint_dir /opt/ml/input/data/checkpoints/<job>)."""
    data = os.path.abspath(env.data_dir) + os.sep
    return os.path.abspath(directory).startswith(data)


class CheckpointKeeper:
    """tf.train.CheckpointManager around the trainer's model, optimizer (its `iterations` is the
    global step) and loss scale, and a second one in `<directory>/best` for the best evaluation of a run whose
    tables are partitioned (deepfm_selection keeps it instead of a copy of the model).

    io_device: the device that writes every file (the parameter-server chief's CPU), or None: each variable's
    own task writes it. Under parameter servers, `tasks_write` (the directory is on a file system every host
    mounts: shared_by_every_host) drops io_device, so each ps writes its own shards and no process holds
    another's; otherwise the chief writes them all, holding the ps tasks' shares (weights and optimizer slots)
    while it does (docs/big-tables.md)."""

    def __init__(self, trainer, directory, every_steps, io_device=None, max_to_keep=3, tasks_write=False):
        import tensorflow as tf

        self.model = trainer.model
        objects = {"model": trainer.model, "optimizer": trainer.optimizer, "progress": trainer.progress}
        if trainer.loss_scale is not None:
            objects["loss_scale"] = trainer.loss_scale
        if getattr(trainer, "baseline", None) is not None:
            objects["baseline"] = trainer.baseline
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.objects = objects
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=max_to_keep)
        self.best_manager = None
        self.io_device = None if tasks_write else io_device
        self.options = tf.train.CheckpointOptions(experimental_io_device=self.io_device)
        self.every_steps, self.directory = every_steps, directory
        self.tasks_write = tasks_write
        self.step_variable = trainer.optimizer.iterations
        self.trainer = trainer
        self.last_saved = None
        self.restored = None  # the path of the restored checkpoint

    def save_best(self, step):
        """Save the model of the evaluation at `step` as the best so far (the one checkpoint in <dir>/best)."""
        import tensorflow as tf

        if self.best_manager is None:
            best = os.path.join(self.directory, "best")
            self.best_manager = tf.train.CheckpointManager(self.checkpoint, best, max_to_keep=1)
        path = self.best_manager.save(checkpoint_number=step, options=self.options)
        log(f"best evaluation kept: checkpoint step={step} {path}")
        return path

    def restore_best(self):
        """Load the best evaluation's checkpoint into the model (after training: the last state is checkpointed)."""
        path = self.best_manager.latest_checkpoint
        self.checkpoint.restore(path, options=self.options).assert_existing_objects_matched()
        return path

    def restore_latest(self):
        """-> the restored global step (0 when there is no checkpoint). A checkpoint that does not fit this
        run (another optimizer, a variable of another shape) ends the run with one line naming the difference."""
        latest = self.manager.latest_checkpoint
        if latest is None:
            log(f"no checkpoint in {self.directory}: starting at step 0")
            return 0
        import tensorflow as tf
        from deepfm_resume import expected_shapes, mismatch

        where = f"checkpoint {os.path.basename(latest)} in {self.directory}"
        trainer = self.trainer
        saved = dict(tf.train.list_variables(latest))
        differs = mismatch(
            saved, expected_shapes(trainer.model, trainer.optimizer, trainer.loss_scale), trainer.optimizer.kind
        )
        no_baseline = "baseline" in self.objects and not any(key.startswith("baseline/") for key in saved)
        if differs is None:
            # a checkpoint without the baseline (written before it, or with it off): the rest restores, and it
            # trains from zero
            checkpoint = (
                tf.train.Checkpoint(**{k: v for k, v in self.objects.items() if k != "baseline"})
                if no_baseline
                else self.checkpoint
            )
            try:
                checkpoint.restore(latest, options=self.options).assert_existing_objects_matched()
            except (AssertionError, ValueError, tf.errors.OpError) as err:
                differs = f"does not fit this run: {error_line(err).split(' Showing ')[0]}"  # not the arrays
        if differs is not None:
            log(
                f"error: {where} {differs}; train with the settings it was written with, "
                "or from a new checkpoint location"
            )
            raise SystemExit(1)
        step = int(self.step_variable.numpy())
        if no_baseline:
            log(f"baseline: {where} holds no logistic regression; it trains from zero from step {step}")
        self.restored = latest
        self.last_saved = step
        log(f"restored {latest}: continuing at step {step}")
        return step

    def maybe_save(self, step, force=False):
        """Save when `every_steps` were crossed since the last save (or force); -> path or None."""
        last = self.last_saved or 0
        due = step // self.every_steps > last // self.every_steps
        if step == self.last_saved or not (force or due):
            return None
        from deepfm_metrics import check_finite
        from deepfm_variables import flat_variables

        check_finite(
            flat_variables(self.model.all_variables), step
        )  # a diverged model must not replace the last good checkpoint
        path = self.manager.save(checkpoint_number=step, options=self.options)
        self.last_saved = step
        log(f"checkpoint step={step} {path}")
        return path


def nothing_left(keeper, step, job):
    """-> the line of a run that restored the end of another job's finished run at `step` and trained no step
    on, or None (no such record: a restart of the same job, or one interrupted before its export)."""
    from deepfm_resume import finished_by, same_job

    if keeper is None or keeper.restored is None or keeper.last_saved != step:
        return None
    finished = finished_by(keeper.directory, step)
    if finished is None or same_job(finished, job):
        return None
    return (
        f"error: nothing left to train: {os.path.basename(keeper.restored)} in {keeper.directory} is where job "
        f"{finished or '(unnamed)'} finished, at step {step}, and this run trained no step on it; to train on "
        "new data from scratch use a new checkpoint location (spec checkpoints: auto gives each job its own), "
        "to go on from this model raise epochs or max_steps; no model exported"
    )


def stop_diverged(err, keeper):
    """End the run on a Diverged error: one line naming the step and the last good checkpoint, exit 1."""
    if keeper is not None and keeper.last_saved is not None:
        kept = f"the last good checkpoint, step {keeper.last_saved} in {keeper.directory}, is kept"
    else:
        kept = "no checkpoint was saved before it"
    log(f"error: {err}; {kept}; no model exported (lower learning_rate, or check the data)")
    raise SystemExit(1) from None


def stop_untrained(channel, host, why):
    """End a run that trained no step at all: nothing worth a checkpoint or an export."""
    log(f"error: no step trained: {why} (channel '{channel}' on {host}); no checkpoint saved, no model exported")
    raise SystemExit(1)


def calibrated_logit_shift(negative_rate):
    """Training kept only `negative_rate` (w) of the negatives, so the model's odds are 1/w too high: the
    calibrated probability p / (p + (1 - p) / w) is sigmoid(logit + log w)."""
    return math.log(negative_rate)


def serving_model(model, negative_rate):
    """The model whose `predict` serving calls: calibrated when training data was negative-downsampled."""
    if negative_rate >= 1.0:
        return model
    import tensorflow as tf

    class Calibrated(tf.Module):
        def __init__(self, deepfm):
            super().__init__(name="calibrated")
            self.deepfm = deepfm
            self.shift = tf.constant(calibrated_logit_shift(negative_rate), tf.float32)

        def predict(self, ids, values):
            logits, _ = self.deepfm(ids, values, training=False)
            return tf.sigmoid(tf.cast(logits, tf.float32) + self.shift)

    return Calibrated(model)


def export_saved_model(model, hp, model_dir, version=None, keeper=None):
    """Save the trained model to `<model_dir>/<version>/` with a `serving_default` signature: feat_ids
    int64[None, field_size], feat_vals float32[None, field_size] -> probabilities float32[None]; with raw features,
    the raw inputs by name (deepfm_raw.RawServing). With negative_rate < 1 the probabilities are calibrated.

    A model whose tables are partitioned is saved as it is, no copy: each shard is written as its slice of the
    table, and tf.saved_model.load makes the table whole again in the one process that serves it (the serving host
    needs its memory; no training process gathers it). The slices are written by the tasks that hold them when the
    checkpoint directory is shared by every host (keeper.tasks_write: the SavedModel is written there, then copied
    file by file into model_dir), else by the chief (keeper.io_device), which then receives them. Other models are
    copied into a plain, unpartitioned model on this CPU first (unless `model` is such a copy: deepfm_selection's
    best model), as a mirrored variable is not saved as it is."""
    import shutil

    import tensorflow as tf
    from deepfm_selection import copy_model
    from deepfm_variables import partitioned

    options, staging = None, None
    if partitioned(model):
        local = model
        if keeper is not None and keeper.tasks_write:
            staging = os.path.join(keeper.directory, "export-staging")
        elif keeper is not None:
            options = tf.saved_model.SaveOptions(experimental_io_device=keeper.io_device)
    else:
        local = model if getattr(model, "is_copy", False) else copy_model(model, hp)
    local = serving_model(local, getattr(hp, "negative_rate", 1.0))

    class Serving(tf.Module):
        def __init__(self, deepfm):
            super().__init__()
            self.deepfm = deepfm

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, hp.field_size], tf.int64, name="feat_ids"),
                tf.TensorSpec([None, hp.field_size], tf.float32, name="feat_vals"),
            ]
        )
        def serve(self, feat_ids, feat_vals):
            return {"probabilities": self.deepfm.predict(feat_ids, feat_vals)}

    version = str(version if version is not None else int(time.time()))
    path = os.path.join(model_dir, version)
    written = os.path.join(staging, version) if staging else path
    spec = getattr(hp, "feature_spec", None)
    if spec is not None:  # serving_default takes raw features by name; `indexed` the (ids, values) slots
        from deepfm_raw import RawServing

        RawServing(local, spec).save(written, options=options)
    else:
        module = Serving(local)
        tf.saved_model.save(module, written, signatures={"serving_default": module.serve}, options=options)
    if staging:
        shutil.copytree(written, path)  # file by file, in chunks
        shutil.rmtree(staging, ignore_errors=True)
    emit(format_exported(path))
    return path
