"""The stand-in role and bucket that let the example configs and a fresh `dfm init` spec validate before a user has
set their own, and the warning a spec still holding them gets (naming the variable to set)."""

from __future__ import annotations

from typing import Any, Iterator

ROLE_VARIABLE = "DFM_ROLE_ARN"
BUCKET_VARIABLE = "DFM_BUCKET"
PLACEHOLDER_ROLE = "arn:aws:iam::123456789012:role/dfm-sagemaker"
PLACEHOLDER_BUCKET = "dfm-example-bucket"


def _strings(value: Any, field: str = "") -> Iterator[tuple[str, str]]:
    """(dotted field, string) for every string in a spec dump, in field order."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{field}.{key}" if field else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{field}.{index}")
    elif isinstance(value, str):
        yield field, value


def placeholder_warnings(spec: Any) -> list[str]:
    """`file:line: field: message` warnings for a placeholder role and a placeholder bucket (one each, at the first
    field holding it)."""
    found: dict[str, str] = {}
    for field, value in _strings(spec.model_dump(mode="json", exclude={"local"})):
        if value == PLACEHOLDER_ROLE:
            found.setdefault("role", field)
        if f"s3://{PLACEHOLDER_BUCKET}/" in value or value == f"s3://{PLACEHOLDER_BUCKET}":
            found.setdefault("bucket", field)
    lines = []
    if "role" in found:
        lines.append(
            f"{spec.where(found['role'])}: {found['role']}: {PLACEHOLDER_ROLE} is a placeholder: set "
            f"{ROLE_VARIABLE} to your SageMaker execution role's ARN (or write it here)"
        )
    if "bucket" in found:
        lines.append(
            f"{spec.where(found['bucket'])}: {found['bucket']}: s3://{PLACEHOLDER_BUCKET} is a placeholder: "
            f"set {BUCKET_VARIABLE} to your S3 bucket (or write it here)"
        )
    return lines
