"""What a tuning job's trials share or go without, against what `dfm launch` gives a training job: one group
of identical hosts, one checkpoint location, no TensorBoard, MLflow or watching by dfm.
"""

from __future__ import annotations

from launcher.facts import contract
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec


def check_tune_cluster(spec: Spec) -> list[Finding]:
    if spec.tune is None or spec.ps_group is None:
        return []
    return [
        error(
            "distribution.parameter_server.ps",
            "a tuning job's trials run on one group of identical hosts (the tuning "
            "API's resource config has no instance groups): tune with "
            "`distribution: parameter_server` (a ps on every host) on fewer, "
            "smaller hosts, then launch the best hyperparameters on this cluster",
        )
    ]


def check_tune_checkpoints(spec: Spec) -> list[Finding]:
    """A tuning job has one checkpoint location for all its trials (one CheckpointConfig, one static
    checkpoint_dir). The bundled scripts keep each trial's checkpoints in a folder named after the trial
    (deepfm_checkpoint.checkpoint_dir); another script restores whatever it finds there."""
    tune = spec.tune
    if tune is None or spec.checkpoint_config is None or spec.entry_point in contract.BUNDLED_ENTRY_POINTS:
        return []
    return [
        warning(
            "checkpoints",
            f"every trial gets the same checkpoint location: unless {spec.entry_point} keeps "
            "each trial's checkpoints apart (under $TRAINING_JOB_NAME, as the bundled scripts "
            "do), a trial restores another's; or set checkpoints: false",
        )
    ]


def check_tune_dropped_settings(spec: Spec) -> list[Finding]:
    """A SageMaker tuning job's training definition has no TensorBoardOutputConfig nor MlflowConfig, and dfm
    watches no trial (recover:, stall_timeout): `dfm tune` would drop these without a word."""
    if spec.tune is None:
        return []
    dropped = {
        "tensorboard": (spec.tensorboard not in (None, False), "a tuning job's trials have no TensorBoardOutputConfig"),
        "mlflow": (spec.mlflow is not None, "a tuning job's trials have no MlflowConfig"),
        "recover": (spec.recover is not None, "dfm watches no trial of a tuning job, so none is resubmitted"),
        "stall_timeout": (
            spec.stall_timeout is not None,
            "dfm watches no trial of a tuning job, so none is stopped as stalled",
        ),
    }
    return [
        warning(field, f"{why}: dfm tune on SageMaker ignores {field} (dfm launch keeps it)")
        for field, (given, why) in dropped.items()
        if given
    ]
