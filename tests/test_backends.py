"""The one backend interface: every job kind on both backends, and each backend executes the very request its dry
run built."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import JOB
from prepare_support import write_spec

from launcher.backends import BACKENDS, JOB_KINDS, backend_for
from launcher.errors import DfmError
from launcher.spec import load_spec

PREPARE = {"input": {"uri": "s3://dfm-bucket/clicks/", "format": "libsvm"}, "eval_fraction": 0.1}


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_every_kind_has_a_sagemaker_and_a_local_backend(kind):
    for name in BACKENDS:
        backend = backend_for(kind, name)
        assert (backend.kind, backend.name) == (kind, name)
        assert all(callable(getattr(backend, method)) for method in ("dryrun", "document", "execute"))
    jobs = backend_for(kind, "sagemaker").jobs  # SageMaker keeps the jobs: status, logs, stop, list
    assert jobs.name == ("training" if kind == "probe" else kind)
    assert backend_for(kind, "local").jobs is None


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="no k8s backend for training jobs"):
        backend_for("training", "k8s")


def test_a_submit_sends_the_request_the_dry_run_built(sample_plan, no_aws_env, no_network, monkeypatch):
    from launcher.sagemaker_backend import training_jobs

    backend = backend_for("training", "sagemaker")
    request = backend.dryrun(sample_plan())
    sent = []
    monkeypatch.setattr(training_jobs, "submit", lambda built, echo, warn: sent.append(built) or built.job_name)
    assert backend.execute(request, wait=False, echo=print, warn=print) == JOB
    assert len(sent) == 1 and sent[0] is request


@pytest.mark.parametrize("recover", [False, True])
def test_a_local_run_runs_the_request_the_dry_run_built(sample_plan, monkeypatch, tmp_path, recover):
    from launcher.local import local_recovery, runner
    from launcher.local.local_request import request_plan

    changes = {"local": {"run_dir": str(tmp_path)}}
    if recover:
        changes["recover"] = {"max_restarts": 1}
    plan = sample_plan(changes)
    backend = backend_for("training", "local")
    request = backend.dryrun(plan)
    assert request_plan(request) == plan
    ran = []

    class Recorded:
        """LocalRun, recording which request it was given; the run ends well at once."""

        def __init__(self, request, **options):
            self.request = request
            ran.append(request)

        def run(self):
            return runner.RunResult(exit_code=0, job_dir=tmp_path / self.request.job_name)

    monkeypatch.setattr(runner, "LocalRun", Recorded)
    monkeypatch.setattr(local_recovery, "LocalRun", Recorded)
    assert backend.execute(request, echo=lambda line: None) == 0
    assert ran == [request] and ran[0] is request


def test_the_processing_request_reads_the_prepare_plan_alone(tmp_path, no_aws_env, no_network):
    """The SageMaker backend builds its request from the plan's values, never from the spec (the local backend is
    the one that reads the spec's local folders)."""
    from launcher.plans.prepare_plan import build_prepare_plan

    spec = load_spec(write_spec(tmp_path, PREPARE))
    plan = build_prepare_plan(spec, "prep-1")
    backend = backend_for("processing", "sagemaker")
    document = backend.document(backend.dryrun(dataclasses.replace(plan, spec=None)))
    assert document == backend.document(backend.dryrun(plan))
    outputs = document["request"]["ProcessingOutputConfig"]["Outputs"]
    assert {o["OutputName"]: o["S3Output"]["S3Uri"] for o in outputs} == {**plan.outputs, "report": plan.report_uri}
    assert document["request"]["AppSpecification"]["ContainerArguments"] == ["--job", plan.job_uri]
    with pytest.raises(DfmError, match="local.channels: --local writes each channel's folder"):
        backend_for("processing", "local").dryrun(plan)  # the local backend reads the spec's folders: none here
