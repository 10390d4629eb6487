"""The `features:` section `dfm data prepare` proposes from its statistics over the whole input (stats.json),
in `dfm data inspect`'s format and with its bucket rule, for the prepared TFRecords (`format: tfrecord`)."""

from __future__ import annotations

from typing import Any

from launcher.data.inspect import _flow, buckets, section_lines
from launcher.spec import Spec


def boundaries(quantiles: list[float]) -> list[float]:
    """Strictly increasing bucketize boundaries from approximate quantiles (repeats dropped)."""
    found: list[float] = []
    for value in quantiles:
        if value is not None and (not found or value > found[-1]):
            found.append(float(value))
    return found


def propose(stats: dict[str, Any], spec: Spec) -> dict[str, Any]:
    """The proposed section (raw input), or the pre-indexed hyperparameters (libsvm input)."""
    columns = stats["columns"]
    if spec.prepare is not None and spec.prepare.input.format == "libsvm":
        return {"hyperparameters": {"field_size": len(columns), "feature_size": stats["feature_size"]}}
    section = spec.features or {}
    numeric, categorical, multi_hot = {}, {}, {}
    for name, column in columns.items():
        kept = dict((section.get(column["kind"]) or {}).get(name) or {})
        if column["kind"] == "numeric":
            cuts = boundaries(column["quantiles"])
            if len(cuts) >= 2:
                kept.update(transform="bucketize", boundaries=cuts)
            numeric[name] = kept or {"transform": "log1p"}
        elif column["kind"] == "categorical":
            categorical[name] = {"hash_buckets": buckets(column["distinct"])}
        else:
            multi_hot[name] = {
                "separator": column["separator"],
                "hash_buckets": buckets(column["distinct"]),
                "max_length": column["max_length"],
                "pooling": kept.get("pooling", "mean"),
            }
    return {
        "features": {
            "format": "tfrecord",
            "label": section.get("label"),
            "numeric": numeric,
            "categorical": categorical,
            "multi_hot": multi_hot,
            "bad_rows": section.get("bad_rows", "skip"),
        }
    }


def _describe(column: dict[str, Any]) -> str:
    missing = f"{column.get('missing', 0.0):.1%} missing"
    if column["kind"] == "numeric":
        return f"{column['distinct']} distinct, {column['min']}..{column['max']}, {missing}"
    if column["kind"] == "multi_hot":
        return f"{column['distinct']} distinct tokens, up to {column['longest']} per row, {missing}"
    if column["kind"] == "indexed":
        return f"{column['distinct']} distinct ids, largest {column['max_id']}"
    return f"{column['distinct']} distinct, {missing}"


def proposal_yaml(stats: dict[str, Any], spec: Spec) -> str:
    """The proposal as YAML, each entry's statistics in a comment beside it (as `dfm data inspect` writes it)."""
    proposed = propose(stats, spec)
    head = (
        f"# proposed by `dfm data prepare` from all {stats['rows']} good rows ({stats['positive_rate']:.1%} positive)"
    )
    if "hyperparameters" in proposed:
        values = proposed["hyperparameters"]
        return (
            "\n".join(
                [
                    head,
                    "hyperparameters:",
                    f"  field_size: {values['field_size']}",
                    f"  feature_size: {values['feature_size']}  # largest id + 1",
                ]
            )
            + "\n"
        )
    features = proposed["features"]
    lines = [
        head,
        "features:",
        f"  format: {features['format']}",
        f"  label: {_flow(features['label'])}",
        f"  bad_rows: {features['bad_rows']}",
    ]
    lines += section_lines(features, lambda name: _describe(stats["columns"][name]))
    return "\n".join(lines) + "\n"
