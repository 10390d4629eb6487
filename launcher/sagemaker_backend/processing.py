"""`dfm data prepare SPEC` on SageMaker Processing: a PreparePlan -> the `ProcessingRequest` that the SDK v2's own
`PySparkProcessor.run` builds, offline, checked against botocore's model; submit; status, logs, stop, list.

The SDK uploads the app, its dependencies and the Spark configuration while it builds the request; here those
uploads are recorded instead of sent (so a dry run makes no network call), and a submit sends exactly the
recorded files and then exactly the request the dry run prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urlparse

from launcher.data import prepare_job
from launcher.errors import DfmError
from launcher.plans.prepare_plan import PY_VERSION, PreparePlan
from launcher.sagemaker_backend import aws, logs, sdk
from launcher.sagemaker_backend.training_jobs import _iso, raise_for_outcome

PROCESSOR_CLASS = "sagemaker.spark.processing.PySparkProcessor"
LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
Echo = Callable[[str], None]


@dataclass(frozen=True)
class ProcessingRequest:
    """One prepare job on SageMaker, whole: what the dry run prints and what submit uploads and sends, built once."""

    job_name: str
    region: str | None
    processor_kwargs: Mapping[str, Any]
    run_kwargs: Mapping[str, Any]
    request: Mapping[str, Any]  # CreateProcessingJob, exactly as it is sent
    uploads: Mapping[str, bytes]  # s3 uri -> content, sent before the request
    write: Mapping[str, int]  # the write stage's tasks (prepare_job.write_tasks)

    def document(self) -> dict[str, Any]:
        """The dry run's document (JSON-able)."""
        return json.loads(
            json.dumps(
                {
                    "processor": {"class": PROCESSOR_CLASS, "kwargs": dict(self.processor_kwargs)},
                    "write": dict(self.write),
                    "run": dict(self.run_kwargs),
                    "uploads": sorted(self.uploads),
                    "request": dict(self.request),
                }
            )
        )


def _crc32c_wheel(folder: Path) -> list[str]:
    """google-crc32c's wheel for the image's Python (`make setup` keeps it in ~/.cache/dfm/wheels/spark), renamed
    for --py-files; the app unpacks it so the C extension loads. None cached: the pure-Python fallback only."""
    cache = Path(os.environ.get("DFM_SPARK_WHEELS", Path.home() / ".cache" / "dfm" / "wheels" / "spark"))
    found = sorted(cache.glob(f"google_crc32c-*-cp{PY_VERSION[2:]}-*manylinux*x86_64*.whl")) if cache.is_dir() else []
    if not found:
        return []
    target = folder / f"google_crc32c-cext-{PY_VERSION}.zip"
    shutil.copy(found[-1], target)
    return [str(target)]


def _crc32c_package(folder: Path) -> str:
    """google-crc32c's Python files zipped for --py-files: the image has no CRC32C; its pure-Python fallback
    runs anywhere (the C extension here is built for this machine's Python, not the image's)."""
    import google_crc32c

    package = Path(google_crc32c.__file__).parent
    target = folder / "google_crc32c.zip"
    with zipfile.ZipFile(target, "w") as archive:
        for source in sorted(package.glob("*.py")):
            archive.write(source, f"google_crc32c/{source.name}")
    return str(target)


@contextlib.contextmanager
def _recorded_uploads(uploads: dict[str, bytes]) -> Iterator[None]:
    """The SDK's S3 uploads, recorded (uri -> bytes) instead of sent; folders become one entry per file."""
    from sagemaker.s3 import S3Uploader

    def upload(local_path, desired_s3_uri, kms_key=None, sagemaker_session=None, callback=None):
        path = Path(local_path)
        if path.is_dir():
            for item in sorted(p for p in path.rglob("*") if p.is_file()):
                uploads[f"{desired_s3_uri.rstrip('/')}/{item.relative_to(path).as_posix()}"] = item.read_bytes()
            return desired_s3_uri
        uri = f"{desired_s3_uri.rstrip('/')}/{path.name}"
        uploads[uri] = path.read_bytes()
        return uri

    def upload_string(body, desired_s3_uri=None, kms_key=None, sagemaker_session=None):
        uploads[desired_s3_uri] = body.encode() if isinstance(body, str) else body.getvalue()
        return desired_s3_uri

    saved = S3Uploader.upload, S3Uploader.upload_string_as_file_body
    S3Uploader.upload, S3Uploader.upload_string_as_file_body = staticmethod(upload), staticmethod(upload_string)
    try:
        yield
    finally:
        S3Uploader.upload, S3Uploader.upload_string_as_file_body = (staticmethod(saved[0]), staticmethod(saved[1]))


def build(plan: PreparePlan) -> ProcessingRequest:
    """The request `PySparkProcessor(...).run(...)` sends, built by the SDK with zero network calls."""
    sdk.sdk()  # imported quietly
    from sagemaker.processing import ProcessingOutput
    from sagemaker.spark.processing import PySparkProcessor

    name = plan.job_name
    session = sdk.session_for(plan.region, plan.bucket)
    session._default_bucket = plan.bucket  # the SDK would otherwise ask S3 whether the bucket exists
    # The app goes to <default bucket>/<prefix>/<job>/input/code: under the job's output prefix, like the rest, so
    # a role scoped to that prefix can read it.
    session.default_bucket_prefix = plan.prefix
    kwargs = json.loads(json.dumps(dict(plan.processor)))
    sdk_kwargs = dict(kwargs)
    if "network_config" in kwargs:
        from sagemaker.network import NetworkConfig

        sdk_kwargs["network_config"] = NetworkConfig(**kwargs["network_config"])
    outputs = [
        ProcessingOutput(source=f"{prepare_job.CONTAINER_OUTPUT}/{channel}", destination=uri, output_name=channel)
        for channel, uri in plan.outputs.items()
    ]
    outputs.append(
        ProcessingOutput(
            source=f"{prepare_job.CONTAINER_OUTPUT}/{prepare_job.REPORT}",
            destination=plan.report_uri,
            output_name=prepare_job.REPORT,
        )
    )
    uploads: dict[str, bytes] = {plan.job_uri: json.dumps(dict(plan.job), indent=2).encode()}
    captured: dict[str, Any] = {}
    session.process = lambda **args: captured.update(session._get_process_request(**args))
    with tempfile.TemporaryDirectory() as folder:
        app = Path(folder) / "dfm_prepare.py"
        shutil.copy(prepare_job.APP, app)
        modules = [shutil.copy(path, Path(folder) / path.name) for path in prepare_job.APP_MODULES]
        py_files = [*map(str, modules), _crc32c_package(Path(folder)), *_crc32c_wheel(Path(folder))]
        run_kwargs = {
            "submit_app": str(app),
            "submit_py_files": py_files,
            "arguments": ["--job", plan.job_uri],
            "configuration": json.loads(json.dumps(list(plan.spark_configuration))),
            "outputs": outputs,
            "wait": False,
            "logs": False,
            "job_name": name,
        }
        if plan.event_logs is not None:
            run_kwargs["spark_event_logs_s3_uri"] = plan.event_logs
        try:
            processor = PySparkProcessor(sagemaker_session=session, **sdk_kwargs)
            with _recorded_uploads(uploads):
                processor.run(**run_kwargs)
        except (ValueError, TypeError) as err:
            raise DfmError(f"the SageMaker SDK refused the processing job: {aws.one_line(err)}", 2) from err
    validate(session.sagemaker_client, captured)
    shown = {
        **run_kwargs,
        "submit_app": app.name,
        "submit_py_files": [Path(p).name for p in py_files],
        "outputs": [{"source": o.source, "destination": o.destination, "output_name": o.output_name} for o in outputs],
    }
    frozen = json.loads(json.dumps(captured))
    return ProcessingRequest(
        name,
        plan.region,
        MappingProxyType(kwargs),
        MappingProxyType(shown),
        MappingProxyType(frozen),
        MappingProxyType(uploads),
        MappingProxyType(dict(plan.write)),
    )


def validate(sagemaker_client, built: dict) -> None:
    from botocore.validate import ParamValidator

    from launcher.facts import service_model

    shape = sagemaker_client.meta.service_model.operation_model("CreateProcessingJob").input_shape
    report = ParamValidator().validate(built, shape)
    if report.has_errors():
        raise DfmError(f"the CreateProcessingJob request would be refused: {aws.one_line(report.generate_report())}", 2)
    refused = [f"{path}: {message}" for path, message in service_model.walk(built, service_model.PROCESSING_SHAPE)]
    if refused:
        raise DfmError(f"the CreateProcessingJob request would be refused: {aws.one_line('; '.join(refused))}", 2)


def submit(request: ProcessingRequest, *, wait: bool, echo: Echo = print) -> str:
    """Upload the request's files, then send it, both exactly as built (and as the dry run printed)."""
    name, region = request.job_name, request.region
    session = aws.boto_session(region)
    s3 = session.client("s3")
    with aws.aws_errors(f"uploading the prepare job's files for {name}", job_name=name, region=region):
        for uri, body in request.uploads.items():
            parts = urlparse(uri)
            s3.put_object(Bucket=parts.netloc, Key=parts.path.lstrip("/"), Body=body)
    with aws.aws_errors(f"creating processing job {name}", job_name=name, region=region):
        session.client("sagemaker").create_processing_job(**json.loads(json.dumps(dict(request.request))))
    echo(f"submitted {name}")
    if wait:
        status = stream_logs(name, region, follow=True, echo=echo)
        raise_for_outcome(describe(name, region) if status != "Completed" else {"job_name": name, "status": status})
    return name


def read_object(uri: str, region: str | None) -> bytes:
    parts = urlparse(uri)
    with aws.aws_errors(f"reading {uri}", region=region):
        return (
            aws.boto_session(region)
            .client("s3")
            .get_object(Bucket=parts.netloc, Key=parts.path.lstrip("/"))["Body"]
            .read()
        )


def write_object(uri: str, body: bytes, region: str | None) -> None:
    parts = urlparse(uri)
    with aws.aws_errors(f"writing {uri}", region=region):
        aws.boto_session(region).client("s3").put_object(Bucket=parts.netloc, Key=parts.path.lstrip("/"), Body=body)


# ------------------------------------------------------------------------------------- status, logs, stop, list
def describe(name: str, region: str | None) -> dict:
    region = aws.resolve_region(region)
    with aws.aws_errors(f"describing {name}", job_name=name, region=region):
        found = aws.client("sagemaker", region).describe_processing_job(ProcessingJobName=name)
    cluster = found.get("ProcessingResources", {}).get("ClusterConfig", {})
    return {
        "job_name": found["ProcessingJobName"],
        "kind": "processing",
        "status": found["ProcessingJobStatus"],
        "failure_reason": found.get("FailureReason") or found.get("ExitMessage"),
        "instance_type": cluster.get("InstanceType"),
        "instance_count": cluster.get("InstanceCount"),
        "image": found.get("AppSpecification", {}).get("ImageUri"),
        "outputs": {
            o["OutputName"]: o.get("S3Output", {}).get("S3Uri")
            for o in found.get("ProcessingOutputConfig", {}).get("Outputs", [])
        },
        "created": _iso(found.get("CreationTime")),
        "ended": _iso(found.get("ProcessingEndTime")),
        "arn": found.get("ProcessingJobArn"),
        "console_url": console_url(found["ProcessingJobName"], region),
    }


def stop(name: str, region: str | None) -> dict:
    return aws.stop_job(name, region, "Processing", "processing", console_url)


def list_jobs(region: str | None, name_contains: str | None = None, max_results: int = 20) -> list[dict]:
    """The newest processing jobs first."""
    return aws.newest_jobs(region, "Processing", "processing", name_contains, max_results)


def _state(sagemaker_client, name: str) -> logs.JobState:
    found = sagemaker_client.describe_processing_job(ProcessingJobName=name)
    status, hosts = found["ProcessingJobStatus"], found.get("ProcessingResources", {}).get("ClusterConfig", {})
    return logs.JobState(status, f"-- {status}", hosts.get("InstanceCount", 1) > 1)


LOGS = logs.LogSource(LOG_GROUP, _state)


def stream_logs(name: str, region: str | None, **options) -> str:
    """Print the job's log lines (every instance's, in time order); with follow, until it ends. -> its status."""
    return logs.stream_logs(name, region, source=LOGS, **options)


def console_url(name: str, region: str) -> str:
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/processing-jobs/{name}"
