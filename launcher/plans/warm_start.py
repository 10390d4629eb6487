"""A training job's warm start as plan data: its source as the user named it, what it is once known (a checkpoint
prefix or a model artifact), and what the bundled scripts are told. Pure: the backends find out what a job name or
a local folder holds (DescribeTrainingJob, the folder's files) and fill it in with `training_plan.with_warm_start`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHECKPOINT = "checkpoint"  # a TF checkpoint: `checkpoint` + ckpt-N.index + data files -> the warmstart channel
MODEL = "model"  # a model.tar.gz (or locally an exported SavedModel folder) -> the SDK's model channel
JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


@dataclass(frozen=True)
class WarmStart:
    source: str  # as the spec names it: a job name, an s3:// URI, or (--local) a path
    restore: str = "all"  # all | embeddings
    steps: str = "restart"  # restart | continue
    kind: str | None = None  # CHECKPOINT | MODEL; None until the backend has resolved the source
    uri: str | None = None  # the s3:// prefix or model.tar.gz (locally: the folder or file); None until resolved
    local_path: str | None = None  # the absolute path the source names, relative to the spec (for --local)

    @property
    def resolved(self) -> bool:
        return self.kind is not None


def s3_kind(uri: str) -> str:
    """An s3:// URI ending in .tar.gz is a model artifact; any other is a checkpoint prefix."""
    return MODEL if uri.endswith(".tar.gz") else CHECKPOINT


def from_spec(source: str, restore: str, steps: str, local_path: str | None = None) -> WarmStart:
    """The plan's warm start: an s3:// URI is known offline; a job name or a local path waits for its backend."""
    if source.startswith("s3://"):
        kind = s3_kind(source)
        return WarmStart(source, restore, steps, kind, source if kind == MODEL else checkpoint_prefix(source))
    return WarmStart(source, restore, steps, local_path=local_path)


def is_job_name(source: str) -> bool:
    return bool(JOB_NAME.fullmatch(source))


def checkpoint_prefix(uri: str) -> str:
    """A checkpoint prefix as the channel's S3Uri: with a trailing '/', so `.../day1` never also matches `day10`."""
    return uri if uri.endswith("/") else f"{uri}/"


def script_hyperparameters(warm: WarmStart) -> dict[str, str]:
    """What the bundled scripts read: what to restore, the step counter's fate, and the source for the first log
    line."""
    return {"warm_start": warm.restore, "warm_start_steps": warm.steps, "warm_start_source": warm.source}
