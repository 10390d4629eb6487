"""A trained model served on SageMaker: the model resolved (a training job's artifact and TensorFlow version, or a
given model.tar.gz), then the requests the SDK v2's own `TensorFlowModel(...).transformer(...).transform(...)` and
`TensorFlowModel(...).deploy(...)` send (CreateModel + CreateTransformJob; CreateModel + CreateEndpointConfig +
CreateEndpoint), built offline by the SDK with its client recording instead of sending, checked against botocore's
model; the dry run prints them, submit sends exactly them in order."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from launcher.errors import DfmError
from launcher.facts import inference_images, service_model
from launcher.plans.model_plan import DeployPlan, ModelSource, TransformPlan
from launcher.sagemaker_backend import aws, sdk

Echo = Callable[[str], None]
MODEL_CLASS = "sagemaker.tensorflow.TensorFlowModel"
MADE_BY = {"Key": "dfm:made-by", "Value": "dfm"}  # on what dfm creates, so dfm undeploy deletes only that
TRAINING_TAG = re.compile(r"/tensorflow-training:(?P<version>\d+\.\d+(?:\.\d+)?)-")


@dataclass(frozen=True)
class ModelRequests:
    """The calls one `dfm transform` / `dfm deploy` makes, whole and in order: what the dry run prints and what
    submit sends."""

    kind: str  # transform | endpoint
    name: str
    region: str
    plan: Any  # TransformPlan | DeployPlan
    calls: tuple[tuple[str, Mapping[str, Any]], ...]  # (operation, its request)

    def request(self, operation: str) -> dict[str, Any]:
        return next(json.loads(json.dumps(dict(r))) for op, r in self.calls if op == operation)

    def document(self) -> dict[str, Any]:
        model = self.plan.model
        return json.loads(
            json.dumps(
                {
                    "kind": self.kind,
                    "name": self.name,
                    "region": self.region,
                    "model": {
                        "class": MODEL_CLASS,
                        "model_data": model.model_data,
                        "framework_version": model.framework_version,
                        "training_job": model.training_job,
                        "size_bytes": model.size_bytes,
                    },
                    "cost": dict(self.plan.cost),
                    "warnings": list(self.plan.warnings),
                    "requests": [{"operation": op, "request": dict(r)} for op, r in self.calls],
                }
            )
        )


# ------------------------------------------------------------------------------------------------ the model
def resolve_model(
    model: str, *, region: str | None, role: str | None, framework_version: str | None, offline: bool
) -> ModelSource:
    """JOB_OR_MODEL -> ModelSource. A training job's name is described (DescribeTrainingJob: its artifact, its
    image's TensorFlow version, its role); an s3:// model.tar.gz is taken as given (its size read with HeadObject
    unless `offline`)."""
    region = aws.resolve_region(region)
    job, size = None, None
    if model.startswith("s3://"):
        model_data, version, job_role = model, None, None
        if not offline:
            size = _object_size(model, region)
    elif "/" in model or model.endswith(".tar.gz"):
        raise DfmError(
            f"{model}: give a training job's name or an s3:// model.tar.gz (upload a local one with aws s3 cp; "
            "--local scores a local model)"
        )
    else:
        job = model
        found, model_data = _job_artifact(model, region)
        image = found.get("AlgorithmSpecification", {}).get("TrainingImage", "")
        match = TRAINING_TAG.search(image)
        version = match["version"] if match else None
        job_role = found.get("RoleArn")
        size = _object_size(model_data, region)
    chosen = framework_version or version
    if chosen is None:
        chosen = inference_images.newest()
    full = inference_images.inference_version(chosen)
    if full is None:
        known = ", ".join(sorted(inference_images.versions(), key=lambda v: tuple(map(int, v.split(".")))))
        source = f"training job {job}'s image" if job and not framework_version else "--framework-version"
        raise DfmError(
            f"{source}: TensorFlow {chosen} has no SageMaker TensorFlow inference image the SDK v2 knows; "
            f"pass --framework-version with one of {known}"
        )
    chosen_role = role or job_role
    if not chosen_role:
        raise DfmError("no role for the model: pass --role arn:aws:iam::<account>:role/<name>")
    return ModelSource(model_data, full, chosen_role, region, job, size)


def _job_artifact(job: str, region: str) -> tuple[dict, str]:
    """-> (DescribeTrainingJob's answer, the job's model.tar.gz URI); a job without one is one line, exit 1."""
    with aws.aws_errors(f"describing training job {job}", region=region):  # AWS's own words if none
        found = aws.client("sagemaker", region).describe_training_job(TrainingJobName=job)
    model_data = found.get("ModelArtifacts", {}).get("S3ModelArtifacts")
    if not model_data:
        status = found.get("TrainingJobStatus")
        raise DfmError(f"training job {job} has no model artifact ({status}): serve a completed job", 1)
    return found, model_data


def download_artifact(model: str, region: str | None, into: Path) -> Path:
    """JOB_OR_MODEL's model.tar.gz (a training job's artifact, or an s3:// object) downloaded into the folder
    `into`; -> the local file."""
    region = aws.resolve_region(region)
    uri = model if model.startswith("s3://") else _job_artifact(model, region)[1]
    parts = urlparse(uri)
    target = into / "model.tar.gz"
    with aws.aws_errors(f"downloading the model {uri}", region=region):
        aws.client("s3", region).download_file(parts.netloc, parts.path.lstrip("/"), str(target))
    return target


def _object_size(uri: str, region: str) -> int | None:
    """The object's size; None where it cannot be read (the model is checked by SageMaker then)."""
    from botocore.exceptions import BotoCoreError, ClientError

    parts = urlparse(uri)
    try:
        head = aws.client("s3", region).head_object(Bucket=parts.netloc, Key=parts.path.lstrip("/"))
    except (ClientError, BotoCoreError):
        return None
    return int(head["ContentLength"])


# ------------------------------------------------------------------------------------------------ building
class _RecordingClient:
    """The SDK's SageMaker client, recording each create_* call instead of sending it (the rest refused)."""

    def __init__(self, real):
        self.meta = real.meta
        self.calls: list[tuple[str, dict]] = []

    def __getattr__(self, method: str):
        def record(**request):
            if not method.startswith("create_"):
                raise DfmError(f"dfm bug: the SDK asked {method} while building offline", 3)
            self.calls.append((self.meta.method_to_api_mapping[method], json.loads(json.dumps(request))))
            return {}

        return record


def _offline_model(model: ModelSource, name: str):
    """(recording client, TensorFlowModel) on a session that sends nothing."""
    sdk.sdk()
    logging.getLogger("sagemaker").setLevel(logging.WARNING)  # its "Creating ..." lines are not the user's
    from sagemaker.tensorflow import TensorFlowModel

    bucket = urlparse(model.model_data).netloc
    session = sdk.session_for(model.region, bucket)
    session._default_bucket = bucket  # the SDK would otherwise ask S3 whether the bucket exists
    client = _RecordingClient(session.sagemaker_client)
    session.sagemaker_client = client
    try:
        built = TensorFlowModel(
            model_data=model.model_data,
            role=model.role,
            framework_version=model.framework_version,
            sagemaker_session=session,
            name=name,
        )
    except (ValueError, TypeError) as err:
        raise DfmError(f"the SageMaker SDK refused the model: {aws.one_line(err)}", 2) from err
    return client, built


def build_transform(plan: TransformPlan) -> ModelRequests:
    client, model = _offline_model(plan.model, plan.job_name)
    try:
        transformer = model.transformer(
            instance_count=plan.instance_count,
            instance_type=plan.instance_type,
            strategy=plan.strategy,
            assemble_with=plan.split_type,
            output_path=plan.output_path,
            accept=plan.accept,
            max_payload=plan.max_payload,
            tags=[MADE_BY],
        )
        transformer.transform(
            plan.data,
            content_type=plan.content_type,
            split_type=plan.split_type,
            job_name=plan.job_name,
            wait=False,
            logs=False,
        )
    except (ValueError, TypeError) as err:
        raise DfmError(f"the SageMaker SDK refused the transform job: {aws.one_line(err)}", 2) from err
    return _checked("transform", plan.job_name, plan, client)


def build_deploy(plan: DeployPlan) -> ModelRequests:
    client, model = _offline_model(plan.model, plan.endpoint_name)
    options: dict[str, Any] = {"endpoint_name": plan.endpoint_name, "wait": False, "tags": [MADE_BY]}
    if plan.serverless_memory is not None:
        from sagemaker.serverless import ServerlessInferenceConfig

        options["serverless_inference_config"] = ServerlessInferenceConfig(
            memory_size_in_mb=plan.serverless_memory, max_concurrency=plan.max_concurrency
        )
    else:
        options.update(initial_instance_count=plan.instance_count, instance_type=plan.instance_type)
    try:
        model.deploy(**options)
    except (ValueError, TypeError) as err:
        raise DfmError(f"the SageMaker SDK refused the endpoint: {aws.one_line(err)}", 2) from err
    return _checked("endpoint", plan.endpoint_name, plan, client)


def _checked(kind: str, name: str, plan, client: _RecordingClient) -> ModelRequests:
    for operation, request in client.calls:
        validate(client, operation, request)
    calls = tuple((op, MappingProxyType(request)) for op, request in client.calls)
    return ModelRequests(kind, name, plan.model.region, plan, calls)


def validate(client, operation: str, request: dict) -> None:
    """botocore's own validation of the request, then the service's limits (enums, lengths, patterns)."""
    from botocore.validate import ParamValidator

    shape = client.meta.service_model.operation_model(operation).input_shape
    report = ParamValidator().validate(request, shape)
    if report.has_errors():
        raise DfmError(f"the {operation} request would be refused: {aws.one_line(report.generate_report())}", 2)
    refused = [f"{path}: {text}" for path, text in service_model.walk(request, service_model.MODEL_SHAPES[operation])]
    if refused:
        raise DfmError(f"the {operation} request would be refused: {aws.one_line('; '.join(refused))}", 2)


# ------------------------------------------------------------------------------------------------ sending
def submit(requests: ModelRequests, *, echo: Echo = print) -> str:
    """Sends each request exactly as built, in order; if one is refused, what was made before it is deleted."""
    client = aws.client("sagemaker", requests.region)
    made: list[tuple[str, Mapping[str, Any]]] = []
    try:
        for operation, request in requests.calls:
            method = re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
            with aws.aws_errors(f"{operation} {requests.name}", region=requests.region):
                getattr(client, method)(**json.loads(json.dumps(dict(request))))
            made.append((operation, request))
    except DfmError:
        for operation, request in reversed(made):
            _delete_made(client, operation, request, echo)
        raise
    echo(f"submitted {requests.kind} {requests.name}")
    return requests.name


def _delete_made(client, operation: str, request: Mapping[str, Any], echo: Echo) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    deletes = {
        "CreateModel": ("delete_model", "ModelName", "model"),
        "CreateEndpointConfig": ("delete_endpoint_config", "EndpointConfigName", "endpoint config"),
    }
    if operation not in deletes:
        return
    method, key, what = deletes[operation]
    try:
        getattr(client, method)(**{key: request[key]})
        echo(f"deleted {what} {request[key]} (made before the refusal)")
    except (ClientError, BotoCoreError):
        echo(f"could not delete {request[key]}: delete it in the console")
