"""The spec's `warm_start:` section: start a training job from an earlier job's checkpoint or model. Pydantic only;
what the source is (a job name, an S3 URI, a local folder) is the plan's and the backends' to find out."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from launcher.spec.value_types import _Strict


class WarmStart(_Strict):
    """Where the job's first weights come from, and what of them it restores."""

    model_config = ConfigDict(**_Strict.model_config, serialize_by_alias=True)  # dumped as written: `from`

    source: str = Field(
        alias="from",
        min_length=1,
        description="an earlier training job's name, an S3 checkpoint prefix or model.tar.gz; with --local a run "
        "folder, a checkpoint folder, a model.tar.gz or a SavedModel folder",
    )
    restore: Literal["all", "embeddings"] = Field(
        "all", description="all: every variable that matches; embeddings: the embedding tables only"
    )
    steps: Literal["restart", "continue"] = Field(
        "restart", description="restart: the step counter and learning-rate schedule start again; continue: they go on"
    )
