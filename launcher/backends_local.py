"""The local backend of each kind (`backends`' interface): the job runs on this machine and ends with the command,
so no backend keeps jobs (`jobs` is None). Each method loads the modules it runs (TensorFlow only in the child
processes, pyspark only for processing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from launcher.plans.prepare_plan import PreparePlan
    from launcher.plans.probe_plan import ProbePlan
    from launcher.plans.training_plan import Plan
    from launcher.plans.tuning_plan import TuningPlan
    from launcher.serving.artifact import ServePlan
    from launcher.serving.transform import LocalTransformPlan

Echo = Callable[[str], None]


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
