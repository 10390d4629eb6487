"""`PreparePlan`: one `dfm data prepare` job, derived from the spec once: its name, the processing cluster, the
Spark application's job, where its outputs go. Both backends read it: SageMaker Processing turns it into a
`ProcessingRequest`, local Spark runs the same application on this machine's folders. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping
from urllib.parse import urlparse

from launcher.data import prepare_job
from launcher.facts.conventions import fit_job_name
from launcher.plans.training_plan import job_timestamp
from launcher.spec import Spec

NAME_INFIX = "-prep-"
# The Spark processing image the job runs on (aws/sagemaker-spark-container, new_images.yml, 2026-04): Python 3.12
# on Amazon Linux 2023, Java 17; the SDK's tag is 3.5-cpu-py312-v1.3. Its runtime has numpy, pandas and boto3,
# no TensorFlow, protobuf or CRC32C.
PY_VERSION, CONTAINER_VERSION = "py312", "1.3"


@dataclass(frozen=True)
class PreparePlan:
    # What it was derived from: the local backend reads this machine's folders (local:), the places its errors
    # name and the features: proposal's sizes from it; a SageMaker job never reads local:.
    spec: Spec
    job_name: str
    region: str | None
    stats_only: bool
    stats: bool  # the job writes stats.json (prepare.stats, or stats_only)
    processor: Mapping[str, Any]  # PySparkProcessor's arguments, in the SDK's words
    spark_configuration: tuple[Mapping[str, Any], ...]  # EMR-style classifications
    job: Mapping[str, Any]  # the application's job, with the processing container's paths
    job_uri: str  # where that job is uploaded for the application to read
    outputs: Mapping[str, str]  # channel -> the S3 prefix its files go to (the training job's inputs)
    report_uri: str  # the statistics and the report
    bucket: str
    prefix: str | None  # under the bucket: the job's output prefix, where the SDK puts the app and its files
    event_logs: str | None
    write: Mapping[str, int]  # the write stage's tasks against the cluster's vCPUs


def job_name(spec: Spec, now: float | None = None) -> str:
    """`<name>-prep-YYMMDD-HHMMSS`, the spec's name cut so that the whole is a job name."""
    return fit_job_name(spec.name, NAME_INFIX + job_timestamp(now))


def spark_configuration(spec: Spec) -> tuple[Mapping[str, Any], ...]:
    """Parallelism from the processing cluster's cores (two tasks per vCPU)."""
    cores = prepare_job.cluster_vcpus(spec)
    return (
        {
            "Classification": "spark-defaults",
            "Properties": {
                "spark.default.parallelism": str(2 * cores),
                "spark.sql.shuffle.partitions": str(2 * cores),
                "spark.python.worker.reuse": "true",
            },
        },
    )


def processor_arguments(spec: Spec, name: str) -> dict[str, Any]:
    """PySparkProcessor's arguments."""
    prepare = spec.prepare
    kwargs: dict[str, Any] = {
        "role": spec.role,
        "instance_type": prepare.instance.type,
        "instance_count": prepare.instance.count,
        "framework_version": prepare.spark.version,
        "py_version": PY_VERSION,
        "container_version": CONTAINER_VERSION,
        "volume_size_in_gb": prepare.instance.volume_gb,
        "max_runtime_in_seconds": prepare.max_runtime,
        "base_job_name": name,
        # The SDK puts <job name>/input/conf and /input/py-files under these: the job's own output prefix.
        "configuration_location": spec.output.rstrip("/"),
        "dependency_location": spec.output.rstrip("/"),
    }
    if spec.vpc is not None:  # the SageMaker backend makes it the SDK's NetworkConfig
        kwargs["network_config"] = {
            "subnets": list(spec.vpc.subnets),
            "security_group_ids": list(spec.vpc.security_group_ids),
        }
    if spec.tags:
        kwargs["tags"] = [{"Key": k, "Value": v} for k, v in spec.tags.items()]
    if spec.environment:
        kwargs["env"] = dict(spec.environment)
    return kwargs


def build_prepare_plan(spec: Spec, name: str | None = None, *, stats_only: bool = False) -> PreparePlan:
    """The plan of a spec with a `prepare:` section; `name` fixes the job's name (--job-name, tests)."""
    assert spec.prepare is not None
    name = name or job_name(spec)
    output = urlparse(spec.output)
    return PreparePlan(
        spec=spec,
        job_name=name,
        region=spec.region,
        stats_only=stats_only,
        stats=bool(spec.prepare.stats or stats_only),
        processor=MappingProxyType(processor_arguments(spec, name)),
        spark_configuration=spark_configuration(spec),
        job=MappingProxyType(prepare_job.job_description(spec, local=False, stats_only=stats_only)),
        job_uri=f"{spec.output.rstrip('/')}/{name}/input/dfm/{prepare_job.JOB_FILE}",
        outputs=MappingProxyType(prepare_job.channel_uris(spec)),
        report_uri=prepare_job.report_uri(spec, name),
        bucket=output.netloc,
        prefix=output.path.strip("/") or None,
        event_logs=spec.prepare.event_logs,
        write=MappingProxyType(prepare_job.write_tasks(spec)),
    )
