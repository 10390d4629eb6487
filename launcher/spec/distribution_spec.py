"""The `distribution:` forms of a job spec: a name, `{horovod: {...}}` or `{parameter_server: {...}}`, told apart
by shape so that a wrong form gets one error naming the forms."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import Field, Tag

from launcher.spec.value_types import InstanceTypeName, _by_shape, _shape, _Strict


class Horovod(_Strict):
    processes_per_host: int = Field(1, ge=1, description="MPI ranks per host: GPUs per host on GPU instances")
    mpi_options: str = Field("", description="extra mpirun options (SDK custom_mpi_options)")


class HorovodDistribution(_Strict):
    horovod: Horovod


class PsGroup(_Strict):
    """The parameter servers' own instance group (a heterogeneous cluster): no training data, CPU by intent."""

    type: InstanceTypeName = Field(description="e.g. ml.r5.4xlarge: memory for the embedding tables")
    count: int = Field(1, ge=1, le=1000, description="hosts in the ps group")
    per_host: int = Field(1, ge=1, le=64, description="parameter server processes per ps host")


class ParameterServer(_Strict):
    ps: PsGroup | None = Field(
        None, description="put the parameter servers on their own instances; omitted: one ps on every host"
    )


class ParameterServerDistribution(_Strict):
    parameter_server: ParameterServer


DistributionName = Literal["parameter_server", "multi_worker_mirrored", "horovod", "none"]
_DISTRIBUTION_KEYS = {"horovod": "~horovod", "parameter_server": "~parameter_server"}


def _distribution_shape(value: Any) -> str | None:
    """Which distribution branch a value is meant for: the name, or the one key of a mapping."""
    if isinstance(value, HorovodDistribution):
        return "~horovod"
    if isinstance(value, ParameterServerDistribution):
        return "~parameter_server"
    if isinstance(value, Mapping):
        tags = [tag for key, tag in _DISTRIBUTION_KEYS.items() if key in value]
        return tags[0] if len(tags) == 1 else None  # none or several: the error says which (spec.sdk_words)
    return _shape(value)


Distribution = Annotated[
    Union[
        Annotated[DistributionName, Tag("~text")],
        Annotated[HorovodDistribution, Tag("~horovod")],
        Annotated[ParameterServerDistribution, Tag("~parameter_server")],
    ],
    _by_shape(
        "parameter_server, multi_worker_mirrored, horovod, none, "
        "{horovod: {processes_per_host: N}} or {parameter_server: {ps: {type: ..., count: N}}}",
        _distribution_shape,
    ),
]
