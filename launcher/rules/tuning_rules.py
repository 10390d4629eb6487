"""Every rule for the `tune:` section, in the order they report: what the bundled script reads, and what the
tuning API would refuse.

The SDK's HyperparameterTuner checks almost none of this (strategy rules, limits, metric names): the
service refuses the job after the source dir was uploaded, or worse, a trial fails after it was paid for.
"""

from __future__ import annotations

from launcher.rules.tuning_limits import check_tune_environment, check_tune_limits
from launcher.rules.tuning_objective import (
    check_tune_hyperband_resource,
    check_tune_objective,
    check_tune_objective_reported,
)
from launcher.rules.tuning_ranges import check_tune_range_values, check_tune_ranges
from launcher.rules.tuning_search import check_tune_completion, check_tune_strategy
from launcher.rules.tuning_trials import check_tune_checkpoints, check_tune_cluster, check_tune_dropped_settings

TUNE_RULES = (
    check_tune_ranges,
    check_tune_range_values,
    check_tune_limits,
    check_tune_objective,
    check_tune_objective_reported,
    check_tune_strategy,
    check_tune_cluster,
    check_tune_completion,
    check_tune_checkpoints,
    check_tune_hyperband_resource,
    check_tune_dropped_settings,
    check_tune_environment,
)
