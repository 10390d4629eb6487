"""The spec's value types shared by its sections (spec.py, spec_tune.py, spec_prepare.py): strict models,
S3 URIs, ARNs, instance types and ids checked by pattern, unions chosen by the YAML shape of a value. Pydantic only."""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator
from pydantic_core import PydanticCustomError


def _custom(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)


def _pattern(regex: str, kind: str, example: str):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise _custom(kind, f"'{value}' is not {example}")
        return value

    return AfterValidator(check)


BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")  # an S3 bucket name, as an S3 URI's host
_S3 = re.compile(rf"s3://{BUCKET.pattern}(/\S*)?")
S3Uri = Annotated[str, _pattern(_S3.pattern, "s3_uri", "an S3 URI like s3://bucket/prefix/")]


def _s3_or_auto(value: str) -> str:
    if value != "auto" and not _S3.fullmatch(value):
        raise _custom("s3_uri", f"'{value}' is neither auto nor an S3 URI like s3://bucket/prefix/")
    return value


S3OrAuto = Annotated[str, AfterValidator(_s3_or_auto)]
RoleArn = Annotated[
    str,
    _pattern(
        r"arn:aws[a-z\-]*:iam::\d{12}:role/\S+", "role_arn", "an IAM role ARN like arn:aws:iam::123456789012:role/Name"
    ),
]
Region = Annotated[str, _pattern(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d", "region", "an AWS region like us-east-1")]
InstanceTypeName = Annotated[
    str, _pattern(r"ml\.[a-z0-9\-]+\.[a-z0-9]+", "instance_type", "a SageMaker instance type like ml.c5.18xlarge")
]
FileSystemId = Annotated[
    str, _pattern(r"fs-[0-9a-f]{8,17}", "file_system_id", "a file system id like fs-0123456789abcdef0")
]
SubnetId = Annotated[str, _pattern(r"subnet-[0-9a-f]{8,17}", "subnet", "a subnet id like subnet-0123456789abcdef0")]
SecurityGroupId = Annotated[
    str, _pattern(r"sg-[0-9a-f]{8,17}", "security_group", "a security group id like sg-0123456789abcdef0")
]
ChannelName = Annotated[
    str, _pattern(r"[A-Za-z0-9.\-_]{1,64}", "channel_name", "a channel name (letters, digits, . - _; at most 64)")
]
EnvName = Annotated[str, _pattern(r"[A-Za-z_][A-Za-z0-9_]{0,511}", "env_name", "an environment variable name")]


def _shape(value: Any) -> str | None:
    if isinstance(value, bool):
        return "~bool"
    if isinstance(value, str):
        return "~text"
    if isinstance(value, (Mapping, BaseModel)):  # a model when serializing
        return "~mapping"
    if isinstance(value, list):
        return "~list"
    return None


def _by_shape(expected: str, shape: Callable[[Any], str | None] = _shape) -> Discriminator:
    """A union chosen by the YAML shape of the value (`shape(value)` -> the branch's tag, None: no branch), so
    errors come from the one branch meant."""
    return Discriminator(shape, custom_error_type="wrong_shape", custom_error_message=f"expected {expected}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# Sizes: binary units as instance memory is given (GiB), decimal ones as disks are (GB). A bare "6G" is refused:
# docker reads it as 6 GiB, Kubernetes as 6 GB.
SIZE_UNITS = {
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([A-Za-z]*)")


def size_bytes(text: str) -> int:
    """'6GiB' -> 6442450944, '512MiB', '1.5GiB', '8GB' (10^9); ValueError naming the forms for anything else."""
    match = _SIZE.fullmatch(text.strip())
    unit = match and match.group(2)
    if match and unit in SIZE_UNITS:
        value = int(float(match.group(1)) * SIZE_UNITS[unit])
        if value > 0:
            return value
    hint = ""
    letter = (unit or " ")[0].upper()
    if letter in "KMGT" and unit.upper().rstrip("I") == letter:  # 6G, 6g, 6Gi: which unit is meant?
        power, number = " KMGT".index(letter), match.group(1)
        hint = f" ({number}{letter}iB for 2^{10 * power} bytes per unit, {number}{letter}B for 10^{3 * power})"
    raise ValueError(f"'{text}' is not a size like 512MiB, 6GiB or 8GB{hint}")


def _size(value: str) -> str:
    try:
        size_bytes(value)
    except ValueError as err:
        raise _custom("size", str(err)) from None
    return value


MemorySize = Annotated[str, AfterValidator(_size)]
