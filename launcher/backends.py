"""One interface for every job kind on every backend: `backend_for(kind, name)`.

Each backend turns its kind's plan into a request and runs exactly that request:
- `dryrun(plan) -> request`: a frozen value of everything the backend will do; no job is started and nothing is sent.
- `document(request) -> dict`: that value as the dry run prints it (JSON-able).
- `execute(request, **options)`: runs it (SageMaker: uploads and submits; local: starts the processes).
- `jobs`: where the backend keeps jobs (SageMaker), their describe, stop, list and logs (`sagemaker_backend.kinds`);
  None where it keeps none (local runs end with the command).

kinds: training (plans.training_plan.Plan), tuning (plans.tuning_plan.TuningPlan), processing
(plans.prepare_plan.PreparePlan), probe (plans.probe_plan.ProbePlan), transform (plans.model_plan.TransformPlan on
SageMaker, serving.transform.LocalTransformPlan locally), each on both backends; serving (serving.artifact.ServePlan:
an exported model answering requests as SageMaker's TensorFlow inference container does), local only so far;
endpoint (plans.model_plan.DeployPlan), SageMaker only. backends: sagemaker, local. Each backend's
modules load only when one of its methods is called, so a command pays only for the SDK (or pyspark) it uses.
The backends themselves: `backends_sagemaker`, `backends_local`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, TypeVar

from launcher.backends_local import (
    LocalProbe,
    LocalProcessing,
    LocalServing,
    LocalTraining,
    LocalTransform,
    LocalTuning,
)
from launcher.backends_sagemaker import (
    SageMakerEndpoint,
    SageMakerProbe,
    SageMakerProcessing,
    SageMakerTraining,
    SageMakerTransform,
    SageMakerTuning,
)

if TYPE_CHECKING:
    from launcher.sagemaker_backend.kinds import JobKind

JOB_KINDS = ("training", "tuning", "processing", "probe", "transform")  # on SageMaker and locally
KINDS = (*JOB_KINDS, "serving", "endpoint")
BACKENDS = ("sagemaker", "local")
Echo = Callable[[str], None]
PlanT = TypeVar("PlanT", contravariant=True)
RequestT = TypeVar("RequestT")


class Backend(Protocol, Generic[PlanT, RequestT]):
    kind: str
    name: str

    def dryrun(self, plan: PlanT) -> RequestT: ...

    def document(self, request: RequestT) -> dict[str, Any]: ...

    def execute(self, request: RequestT, **options: Any) -> Any: ...

    @property
    def jobs(self) -> JobKind | None: ...


REGISTRY: dict[tuple[str, str], Backend] = {
    (b.kind, b.name): b
    for b in (
        SageMakerTraining(),
        LocalTraining(),
        SageMakerTuning(),
        LocalTuning(),
        SageMakerProcessing(),
        LocalProcessing(),
        SageMakerProbe(),
        LocalProbe(),
        LocalServing(),
        SageMakerTransform(),
        LocalTransform(),
        SageMakerEndpoint(),
    )
}


def backend_for(kind: str, name: str) -> Backend:
    """The backend `name` (sagemaker | local) of kind `kind` (training | tuning | processing | probe | transform |
    serving | endpoint)."""
    try:
        return REGISTRY[(kind, name)]
    except KeyError:
        raise ValueError(f"no {name} backend for {kind} jobs (kinds: {KINDS}; backends: {BACKENDS})") from None


def find_job(job_name: str, region: str | None, kind: str | None = None) -> tuple[JobKind, dict]:
    """(the jobs of its kind, the job's summary) of a submitted job: the kind given, else the kind SageMaker knows
    the name as (the local backend keeps no jobs)."""
    from launcher.sagemaker_backend import kinds

    return kinds.find(job_name, region, kind)


def job_kind(job_name: str, region: str | None, kind: str | None = None) -> JobKind:
    """The jobs of a submitted job's kind: the kind given (no call), else as `find_job`."""
    from launcher.sagemaker_backend import kinds

    return kinds.kind_of(job_name, region, kind)


def backend_named(kind: str, local: bool) -> Backend:
    """The CLI's choice: --local or SageMaker."""
    return backend_for(kind, "local" if local else "sagemaker")


def resolve_model(model: str, *, region: str | None, role: str | None, framework_version: str | None, offline: bool):
    """JOB_OR_MODEL -> the ModelSource a transform or endpoint plan serves (a training job is described)."""
    from launcher.sagemaker_backend import model_requests

    return model_requests.resolve_model(
        model, region=region, role=role, framework_version=framework_version, offline=offline
    )


def undeploy(name: str, region: str | None, echo: Echo) -> list[str]:
    """An endpoint deleted, and its config and models when dfm made them. -> what was deleted."""
    from launcher.sagemaker_backend import endpoints

    return endpoints.undeploy(name, region, echo=echo)
