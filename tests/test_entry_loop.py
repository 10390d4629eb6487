"""The one training loop (deepfm_loop.TrainingLoop) with a distribution faked in-process: windows, train lines,
epochs, resume, early stopping and the run's stops, whatever the distribution does inside its steps."""

import re
from types import SimpleNamespace

import pytest

import entry_support as es  # noqa: F401  puts entrypoints/ on sys.path
import deepfm_hparams
from deepfm_loop import Distribution, TrainingLoop


def hparams(*argv):
    return deepfm_hparams.parse_hyperparameters(["--export", "false", "--best_of", "last", *argv])


def container(channels=("train",)):
    return SimpleNamespace(channels=list(channels), input_mode=lambda channel: "File", model_dir="unused")


def fake_trainer(step=0, progress=(0, 0)):
    import tensorflow as tf
    from deepfm_metrics import StreamingMetrics

    return SimpleNamespace(
        optimizer=SimpleNamespace(iterations=tf.Variable(step, dtype=tf.int64)),
        progress=tf.Variable(list(progress), dtype=tf.int64),
        model=None,
        train_metrics=StreamingMetrics(name="train_metrics"),
    )


class Steps(Distribution):
    """`rows` batches per epoch; a window runs at most `short` steps (a parameter-server closure TensorFlow
    rejected: fewer steps than asked, the data not ended). Evaluations answer `losses` in turn."""

    def __init__(self, trainer, batches, short=None, losses=()):
        self.trainer, self.batches, self.short, self.losses = trainer, batches, short, list(losses)
        self.inputs, self.windows = [], []

    def epoch_input(self, epoch, skip_steps):
        self.inputs.append((epoch, skip_steps))
        return [self.batches - skip_steps]  # batches left in this epoch

    def run_steps(self, left, step, todo, progress=None):
        import tensorflow as tf

        ran = min(todo, left[0], self.short or todo)
        left[0] -= ran
        self.windows.append(todo)
        for _ in range(ran):
            self.trainer.optimizer.iterations.assign_add(1)
            self.trainer.train_metrics.update(tf.constant([1.0]), tf.constant([0.9]), tf.constant([0.1]))
        return ran, ran < todo and left[0] == 0

    def evaluate(self, step):
        return self.losses.pop(0), 0.5

    def training_channels(self):
        return ["train"]

    def untrained(self):
        return "algo-1", "the channel holds no rows"


def train_steps(out):
    return [int(s) for s in re.findall(r"\[dfm\] train step=(\d+)", out)]


def test_train_lines_fall_where_the_steps_cross_log_steps_however_short_the_windows(capsys):
    trainer = fake_trainer()
    steps = Steps(trainer, batches=10, short=3)
    assert TrainingLoop(hparams("--log_steps", "4", "--epochs", "2"), container(), trainer, steps, None).run() == 20
    out = capsys.readouterr().out
    assert train_steps(out) == [4, 8, 12, 16, 20]  # 20 ends the data and is the last window's line
    assert steps.windows[:3] == [4, 1, 4]  # a window ends at the next boundary: 3 run, then the 1 to step 4
    assert re.findall(r"epoch (\d)/2 done at step (\d+)", out) == [("1", "10"), ("2", "20")]
    assert "trained steps 0..20 on 1 workers" in out


class Running(Steps):
    """A parameter-server chief's steps: its train lines need no window end; while a window runs it reports the
    step reached after every `every` steps. From step `nan_at` on, the loss is NaN."""

    lines_end_windows = False

    def __init__(self, trainer, batches, every, nan_at=None):
        super().__init__(trainer, batches)
        self.every, self.nan_at = every, nan_at

    def run_steps(self, left, step, todo, progress=None):
        import tensorflow as tf

        self.windows.append(todo)
        ran = 0
        while ran < todo and left[0]:
            for _ in range(min(self.every, todo - ran, left[0])):
                ran, left[0] = ran + 1, left[0] - 1
                loss = float("nan") if self.nan_at is not None and step + ran >= self.nan_at else 0.1
                self.trainer.optimizer.iterations.assign_add(1)
                self.trainer.train_metrics.update(tf.constant([1.0]), tf.constant([0.9]), tf.constant([loss]))
            if ran < todo and left[0]:
                progress(step + ran)
        return ran, ran < todo and left[0] == 0


def test_a_distribution_whose_lines_need_no_window_end_gets_them_while_its_windows_run(capsys, monkeypatch):
    import deepfm_metrics
    from deepfm_coordinator import CoordinatorSteps
    from deepfm_sync import SyncSteps

    assert SyncSteps.lines_end_windows and not CoordinatorSteps.lines_end_windows  # Horovod, MWMS, one host: ends
    counted = []
    monkeypatch.setattr(deepfm_metrics, "record", lambda kind, step, **values: counted.append(values["examples"]))
    trainer = fake_trainer()
    steps = Running(trainer, batches=25, every=3)
    hp = hparams("--log_steps", "4", "--checkpoint_steps", "10", "--epochs", "1")
    assert TrainingLoop(hp, container(), trainer, steps, None).run() == 25
    assert steps.windows == [10, 10, 10]  # to each checkpoint (the data ends at 25), not to each multiple of 4
    # a line at the step reached once a multiple of 4 was crossed since the last, the window's end line when its
    # steps crossed one (20, and 25 where the data ended), every example counted once
    assert train_steps(capsys.readouterr().out) == [6, 9, 13, 16, 20, 25]
    assert counted == [6, 3, 4, 3, 4, 5]


def test_a_loss_that_diverges_mid_window_stops_the_run_at_the_next_line(capsys):
    trainer = fake_trainer()
    steps = Running(trainer, batches=100, every=3, nan_at=5)
    with pytest.raises(SystemExit):
        TrainingLoop(hparams("--log_steps", "4", "--checkpoint_steps", "50"), container(), trainer, steps, None).run()
    assert "error: training diverged at step 6: train loss=nan" in capsys.readouterr().out
    assert int(trainer.optimizer.iterations.numpy()) == 6  # inside its first window, which would have run to 50


def test_a_resumed_run_skips_what_its_epoch_trained_and_stops_at_max_steps(capsys):
    trainer = fake_trainer(step=13, progress=(1, 10))  # epoch 1 began at step 10
    steps = Steps(trainer, batches=10)
    hp = hparams("--log_steps", "5", "--epochs", "3", "--max_steps", "24")
    assert TrainingLoop(hp, container(), trainer, steps, None).run() == 24
    assert steps.inputs == [(1, 3), (2, 0)]
    assert train_steps(capsys.readouterr().out) == [15, 20, 24]
    assert [int(v) for v in trainer.progress.numpy()] == [2, 20]  # the unfinished epoch is not counted


def test_early_stopping_ends_training_and_the_final_evaluation_is_not_repeated():
    trainer = fake_trainer()
    steps = Steps(trainer, batches=4, losses=[0.5, 0.6, 0.7, 0.8])
    steps.rank = 1  # a worker that keeps no copy of the best model: it follows the collectives' vote
    hp = hparams("--epochs", "3", "--eval_steps", "2", "--best_of", "eval:loss", "--early_stopping_patience", "2")
    assert TrainingLoop(hp, container(["train", "eval"]), trainer, steps, None).run() == 6
    assert steps.losses == [0.8]  # evaluations at 2, 4, 6: the second without a better loss stops at step 6


def test_a_run_that_trains_no_step_stops_with_exit_1_naming_the_channel(capsys):
    trainer = fake_trainer()
    with pytest.raises(SystemExit) as stop:
        TrainingLoop(hparams(), container(), trainer, Steps(trainer, batches=0), None).run()
    assert stop.value.code == 1
    assert "error: no step trained: the channel holds no rows (channel 'train' on algo-1)" in capsys.readouterr().out


def test_a_diverged_loss_stops_the_run_before_any_export(capsys):
    import tensorflow as tf

    trainer = fake_trainer()
    steps = Steps(trainer, batches=10)
    trainer.train_metrics.update(tf.constant([1.0]), tf.constant([0.5]), tf.constant([float("nan")]))
    with pytest.raises(SystemExit):
        TrainingLoop(hparams("--log_steps", "5", "--export", "true"), container(), trainer, steps, None).run()
    out = capsys.readouterr().out
    assert "error: training diverged at step 5: train loss=nan" in out and "[dfm] exported" not in out


def test_a_bad_row_met_while_evaluating_is_its_own_line_wherever_the_loop_meets_it(capsys):
    import tensorflow as tf

    class BadEval(Steps):
        def evaluate(self, step):
            message = "Graph execution error:\nassertion failed: [bad row 3 of eval.csv]"
            raise tf.errors.InvalidArgumentError(None, None, message)

    trainer = fake_trainer()
    with pytest.raises(SystemExit) as stop:
        TrainingLoop(hparams(), container(["train", "eval"]), trainer, BadEval(trainer, batches=4), None).run()
    assert stop.value.code == 1
    assert capsys.readouterr().out.splitlines()[-1] == "[dfm] error: [bad row 3 of eval.csv]"


class Keeper:
    """A CheckpointKeeper's state as the loop and deepfm_checkpoint.nothing_left read it: `restored` at `step`."""

    def __init__(self, directory, step):
        self.directory, self.restored, self.last_saved = str(directory), f"{directory}/ckpt-{step}", step

    def restore_latest(self):
        return self.last_saved

    def maybe_save(self, step, force=False):
        return None


def finished_run(tmp_path, job, marked_by):
    """A loop restored at the end of a finished run (epoch 1 of 1 done at step 10), as job `job`; the run that
    wrote step 10 left the finished record as `marked_by` (None: it was interrupted before its export)."""
    from deepfm_resume import mark_finished

    if marked_by is not None:
        mark_finished(str(tmp_path), 10, marked_by)
    trainer = fake_trainer(step=10, progress=(1, 10))
    env = SimpleNamespace(**vars(container()), job_name=job)
    return TrainingLoop(hparams("--epochs", "1"), env, trainer, Steps(trainer, batches=10), Keeper(tmp_path, 10))


def test_a_new_job_on_a_finished_runs_checkpoint_that_trains_nothing_fails_saying_what_to_do(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        finished_run(tmp_path, "day-2", marked_by="day-1").run()
    assert stop.value.code == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "error:" in line]
    assert f"nothing left to train: ckpt-10 in {tmp_path} is where job day-1 finished, at step 10" in line
    assert "use a new checkpoint location" in line and "raise epochs or max_steps" in line
    assert "trained steps" not in out and "dfm-finished" not in out


@pytest.mark.parametrize(
    "job, marked_by",
    [
        ("day-1", "day-1"),  # a spot restart after the export: the same job
        ("day-1-r1", "day-1"),  # dfm's recovery resubmitted it
        ("day-2", None),  # restored the final checkpoint of a run interrupted before its export
    ],
)
def test_a_restart_of_a_finished_or_unexported_run_completes_and_records_its_end(tmp_path, job, marked_by, capsys):
    from deepfm_resume import finished_by

    assert finished_run(tmp_path, job, marked_by).run() == 10
    assert "trained steps 10..10 on 1 workers" in capsys.readouterr().out
    assert finished_by(str(tmp_path), 10) == job


def test_a_run_whose_window_loss_is_far_above_a_coin_toss_has_diverged_though_finite(capsys):
    import tensorflow as tf

    trainer = fake_trainer()
    steps = Steps(trainer, batches=10)
    trainer.train_metrics.update(tf.constant([1.0]), tf.constant([0.5]), tf.constant([6.9e13]))
    with pytest.raises(SystemExit) as stop:
        TrainingLoop(hparams("--log_steps", "5", "--export", "true"), container(), trainer, steps, None).run()
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert "error: training diverged at step 5: train loss=" in out and "is above 6.93 (10 x ln 2" in out
    assert "[dfm] exported" not in out and "trained steps" not in out


def test_a_healthy_loss_well_above_a_coin_toss_early_on_is_not_divergence(capsys):
    import tensorflow as tf

    trainer = fake_trainer()
    trainer.train_metrics.update(tf.constant([1.0]), tf.constant([0.5]), tf.constant([3.0]))  # a bad first window
    assert TrainingLoop(hparams("--log_steps", "5"), container(), trainer, Steps(trainer, batches=10), None).run() == 10
    assert train_steps(capsys.readouterr().out) == [5, 10]


@pytest.mark.parametrize("auc, warned", [(0.5, True), (0.5199, True), (0.52, False), (0.75, False)])
def test_a_final_model_no_better_than_chance_is_warned_about(auc, warned, capsys):
    class Evaluations(Steps):
        def evaluate(self, step):
            return 0.69, auc

    trainer = fake_trainer()
    TrainingLoop(hparams(), container(["train", "eval"]), trainer, Evaluations(trainer, batches=4), None).run()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[dfm] warning:")]
    assert len(lines) == warned
    if warned:
        assert f"the final model is no better than chance: eval auc={auc:.4f} at step 4 (below 0.52" in lines[0]


@pytest.mark.parametrize("aucs, warned", [([0.51, 0.50], "auc=0.5100 at step 2"), ([0.60, 0.50], None)])
def test_the_chance_warning_reads_the_exported_model_the_best_evaluations(tmp_path, aucs, warned, capsys):
    from deepfm_training import build_trainer

    class Evaluations(Steps):
        def evaluate(self, step):
            return 0.69, aucs.pop(0)

    hp = deepfm_hparams.parse_hyperparameters(
        ["--best_of", "eval:auc", "--eval_steps", "2", "--feature_size", "100", "--deep_layers", "8"]
    )
    trainer = build_trainer(hp)
    env = SimpleNamespace(**{**vars(container(["train", "eval"])), "model_dir": str(tmp_path)})
    TrainingLoop(hp, env, trainer, Evaluations(trainer, batches=4), None).run()
    out = capsys.readouterr().out
    assert "best_of eval:auc: exporting the model of step 2" in out and "[dfm] exported" in out
    lines = [line for line in out.splitlines() if line.startswith("[dfm] warning:")]
    assert lines == (
        [
            f"[dfm] warning: the exported model is no better than chance: eval {warned} (below 0.52; a model"
            " that learned nothing scores 0.5): check the labels, the features and learning_rate before"
            " using it"
        ]
        if warned
        else []
    )


@pytest.mark.runtimes
def test_rank_0_prints_progress_lines_inside_a_window_without_the_loop_waiting_for_them(monkeypatch, capsys):
    """A run shorter than one log window: a progress line at the start, then the step a thread read while the window
    was still running (the window waits for the line here, the hand-shake; the loop itself never does)."""
    import threading

    import deepfm_log

    seen, printed = threading.Event(), []
    emit = deepfm_log.emit

    def recording(line):
        emit(line)
        printed.append(line)
        if line == "[dfm] progress step=30":
            seen.set()

    monkeypatch.setattr(deepfm_log, "emit", recording)
    monkeypatch.setattr(deepfm_log, "PROGRESS_SECONDS", 0.01)

    class Halfway(Steps):
        def run_steps(self, left, step, todo, progress=None):
            ran, ended = super().run_steps([30], step, min(todo, 30))
            assert seen.wait(60), "no progress line while the window ran"
            rest, ended = super().run_steps([left[0] - 30], step + ran, todo - ran)
            left[0] = 0
            return ran + rest, True

    trainer = fake_trainer()
    assert TrainingLoop(hparams("--log_steps", "100"), container(), trainer, Halfway(trainer, 54), None).run() == 54
    printed = capsys.readouterr().out.splitlines()
    progress = [line for line in printed if line.startswith("[dfm] progress")]
    steps = [int(line.rsplit("=", 1)[1]) for line in progress]
    assert steps[0] == 0 and 30 in steps and steps == sorted(set(steps))  # each line a new step
    assert printed.index("[dfm] progress step=30") < next(
        i for i, line in enumerate(printed) if line.startswith("[dfm] train step=54")
    )
    assert not any(line.startswith("[dfm] train") for line in printed[: printed.index("[dfm] progress step=30")])


@pytest.mark.runtimes
def test_a_worker_rank_prints_no_progress_lines(capsys):
    trainer = fake_trainer()
    steps = Steps(trainer, batches=10)
    steps.rank = 1
    TrainingLoop(hparams("--log_steps", "4"), container(), trainer, steps, None).run()
    assert "[dfm] progress" not in capsys.readouterr().out
