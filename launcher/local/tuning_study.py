"""`dfm tune SPEC --local`: the tuning job's search run on this machine, each trial a local run (runner.LocalRun)
of the spec with the trial's hyperparameters, in its own folder under <run_dir>/<tuning job>/.

Optuna (tune_search.py) proposes, prunes and records; every Optuna call is made from this thread, the trials
run in threads of their own and send their metric reports and their end here through a queue. The study is
stored in the tuning folder (Optuna's journal file), so `--resume` continues it: trials a Ctrl-C interrupted
are run again (once), finished ones never. A Ctrl-C stops every trial's processes before dfm exits.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from launcher.facts import contract
from launcher.errors import DfmError
from launcher.local import study_seed
from launcher.local import tune_search as search
from launcher.metric_lines import parse_metric_line
from launcher.local.local_request import build_request
from launcher.local.runner import LocalRun
from launcher.plans.tuning_plan import TuningPlan, changed_settings, fixed_settings

STUDY_FILE = "study.journal"
PLAN_FILE = "tuning.json"
INTERRUPTED = "interrupted"
MAX_RUNTIME = "max_runtime"  # the study's max_runtime_s ran out: running trials stop, none starts
MAX_RESOURCE = "max_resource"  # Hyperband: a trial that reached max_resource stops, its objective there
ELAPSED = "elapsed_s"  # the study's run time in earlier sessions (a user attribute of the study)


class TrialRun(LocalRun):
    """A local run that sends its metric reports to the tuning loop and can be stopped from it."""

    def __init__(self, request, number: int, events: queue.Queue, reports: search.Reports):
        self.lines: list[str] = []
        super().__init__(request, echo=self.lines.append)
        self.number, self.events, self.reports = number, events, reports

    def _on_line(self, label: str, line: str) -> None:
        self.take(label, line)
        for step, value in self.reports.feed(label, parse_metric_line(line), line):
            self.events.put(("report", self.number, step, value))

    def stop(self, reason: str) -> None:
        self._stop_reason = reason


def failure_reason(lines: list[str], code: int, reason: str, objective: str) -> str:
    """Why a trial failed: its scripts' last error line, else the run's reason, else the missing objective."""
    errors = [line.split("[dfm] error: ", 1)[1] for line in lines if "[dfm] error: " in line]
    if errors:
        return errors[-1]
    if code != 0:
        return reason or f"exit code {code}"
    return f"no {objective} line"


def counts_text(counts: dict[str, Any]) -> str:
    """`3/8 trials done (1 pruned, 1 failed), 2 running, best eval:auc=0.7012 (trial 2)`."""
    text = (
        f"{counts['done']}/{counts['max_jobs']} trials done ({counts['pruned']} pruned, {counts['failed']} failed), "
        f"{counts['running']} running"
    )
    if counts["best"] is not None:
        text += f", best {counts['objective']}={counts['best'][0]:.4f} (trial {counts['best'][1]})"
    return text


@dataclass
class Active:
    trial: Any  # optuna.Trial
    run: TrialRun
    thread: threading.Thread
    started: float
    hyperparameters: dict[str, Any]
    stop_reason: str | None = None
    value_at_stop: float | None = None


@dataclass
class LocalTuning:
    tplan: TuningPlan
    spec: Any
    run_dir: Path
    # (spec, the trial's values, job name, run dir) -> the trial's plan through the rules: compile.compile_trial
    plan_trial: Callable[[Any, dict, str, str], Any]
    echo: Callable[[str], None] = print
    status: Callable[[str], None] = lambda line: None  # the live progress line
    counts: Callable[[dict], None] = lambda counts: None  # the same as numbers (trial_counts), for a terminal's bar
    active: dict[int, Active] = field(default_factory=dict)
    events: "queue.Queue" = field(default_factory=queue.Queue)
    stopping: str | None = None
    clock: Callable[[], float] = time.monotonic
    seed_from: list[Path] = field(default_factory=list)  # parent study folders whose completed trials seed a new study

    @property
    def folder(self) -> Path:
        return self.run_dir / self.tplan.name

    # ---- the study ----
    def open_study(self, resume: bool):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        journal = self.folder / STUDY_FILE
        if resume and not journal.is_file():
            raise DfmError(f"no study to resume in {self.folder}: run without --resume first (or give its --job-name)")
        if not resume and self.folder.exists():
            raise DfmError(f"{self.folder} already exists: --resume continues it, --job-name picks another name")
        fixed = fixed_settings(self.tplan)
        if resume:
            self._refuse_changed(fixed)
        self.folder.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFileBackend(str(journal)))
        direction = "maximize" if self.tplan.maximize else "minimize"
        study = optuna.create_study(
            study_name=self.tplan.name,
            storage=storage,
            direction=direction,
            load_if_exists=resume,
            sampler=search.sampler(self.tplan),
            pruner=search.pruner(self.tplan),
        )
        if resume:
            study.sampler = search.sampler(self.tplan, trials_so_far=len(study.get_trials(deepcopy=False)))
        if not resume:
            (self.folder / PLAN_FILE).write_text(
                json.dumps({"spec": self.spec.path, "name": self.tplan.name, "fixed": fixed}, indent=1)
            )
            first = search.baseline(
                self.tplan, {**contract.bundled_hparams().DEFAULTS, **self.tplan.training.hyperparameters}
            )
            if first is not None and self.tplan.strategy != "Grid":
                study.enqueue_trial(first, user_attrs={"baseline": True})
            if self.seed_from:
                added, skipped = study_seed.seed(study, self.tplan, self.seed_from)
                left_out = f", {skipped} left out (outside this study's ranges)" if skipped else ""
                self.echo(
                    f"[dfm tune] warm start: {added} trial(s) of {len(self.seed_from)} parent study(ies){left_out}"
                )
        self._requeue_interrupted(study)
        return study

    def _refuse_changed(self, fixed: dict[str, Any]) -> None:
        stored = json.loads((self.folder / PLAN_FILE).read_text()).get("fixed")
        changed = changed_settings(stored, fixed) if stored is not None else []
        if changed:
            raise DfmError(
                f"--resume: {self.tplan.name}'s trials ran with other fixed settings ({'; '.join(changed)}): "
                f"resume with the settings it began with, or drop --resume to start a new study"
            )

    @staticmethod
    def _requeue_interrupted(study) -> None:
        """Trials a Ctrl-C stopped (or a killed dfm left running) run again, each once, with the same values."""
        import optuna

        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, True)
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        trials = study.get_trials(deepcopy=False)
        retried = {t.user_attrs.get("retry_of") for t in trials}
        for trial in trials:
            if trial.user_attrs.get(INTERRUPTED) and trial.number not in retried:
                study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})

    @staticmethod
    def counted(study) -> list:
        """The trials that count towards max_jobs: finished ones, not those a Ctrl-C interrupted."""
        import optuna

        done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
        return [
            t
            for t in study.get_trials(deepcopy=False, states=done)
            if not t.user_attrs.get(INTERRUPTED) and study_seed.PARENT not in t.user_attrs
        ]

    def _completion_met(self, study) -> bool:
        import optuna

        complete = [t for t in self.counted(study) if t.state == optuna.trial.TrialState.COMPLETE]
        if not complete:
            return False
        values = [t.value for t in complete]
        best = max(values) if self.tplan.maximize else min(values)
        if self.tplan.target is not None and (
            best >= self.tplan.target if self.tplan.maximize else best <= self.tplan.target
        ):
            return True
        patience = self.tplan.no_improvement_jobs
        if patience is not None and len(values) > patience:
            before = values[:-patience]
            earlier = max(before) if self.tplan.maximize else min(before)
            return earlier == best
        return False

    # ---- trials ----
    def _start(self, study) -> None:
        trial = study.ask()
        values = search.suggest(trial, self.tplan)
        try:
            plan = self.plan_trial(self.spec, values, f"{self.tplan.name}-{trial.number:03d}", str(self.folder))
        except DfmError as refused:  # the rules refuse this trial's values, as dfm validate would: it fails alone
            import optuna

            self.echo(f"[dfm tune] {refused.message}")
            trial.set_user_attr("failure", refused.message)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        request = build_request(plan)
        defaults = contract.bundled_hparams().DEFAULTS
        batch = int(plan.hyperparameters.get("batch_size", defaults["batch_size"]))
        metric, unit = search.report_plan(self.tplan, defaults)
        reports = search.Reports(metric, batch, unit)
        run = TrialRun(request, trial.number, self.events, reports)
        thread = threading.Thread(target=self._trial_thread, args=(run,), name=f"trial-{trial.number}", daemon=True)
        trial.set_user_attr("job_dir", str(request.job_dir))
        self.active[trial.number] = Active(trial, run, thread, self.clock(), values)
        thread.start()

    def _trial_thread(self, run: TrialRun) -> None:
        try:
            result = run.run()
            code, reason = result.exit_code, result.reason
        except DfmError as err:  # a trial that cannot start fails alone; the study goes on
            code, reason = 1, err.message
        except Exception as err:
            code, reason = 1, f"{type(err).__name__}: {err}"
        self.events.put(("done", run.number, code, reason))

    def _objective(self, run: TrialRun) -> float | None:
        kind, _, name = self.tplan.objective_metric.partition(":")
        if kind == "eval":
            return (run.progress.eval or {}).get(name)
        values = [v.get(name) for v in run.progress.train.values() if name in v]
        return values[0] if values else None

    def _finish(self, study, number: int, code: int, reason: str) -> None:
        import optuna

        State = optuna.trial.TrialState
        active = self.active.pop(number)
        active.thread.join()
        trial = active.trial
        trial.set_user_attr("seconds", round(self.clock() - active.started, 1))
        (Path(active.run.request.job_dir).parent / f"{active.run.request.job_name}.txt").write_text(
            "\n".join(active.run.lines) + "\n"
        )
        objective = self._objective(active.run)
        if active.stop_reason == "pruned":
            study.tell(trial, state=State.PRUNED)
        elif active.stop_reason == MAX_RESOURCE:
            trial.set_user_attr("stopped", f"reached max_resource {self.tplan.hyperband[1]}")
            study.tell(trial, active.value_at_stop)
        elif active.stop_reason == MAX_RUNTIME:
            trial.set_user_attr("stopped", f"the study's max_runtime_s ({self.tplan.max_runtime_s} s) ran out")
            study.tell(trial, state=State.FAIL)
        elif active.stop_reason == INTERRUPTED or (self.stopping == INTERRUPTED and code != 0):
            trial.set_user_attr(INTERRUPTED, True)
            study.tell(trial, state=State.FAIL)
        elif code == 0 and objective is not None:
            study.tell(trial, objective)
        else:
            trial.set_user_attr("failure", failure_reason(active.run.lines, code, reason, self.tplan.objective_metric))
            study.tell(trial, state=State.FAIL)

    def _report(self, number: int, step: int, value: float) -> None:
        active = self.active.get(number)
        if active is None or active.stop_reason:
            return
        active.trial.report(value, step)
        if active.trial.should_prune():
            active.stop_reason = "pruned"
            active.run.stop("pruned")
        elif (
            self.tplan.hyperband is not None
            and step >= self.tplan.hyperband[1]
            and active.run.reports.kind == self.tplan.objective_metric.partition(":")[0]
        ):
            active.stop_reason, active.value_at_stop = MAX_RESOURCE, value  # SageMaker stops it there too
            active.run.stop(MAX_RESOURCE)

    def stop_all(self, reason: str) -> None:
        self.stopping = reason
        for active in self.active.values():
            active.stop_reason = active.stop_reason or reason
            active.run.stop(reason)

    def trial_counts(self, study) -> dict[str, Any]:
        """Trials done (of max_jobs), pruned, failed and running, and the best so far: what the progress shows."""
        import optuna

        State = optuna.trial.TrialState
        counted = self.counted(study)
        complete = [t for t in counted if t.state == State.COMPLETE]
        best = max(complete, key=lambda t: t.value if self.tplan.maximize else -t.value) if complete else None
        return {
            "done": len(counted),
            "max_jobs": self.tplan.max_jobs,
            "pruned": sum(1 for t in counted if t.state == State.PRUNED),
            "failed": sum(1 for t in counted if t.state == State.FAIL),
            "running": len(self.active),
            "objective": self.tplan.objective_metric,
            "best": (best.value, best.number) if best is not None else None,
        }

    def _line(self, study) -> str:
        counts = self.trial_counts(study)
        self.counts(counts)
        return "[dfm tune] " + counts_text(counts)

    def _out_of_time(self, study, session_start: float) -> bool:
        if self.tplan.max_runtime_s is None:
            return False
        return study.user_attrs.get(ELAPSED, 0.0) + self.clock() - session_start >= self.tplan.max_runtime_s

    def run(self, *, resume: bool = False):
        study = self.open_study(resume)
        session_start = self.clock()
        previous = {}
        if threading.current_thread() is threading.main_thread():

            def on_signal(signum, _frame):
                self.stop_all(INTERRUPTED)

            previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                if not self.stopping and self._out_of_time(study, session_start):
                    self.echo(
                        f"[dfm tune] max_runtime_s ({self.tplan.max_runtime_s} s) ran out: "
                        f"{len(self.active)} running trial(s) stopped, no more started"
                    )
                    self.stop_all(MAX_RUNTIME)
                enough = len(self.counted(study)) + len(self.active) >= self.tplan.max_jobs
                while (
                    not self.stopping
                    and not enough
                    and len(self.active) < self.tplan.max_parallel_jobs
                    and not self._completion_met(study)
                ):
                    self._start(study)
                    self.echo(
                        f"[dfm tune] trial {max(self.active)} started: "
                        f"{json.dumps(self.active[max(self.active)].hyperparameters)}"
                    )
                    enough = len(self.counted(study)) + len(self.active) >= self.tplan.max_jobs
                if self.stopping:  # a signal that came while a trial was being started reaches it too
                    self.stop_all(self.stopping)
                if not self.active:
                    break
                try:
                    event = self.events.get(timeout=0.5)
                except queue.Empty:
                    self.status(self._line(study))
                    continue
                if event[0] == "report":
                    self._report(*event[1:])
                else:
                    self._finish(study, *event[1:])
                    self.status(self._line(study))
        finally:
            if self.active:  # an error in this loop: no trial outlives it
                self.stop_all(INTERRUPTED)
                for active in self.active.values():
                    active.thread.join()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            study.set_user_attr(ELAPSED, round(study.user_attrs.get(ELAPSED, 0.0) + self.clock() - session_start, 1))
        return study
