"""A local study's warm start (`dfm tune --local --warm-start-from STUDY_FOLDER`, or `tune.warm_start.parents` found
under the run dir): the parent studies' completed trials added to the new study before its first trial, so its
sampler starts from what they learned. Only trials whose every value lies in this study's ranges are added; they do
not count towards max_jobs (SageMaker's parents do not either)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.errors import DfmError
from launcher.local import tune_search as search
from launcher.plans.tuning_plan import TuningPlan

STUDY_FILE = "study.journal"  # tuning_study.STUDY_FILE
PARENT = "warm_start_parent"  # the user attribute naming a seeded trial's parent study


def parent_trials(folder: Path) -> list:
    """The completed trials of the study stored in `folder`; DfmError (exit 2) when it holds none."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = folder / STUDY_FILE
    if not journal.is_file():
        raise DfmError(f"--warm-start-from: {folder} is not a local study's folder (no {STUDY_FILE})", 2)
    storage = JournalStorage(JournalFileBackend(str(journal)))
    trials = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials += study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [t for t in trials if PARENT not in t.user_attrs]  # its own trials, not what seeded it


def fitting(trial, found: dict[str, Any]) -> bool:
    """The trial set every range of this study, each value inside it."""
    if set(trial.params) != set(found):
        return False
    return all(found[name]._contains(found[name].to_internal_repr(value)) for name, value in trial.params.items())


def seed(study, tplan: TuningPlan, folders: list[Path]) -> tuple[int, int]:
    """Add the parents' completed trials that fit this study's ranges; -> (added, left out)."""
    import optuna

    found = search.distributions(tplan)
    added = skipped = 0
    for folder in folders:
        for trial in parent_trials(folder):
            if not fitting(trial, found):
                skipped += 1
                continue
            study.add_trial(
                optuna.trial.create_trial(
                    params=dict(trial.params),
                    distributions={name: found[name] for name in trial.params},
                    value=trial.value,
                    user_attrs={PARENT: str(folder), "parent_trial": trial.number},
                )
            )
            added += 1
    return added, skipped
