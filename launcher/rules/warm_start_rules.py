"""The rules of a spec's `warm_start:`: which scripts restore it, a source that is also the job's own checkpoint
prefix (SageMaker would restore it and then overwrite it), a channel name it takes, and a step counter that may leave
nothing to train."""

from __future__ import annotations

from launcher.facts import contract
from launcher.facts import conventions
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec

WARM_CHANNELS = (conventions.WARM_START_CHANNEL, conventions.MODEL_CHANNEL)


def same_prefix(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def check_warm_start(spec: Spec) -> list[Finding]:
    start = spec.warm_start
    if start is None:
        return []
    problems: list[Finding] = []
    config = spec.checkpoint_config
    if config is not None and config.s3 not in (None, "auto") and same_prefix(config.s3, start.source):
        problems.append(
            error(
                "warm_start.from",
                f"{start.source} is also this job's checkpoints prefix: SageMaker would restore it and then overwrite "
                "it with this job's checkpoints; give checkpoints its own prefix (auto: <output>/<job>/checkpoints)",
            )
        )
    taken = [name for name in spec.data.channels if name in WARM_CHANNELS]
    if taken:
        problems.append(
            error(
                f"data.channels.{taken[0]}",
                f"the warm start brings its source as channel '{taken[0]}': name this channel otherwise",
            )
        )
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        problems.append(
            warning(
                "warm_start",
                f"{spec.entry_point} is your script: it gets the source as files only (a checkpoint in "
                f"/opt/ml/input/data/{conventions.WARM_START_CHANNEL}, a model.tar.gz in "
                f"/opt/ml/input/data/{conventions.MODEL_CHANNEL}) and no warm_start hyperparameters: restore it "
                "yourself, or use a bundled entry point (deepfm-ps, deepfm-horovod, deepfm-mirrored)",
            )
        )
    elif start.steps == "continue" and not {"max_steps", "epochs"} & set(spec.hyperparameters):
        problems.append(
            warning(
                "warm_start.steps",
                "continue keeps the source's step counter: with max_steps and epochs as the source had them, "
                "nothing may be left to train; raise max_steps or epochs (or steps: restart)",
            )
        )
    return problems
