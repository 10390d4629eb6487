"""The training loop of every distribution, in the manner of TF Model Garden's orbit controller: the loop
drives, a distribution steps.

The loop owns what every run does alike: resume (restore the latest checkpoint, skip the steps the current
epoch already trained on), epochs, the windows of steps between the hosts' work (a train line every
`log_steps`, a checkpoint every `checkpoint_steps`, an evaluation every `eval_steps` or after each epoch,
`max_steps`), model selection and early stopping, the last train line, the bad-row counts, the stops (no
step trained, nothing left to train after a finished run, divergence, bad input data), the final checkpoint
and evaluation, the export, the warning when the final model is no better than chance, and the record of the
finished run.

A distribution (`Distribution`: deepfm_sync's `SyncSteps`, deepfm_coordinator's `CoordinatorSteps`) says
only how it builds an epoch's input, how it runs up to N steps of it (how many ran, whether the data
ended), how it evaluates and what bad rows it counted.

A train line is printed when the steps since the last one cross a multiple of `log_steps`. In a synchronous run
the line is a collective every worker calls at the same step, so windows end at every log, checkpoint and
evaluation step and at the end of the data; a window may train fewer steps than it asked for, so a line is due
whenever a boundary lies in the steps just trained, wherever the window ended. A distribution whose lines need no
window end (`lines_end_windows` False: the parameter-server chief, whose windows end with a wait for every
worker) reports the step reached while its window runs, and the loop prints a line at the step reached whenever
a multiple was crossed: its windows end only at checkpoints, evaluations, max_steps and the end of the data.
"""

import time

import deepfm_warm_start as warm_start
from deepfm_checkpoint import export_saved_model, nothing_left, stop_diverged, stop_untrained
from deepfm_collectives import SingleProcess
from deepfm_data_errors import stop_bad_rows_past_bound, stop_on_input_error, stop_past_bad_row_bound
from deepfm_log import ProgressTicker, log, warn
from deepfm_resume import mark_finished


class Distribution:
    """What a distribution supplies to the loop. The defaults fit a run whose host is alone in its
    decisions (the parameter-server chief); a synchronous one overrides them with its workers'."""

    rank = 0  # this process's rank: rank 0 prints the run's lines and exports
    workers = 1  # the processes that train
    collectives = SingleProcess()  # what sums the train metrics and the stop vote over the workers
    longest_window = None  # the most steps one window may run (None: up to the next boundary)
    lines_end_windows = True  # a train line is due at a window's end (False: run_steps reports progress instead)
    epoch_end_words = ""  # what the line of a finished epoch says first

    def after_restore(self):
        """The restored state is on rank 0: share it with the other workers."""

    def epoch_input(self, epoch, skip_steps):
        """-> the input of `epoch`, without its first `skip_steps` steps (trained before a restart)."""
        raise NotImplementedError

    def run_steps(self, epoch_input, step, todo, progress=None):
        """Run up to `todo` steps of the epoch's input from global step `step`. -> (steps run, data ended).
        `progress(step reached)`: called while the window runs (only when lines_end_windows is False)."""
        raise NotImplementedError

    def evaluate(self, step):
        """Evaluate the model on `eval`. -> (loss, auc), the same on every worker."""
        raise NotImplementedError

    def bad_rows(self):
        """-> [(whose or None, count)] of the rows the raw-feature parser skipped."""
        return []

    def training_channels(self):
        """-> the training channels this process reads (named when a run stops on its data)."""
        raise NotImplementedError

    def untrained(self):
        """-> (where, why) the run trained no step, for its error line."""
        raise NotImplementedError


def evaluates_during_training(hp, env, rank):
    """Evaluate during training (every eval_steps steps, or after every epoch), unless `eval` arrives in
    Pipe mode (it is read once, at the end: each reading takes a FIFO of its own). Rank 0 says which."""
    import deepfm_input as di

    if env.input_mode(di.EVAL_CHANNEL).lower() == "pipe":
        if rank == 0:
            log("evaluating once, after training: the eval channel is in Pipe mode")
        return False
    return True


class TrainingLoop:
    """One run of `trainer` with `dist`: `run()` -> the global step reached. `keeper` (a CheckpointKeeper,
    None on the workers that do not save) restores and saves."""

    def __init__(self, hp, env, trainer, dist, keeper):
        import deepfm_input as di
        from deepfm_selection import ModelSelection

        self.hp, self.env, self.trainer, self.dist, self.keeper = hp, env, trainer, dist, keeper
        self.window = None  # the train line's window, from the start of training
        self.lined = None  # the step of the last train line (or of the start of training)
        self.selection = ModelSelection(hp, dist.rank, keeper)
        self.has_eval = di.EVAL_CHANNEL in env.channels
        self.during = self.has_eval and evaluates_during_training(hp, env, dist.rank)
        self.evaluated = []
        self.last_eval = None  # (step, auc) of the last evaluation

    def run(self):
        """Restore -> train -> final checkpoint -> final evaluation (unless the last one is at this step) ->
        export (rank 0) of the best evaluation's model (best_of)."""
        import tensorflow as tf
        from deepfm_metrics import BadRowsPastBound, Diverged

        if self.keeper is not None:
            self.keeper.restore_latest()
            if self.keeper.restored is None:  # a fresh start: from the warm-start source, when there is one
                warm_start.restore(self.hp, self.env, self.trainer)
        self.dist.after_restore()
        start = self.step()
        try:
            step = self.train()
            self.finish(start, step)
        except Diverged as err:
            stop_diverged(err, self.keeper)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
            stop_on_input_error(err, self.hp, self.env, self.dist.training_channels())
        except BadRowsPastBound as err:  # in an evaluation
            stop_bad_rows_past_bound(self.hp, self.env, self.dist.rank, [err.channel], err.bad, err.read)
        if self.dist.rank == 0 and self.hp.export:
            model = self.selection.model_to_export(self.trainer.model, step)
            export_saved_model(model, self.hp, self.env.model_dir, keeper=self.keeper)
        if self.dist.rank == 0:
            self.warn_if_chance(self.selection.exported_best)
        if self.keeper is not None:
            mark_finished(self.keeper.directory, step, self.env.job_name)
        return step

    def step(self):
        return int(self.trainer.optimizer.iterations.numpy())

    def train(self):
        """Epochs of windows until `epochs`, `max_steps` or early stopping. -> the step reached."""
        from deepfm_metrics import TrainWindow

        dist = self.dist
        self.window = TrainWindow(self.trainer.train_metrics, dist.collectives)
        if dist.rank != 0:
            return self.train_epochs()
        with ProgressTicker(self.step):  # rank 0's progress lines between the train lines
            return self.train_epochs()

    def train_epochs(self):
        from deepfm_hparams import crossed, steps_to_boundary

        hp, dist = self.hp, self.dist
        step = self.lined = self.step()
        progress = None if dist.lines_end_windows else self.line_while_training
        epoch, epoch_start = (int(v) for v in self.trainer.progress.numpy())
        stopped = False
        while (hp.epochs <= 0 or epoch < hp.epochs) and not stopped and not self.reached(step):
            epoch_input = dist.epoch_input(epoch, step - epoch_start)  # resume: its trained steps left out
            ended = False
            while not (ended or stopped or self.reached(step)):
                todo = steps_to_boundary(step, hp, dist.lines_end_windows)
                if dist.longest_window:
                    todo = min(todo, dist.longest_window)
                trained, ended = dist.run_steps(epoch_input, step, todo, progress)
                previous, step = step, step + trained
                self.line_if_due(step)
                if self.keeper is not None:
                    self.keeper.maybe_save(step)
                if self.during and crossed(previous, step, hp.eval_steps):
                    stopped = self.evaluate(step)
            if not ended or step == epoch_start:
                break  # max_steps or early stopping: the epoch stays unfinished; or the data holds no batch
            epoch, epoch_start = epoch + 1, step
            self.trainer.progress.assign([epoch, epoch_start])
            if dist.rank == 0:
                log(f"{dist.epoch_end_words}epoch {epoch}/{hp.epochs} done at step {step}")
            if self.during and not hp.eval_steps:
                stopped = self.evaluate(step)
        self.window.report(step)  # the last partial window (prints nothing when it is empty)
        return step

    def line_if_due(self, step, at=None):
        """A train line when the steps since the last line, up to `step`, crossed a multiple of log_steps: at
        `step`, or at what at() reads once the metrics are taken."""
        from deepfm_hparams import crossed

        if crossed(self.lined, step, self.hp.log_steps):
            printed = self.window.report(at or step)
            if printed is not None:  # else no example counted yet (no closure ended): the next look prints it
                self.lined = printed

    def line_while_training(self, step):
        """run_steps' progress: the step reached while the window runs. The line's step is read after its metrics
        are taken, so the examples it counts are of steps at or before it, and a window that runs on past the
        line has examples left for its end's line."""
        self.line_if_due(step, at=self.step)

    def reached(self, step):
        return bool(self.hp.max_steps and step >= self.hp.max_steps)

    def evaluate(self, step):
        """An evaluation, its time left out of the train window. -> whether training stops (rank 0 decides
        for every worker)."""
        from deepfm_selection import stop_together

        started = time.monotonic()
        loss, auc = self.dist.evaluate(step)
        self.evaluated.append(step)
        self.last_eval = (step, auc)
        stop = stop_together(self.dist.collectives, self.selection.observe(self.trainer.model, step, loss, auc))
        self.window.leave_out(started)
        return stop

    def warn_if_chance(self, exported_best):
        """A warning line when the final model (the best evaluation's when that is exported) scores an eval AUC no
        better than chance."""
        from deepfm_metrics import CHANCE_AUC, no_better_than_chance

        if exported_best:
            _, step, _, auc = self.selection.best
        else:
            step, auc = self.last_eval or (None, None)
        if step is not None and no_better_than_chance(auc):
            which = "exported" if self.hp.export else "final"
            warn(
                f"the {which} model is no better than chance: eval auc={auc:.4f} at step {step} (below "
                f"{CHANCE_AUC}; a model that learned nothing scores 0.5): check the labels, the features and "
                "learning_rate before using it"
            )

    def finish(self, start, step):
        """Bad-row counts; no step trained stops the run, and so does a restored finished run that trained no
        step on; final checkpoint and evaluation."""
        from deepfm_selection import stop_together

        dist = self.dist
        if step == start and step > 0:
            line = nothing_left(self.keeper, step, self.env.job_name)  # rank 0 keeps the checkpoints and decides
            if stop_together(dist.collectives, line is not None):
                if line:
                    log(line)
                raise SystemExit(1)
        for whose, count in dist.bad_rows() if self.hp.features else []:
            log(f"bad rows skipped: {count}" + (f" ({whose})" if whose else ""))
        stop_past_bad_row_bound(self.hp, self.env, dist, self.window.rows)
        if dist.rank == 0:
            log(f"trained steps {start}..{step} on {dist.workers} workers")
        if step == 0:
            stop_untrained(",".join(dist.training_channels()), *dist.untrained())
        if self.keeper is not None:
            self.keeper.maybe_save(step, force=True)
        if self.has_eval and (not self.evaluated or self.evaluated[-1] != step):
            self.evaluate(step)
