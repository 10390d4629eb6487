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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Protocol, TypeVar

if TYPE_CHECKING:
    from launcher.plans.model_plan import DeployPlan, TransformPlan
    from launcher.plans.prepare_plan import PreparePlan
    from launcher.plans.probe_plan import ProbePlan
    from launcher.plans.training_plan import Plan
    from launcher.plans.tuning_plan import TuningPlan
    from launcher.sagemaker_backend.kinds import JobKind
    from launcher.serving.artifact import ServePlan
    from launcher.serving.transform import LocalTransformPlan

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


def _sagemaker_jobs(kind: str) -> JobKind:
    from launcher.sagemaker_backend import kinds

    return kinds.KINDS[kind]


# ------------------------------------------------------------------------------------------------ training
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


class LocalTraining:
    kind, name = "training", "local"

    def dryrun(self, plan: Plan):
        from launcher.local.local_request import build_request

        return build_request(plan)

    def document(self, request) -> dict[str, Any]:
        from launcher.local.describe import request_document

        return request_document(request)

    def execute(self, request, *, echo: Echo, verbose: bool = False) -> int:
        """-> the run's exit code: 0 when every script succeeded."""
        from launcher.local import run_request

        return run_request(request, echo=echo, verbose=verbose)

    jobs = None


# ------------------------------------------------------------------------------------------------ tuning
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


@dataclass(frozen=True)
class LocalStudyRequest:
    """A local study: the tuning plan and the folder of its journal, trials and report."""

    plan: Any  # TuningPlan
    folder: Path


class LocalTuning:
    kind, name = "tuning", "local"

    def dryrun(self, plan: TuningPlan) -> LocalStudyRequest:
        return LocalStudyRequest(plan, Path(plan.training.local.run_dir) / plan.name)

    def document(self, request: LocalStudyRequest) -> dict[str, Any]:
        return {"tuning_job": request.plan.name, "folder": str(request.folder)}

    def execute(
        self,
        request: LocalStudyRequest,
        *,
        spec,
        compile_trial,
        echo: Echo,
        status: Echo,
        resume: bool = False,
        counts=None,
        seed_from=(),
    ):
        """Runs the study (each trial's plan through `compile_trial`); -> (the LocalTuning that ran it, its study).
        `counts`: told the trial counts as numbers (a terminal's bar)."""
        from launcher.local.tuning_study import LocalTuning as Study

        tuning = Study(
            request.plan,
            spec,
            request.folder.parent,
            compile_trial,
            echo=echo,
            status=status,
            seed_from=list(seed_from),
        )
        if counts is not None:
            tuning.counts = counts
        return tuning, tuning.run(resume=resume)

    jobs = None


# ------------------------------------------------------------------------------------------------ processing
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


@dataclass(frozen=True)
class LocalPrepareRequest:
    """The application on local Spark, reading and writing this machine's folders (the spec's local: section)."""

    plan: Any  # PreparePlan
    job: Mapping[str, Any]  # the application's job description, with this machine's paths


class LocalProcessing:
    kind, name = "processing", "local"

    def dryrun(self, plan: PreparePlan) -> LocalPrepareRequest:
        from launcher.data import prepare_local

        return LocalPrepareRequest(plan, prepare_local.local_job(plan.spec, stats_only=plan.stats_only))

    def document(self, request: LocalPrepareRequest) -> dict[str, Any]:
        """What the run reads and where it writes, without starting Spark."""
        job = request.job
        channels: dict[str, int] = {}
        for path in (*job["train_paths"], *job["eval_paths"]):
            folder = str(Path(path).parent.resolve())
            channels[folder] = channels.get(folder, 0) + 1
        return {
            "job_name": request.plan.job_name,
            "stats_only": request.plan.stats_only,
            "input": str(Path(job["input"]["uri"]).resolve()),
            "eval_input": str(Path(job["eval_uri"]).resolve()) if job.get("eval_uri") else None,
            "outputs": {} if request.plan.stats_only else channels,  # folder -> files written there
            "report": str(Path(job["report_dir"]).resolve()),
        }

    def execute(self, request: LocalPrepareRequest, *, force: bool = False, stages=None) -> dict[str, Any]:
        """-> the application's report. `stages` is told each stage's name as it starts."""
        from launcher.data import prepare_local

        return prepare_local.run(request.job, request.plan.spec, force=force, stages=stages)

    jobs = None


# ------------------------------------------------------------------------------------------------ probe
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


class LocalProbe:
    kind, name = "probe", "local"

    def dryrun(self, plan: ProbePlan):
        from launcher.local import probe_runs

        return probe_runs.dryrun(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, echo: Echo, warn: Echo = print, poll_seconds: float = 0.0):
        """One probe after another, each run to its end here: `warn` and `poll_seconds` have nothing to act on."""
        from launcher.local import probe_runs

        return probe_runs.execute(request, echo=echo)

    jobs = None


# ------------------------------------------------------------------------------------------------ serving
class LocalServing:
    """An exported model served on a loopback port as SageMaker's TensorFlow inference container serves it."""

    kind, name = "serving", "local"

    def dryrun(self, plan: ServePlan):
        """The artifact laid out as the container finds it (a layout it refuses is refused here) and each
        version's signatures read; nothing loaded, no port taken. A training job's artifact, or an s3:// one, is
        downloaded first. The caller closes it (`request.close()`)."""
        import dataclasses
        import shutil
        import tempfile

        from launcher.serving.check import build_request

        if not plan.remote():
            return build_request(plan)
        from launcher.sagemaker_backend import model_requests

        folder = Path(tempfile.mkdtemp(prefix="dfm-serve-"))
        try:
            local = model_requests.download_artifact(str(plan.model), plan.region, folder)
            return build_request(dataclasses.replace(plan, model=local), downloaded=folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    def document(self, request) -> dict[str, Any]:
        from launcher.serving.check import document

        return document(request)

    def execute(self, request, *, echo: Echo) -> None:
        """Serves until SIGINT or SIGTERM."""
        from launcher.serving.server import serve

        serve(request, echo)

    jobs = None


# ------------------------------------------------------------------------------------------------ transform
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


class LocalTransform:
    """Local files scored through the local server, each `<file>.out` as a transform job writes it."""

    kind, name = "transform", "local"

    def dryrun(self, plan: LocalTransformPlan):
        """The model laid out and checked, the files listed; nothing loaded. The caller closes it."""
        from launcher.serving import transform

        return transform.build(plan)

    def document(self, request) -> dict[str, Any]:
        return request.document()

    def execute(self, request, *, echo: Echo) -> dict[str, int]:
        from launcher.serving import transform

        return transform.run(request, echo)

    jobs = None


# ------------------------------------------------------------------------------------------------ endpoint
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
