"""The `features:` rule: a raw-feature section is checked with the bundled scripts' own pure checks
(entrypoints/deepfm_features.py, loaded by path), each problem on its own key's line."""

from __future__ import annotations

from launcher.facts import contract
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec


def check_features(spec: Spec) -> list[Finding]:
    if spec.features is None:
        return []
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return [
            error(
                "features",
                "raw features are read by the bundled entry points (deepfm-ps, ...); "
                "with your own script drop `features:` and pass what it needs as hyperparameters",
            )
        ]
    problems = []
    if spec.data.mode == "Pipe":
        problems.append(error("features", "raw features are read in File or FastFile mode: set data.mode to File"))
    for path, message in contract.bundled_features().validate(spec.features):
        field = ".".join(["features", *(str(key) for key in path)])
        problems.append(error(field, message))
    return problems or _sizes_from_features(spec)


def _sizes_from_features(spec: Spec) -> list[Finding]:
    """The scripts take field_size and feature_size from the section's fields, whatever the spec says."""
    return [
        warning(
            f"hyperparameters.{name}",
            "not used with features: (the scripts count the fields, and their ids from hash_buckets and "
            "vocabularies): drop it",
        )
        for name in ("field_size", "feature_size")
        if name in spec.hyperparameters
    ]
