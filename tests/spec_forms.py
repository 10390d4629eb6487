"""Every form the spec's schema accepts, generated from the pydantic models: each member of each union, each
value of each Literal, each optional section given, as `--set field=value` overrides for a whole top-level field.

A value of a constrained text type (an S3 URI, an instance type, an id) is one sample that passes its pattern,
so the forms reach the rules and the dry run instead of stopping at the schema. The bundled scripts' choice
hyperparameters (`mixed_precision`, `optimizer`, ...) come from their own CHOICES table.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Iterator, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from launcher.facts import contract
from launcher.spec import Spec
from launcher.spec import value_types as vt

# One valid sample of each constrained text type (the schema checks these by pattern, not by JSON Schema).
TEXT_SAMPLES: dict[Any, list[Any]] = {
    vt.S3Uri: ["s3://dfm-forms/x/"],
    vt.S3OrAuto: ["auto", "s3://dfm-forms/x/"],
    vt.RoleArn: ["arn:aws:iam::123456789012:role/dfm"],
    vt.Region: ["us-west-2"],
    vt.InstanceTypeName: ["ml.r5.4xlarge"],
    vt.FileSystemId: ["fs-0123456789abcdef0"],
    vt.SubnetId: ["subnet-0123456789abcdef0"],
    vt.SecurityGroupId: ["sg-0123456789abcdef0"],
    vt.ChannelName: ["extra"],
    vt.EnvName: ["DFM_FORM"],
}
# Fields whose plain `str` type has a meaning the schema cannot see: a sample that means something.
FIELD_SAMPLES: dict[str, list[Any]] = {
    "entry_point": ["deepfm-ps", "deepfm-horovod", "deepfm-mirrored"],
    "version": ["2.14", "2.12", "2.21"],
    "python": ["py310"],
    "directory_path": ["/forms"],
    "local_path": ["/opt/ml/checkpoints"],
    "name": ["deepfm-forms"],
    "source_dir": [None],
    "image_uri": ["123456789012.dkr.ecr.us-east-1.amazonaws.com/tf:2.14"],
    "tracking_server_arn": ["arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/forms"],
}
SKIPPED = {
    "extends",
    "local",
    "tune",
    "prepare",
    "features",
}  # files and whole sections of their own: tests of their own


def _first(options: list[Any]) -> Any:
    return options[0] if options else None


def samples(hint: Any, name: str = "", depth: int = 0) -> list[Any]:
    """Values of type `hint`, one for each alternative at each level (the first is the simplest)."""
    if name in FIELD_SAMPLES:
        return list(FIELD_SAMPLES[name])
    origin = get_origin(hint)
    if origin is typing.Annotated:
        metadata = [id(m) for m in hint.__metadata__]
        for typed, values in TEXT_SAMPLES.items():  # Annotated flattens: S3Uri tagged is str + S3Uri's check + tag
            if all(id(m) in metadata for m in typed.__metadata__):
                return list(values)
        return samples(get_args(hint)[0], name, depth)
    if origin in (Union, types.UnionType):
        return [value for member in get_args(hint) for value in samples(member, name, depth)]
    if origin is Literal:
        return list(get_args(hint))
    if origin is list:
        return [[value] for value in samples(get_args(hint)[0], name, depth)]
    if origin is dict:
        key, value = get_args(hint)
        return [{_first(samples(key, "", depth)) or "k": v} for v in samples(value, name, depth)[:3]]
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return _model_samples(hint, depth)
    return {bool: [True, False], int: [1], float: [1.0], str: ["x"], type(None): [None]}.get(hint, ["x"])


def _model_samples(model: type[BaseModel], depth: int) -> list[dict]:
    """The model with only its required fields, then with each field in each of its forms."""
    hints = typing.get_type_hints(model, include_extras=True)
    required = {
        name: _first(samples(hints[name], name, depth + 1))
        for name, field in model.model_fields.items()
        if field.is_required()
    }
    out = [required]
    if depth > 3:
        return out
    for name, field in model.model_fields.items():
        if field.annotation is Any:
            continue
        for value in samples(hints[name], name, depth + 1):
            form = {**required, name: value}
            if form not in out:
                out.append(form)
    return out


def _hyperparameter_forms() -> Iterator[tuple[str, Any]]:
    hparams = contract.bundled_hparams()
    for name, choices in hparams.CHOICES.items():
        for choice in choices:
            yield f"hyperparameters.{name}", choice
    yield "hyperparameters.mixed_precision", True  # the documented `true` (float16)
    for name, default in hparams.DEFAULTS.items():
        if isinstance(default, bool):
            yield f"hyperparameters.{name}", not default


def forms() -> list[tuple[str, Any]]:
    """(top-level field, value) for every form of every field of the spec."""
    hints = typing.get_type_hints(Spec, include_extras=True)
    found = []
    for name in Spec.model_fields:
        if name in SKIPPED:
            continue
        for value in samples(hints[name], name):
            if (name, value) not in found:
                found.append((name, value))
    found.extend(_hyperparameter_forms())
    return found


def override(field: str, value: Any) -> str:
    """`--set` text for a value (JSON is YAML; `null` drops an optional section)."""
    return f"{field}={json.dumps(value)}"
