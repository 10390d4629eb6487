"""The `probe:` section of a job spec: the candidate setups `dfm probe` runs for a few minutes each.

Only the shape is checked here; each candidate goes through the same rules as `dfm validate` when the probe is
planned (`launcher.plans.probe_plan`).
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import Field

from launcher.spec.value_types import S3Uri, _Strict

# A variant: `--set` lines ("instance.count=2"), one line, or a mapping of dotted keys to values.
Variant = Union[str, list[str], dict[str, Any]]


class Probe(_Strict):
    variants: list[Variant] = Field(
        default_factory=list,
        description="the candidates: each a list of --set lines (or a mapping of dotted keys to values)",
    )
    max_steps: int = Field(300, ge=1, description="training steps each probe runs (its hyperparameter max_steps)")
    minutes: int = Field(20, ge=1, le=1440, description="safety bound per probe: its max_run, in minutes")
    max_parallel: int = Field(2, ge=1, le=100, description="probe jobs running at once on SageMaker")
    data: dict[str, S3Uri] = Field(
        default_factory=dict, description="smaller channels to probe on, e.g. {train: s3://.../train-sample/}"
    )
    rows: int | None = Field(
        None, ge=1, description="training rows of the full job's epoch (else stats.json or --rows)"
    )
