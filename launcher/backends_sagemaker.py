"""The SageMaker backend of each job kind (`backends`' interface): each method loads the modules it runs, so a
command pays for boto3 or the SDK only when it calls one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from launcher.plans.model_plan import DeployPlan, TransformPlan
    from launcher.plans.prepare_plan import PreparePlan
    from launcher.plans.probe_plan import ProbePlan
    from launcher.plans.training_plan import Plan
    from launcher.plans.tuning_plan import TuningPlan
    from launcher.sagemaker_backend.kinds import JobKind

Echo = Callable[[str], None]


def _sagemaker_jobs(kind: str) -> JobKind:
    from launcher.sagemaker_backend import kinds

    return kinds.KINDS[kind]


class SageMakerTraining:
    kind, name = "training", "sagemaker"

    def dryrun(self, plan: Plan):
        from launcher.sagemaker_backend import training_request

        return training_request.build(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, wait: bool, echo: Echo, warn: Echo) -> str:
        """Submits the request (each later attempt of `recover:` is built from its plan); -> the last job's name."""
        from launcher.sagemaker_backend import attempts

        return attempts.launch(request.plan, wait=wait, echo=echo, warn=warn, first=request)

    @property
    def jobs(self) -> JobKind:
        return _sagemaker_jobs("training")


class SageMakerTuning:
    kind, name = "tuning", "sagemaker"

    def dryrun(self, plan: TuningPlan):
        from launcher.sagemaker_backend import tuning_request

        return tuning_request.build(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, echo: Echo) -> str:
        from launcher.sagemaker_backend import tuning_request

        return tuning_request.submit(request, echo=echo)

    @property
    def jobs(self) -> JobKind:
        return _sagemaker_jobs("tuning")


class SageMakerProcessing:
    kind, name = "processing", "sagemaker"

    def dryrun(self, plan: PreparePlan):
        from launcher.sagemaker_backend import processing

        return processing.build(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, wait: bool, echo: Echo) -> str:
        from launcher.sagemaker_backend import processing

        return processing.submit(request, wait=wait, echo=echo)

    @property
    def jobs(self) -> JobKind:
        return _sagemaker_jobs("processing")


class SageMakerProbe:
    kind, name = "probe", "sagemaker"

    def dryrun(self, plan: ProbePlan):
        from launcher.sagemaker_backend import probes

        return probes.dryrun(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, echo: Echo, warn: Echo, poll_seconds: float):
        """-> each probe's measurements (ProbeInterrupted on Ctrl-C, with those taken)."""
        from launcher.sagemaker_backend import probes

        return probes.execute(request, echo=echo, warn=warn, poll_seconds=poll_seconds)

    @property
    def jobs(self) -> JobKind:
        return _sagemaker_jobs("training")  # probe jobs are training jobs


class SageMakerTransform:
    """A batch transform job: CreateModel + CreateTransformJob, as the SDK's TensorFlowModel.transformer sends them."""

    kind, name = "transform", "sagemaker"

    def dryrun(self, plan: TransformPlan):
        from launcher.sagemaker_backend import model_requests

        return model_requests.build_transform(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, echo: Echo) -> str:
        from launcher.sagemaker_backend import model_requests

        return model_requests.submit(request, echo=echo)

    @property
    def jobs(self) -> JobKind:
        return _sagemaker_jobs("transform")


class SageMakerEndpoint:
    """An endpoint: CreateModel + CreateEndpointConfig + CreateEndpoint, as the SDK's TensorFlowModel.deploy sends
    them. Not a job: `dfm undeploy` ends it."""

    kind, name = "endpoint", "sagemaker"

    def dryrun(self, plan: DeployPlan):
        from launcher.sagemaker_backend import model_requests

        return model_requests.build_deploy(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, echo: Echo, wait: bool = False, poll_seconds: float = 30.0) -> str:
        from launcher.sagemaker_backend import endpoints, model_requests

        name = model_requests.submit(request, echo=echo)
        if wait:
            endpoints.wait(name, request.region, echo=echo, poll_seconds=poll_seconds)
        return name

    jobs = None
