"""`dfm probe` on SageMaker: each runnable candidate one capped training job, built and submitted by the same path
as `dfm launch` (`training_request.build`, `training_jobs.submit`), up to max_parallel at a time, followed to its
end and measured.

`dryrun(probe) -> ProbeRequest` is pure (offline: the SDK builds each request); `execute(request)` submits exactly
those requests. Measured per probe: steady-state examples/s from the chief's metric lines in CloudWatch Logs, the
start-up phases from SecondaryStatusTransitions, BillableTimeInSeconds, and each host's instance metrics
(namespace /aws/sagemaker/TrainingJobs, dimension Host=<job>/algo-N).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from launcher.errors import DfmError
from launcher.facts import catalog
from launcher.plans import hosts
from launcher.plans.probe_plan import ProbePlan
from launcher.plans.probe_results import Measurement, ProbeInterrupted, steady_throughput, train_samples
from launcher.sagemaker_backend import aws, training_jobs, logs, training_request

Echo = Callable[[str], None]
NAMESPACE = "/aws/sagemaker/TrainingJobs"
INSTANCE_METRICS = ("CPUUtilization", "MemoryUtilization", "GPUUtilization", "GPUMemoryUtilization")
PER_VCPU = "CPUUtilization"  # reported summed over the host's vCPUs (up to 100% x vCPUs): divided back to a host's %


@dataclass(frozen=True)
class ProbeRequest:
    probe: ProbePlan
    trainings: tuple[tuple[int, training_request.TrainingRequest], ...]  # (candidate number, its request)

    def document(self) -> dict[str, Any]:
        """The dry run: every probe's request, the refused candidates with their reasons, the cost ceiling."""
        settings = {c.number: list(c.settings) for c in self.probe.candidates}
        return {
            "probe": self.probe.name,
            "max_steps": self.probe.max_steps,
            "max_parallel": self.probe.max_parallel,
            "requests": [
                {
                    "candidate": number,
                    "settings": settings[number],
                    "job_name": built.job_name,
                    "cost": dict(built.plan.cost or {}),
                    **{k: v for k, v in built.document().items() if k in ("request", "uploads", "warnings")},
                }
                for number, built in self.trainings
            ],
            "refused": [
                {"candidate": c.number, "settings": list(c.settings), "errors": list(c.errors)}
                for c in self.probe.refused
            ],
            "cost_ceiling": self.probe.cost_ceiling(),
        }


def dryrun(probe: ProbePlan) -> ProbeRequest:
    return ProbeRequest(probe, tuple((c.number, training_request.build(c.plan)) for c in probe.runnable))


# ------------------------------------------------------------------------------------------- measuring
def _seconds(later: Any, earlier: Any) -> float | None:
    if isinstance(later, dt.datetime) and isinstance(earlier, dt.datetime):
        return max(0.0, (later - earlier).total_seconds())
    return None


def startup_seconds(description: dict) -> float | None:
    """Provisioning and download: from the first status transition to the start of Training."""
    transitions = description.get("SecondaryStatusTransitions") or []
    training = next((t for t in transitions if t.get("Status") == "Training"), None)
    if not transitions or training is None:
        return None
    return _seconds(training.get("StartTime"), transitions[0].get("StartTime"))


def metric_lines(job_name: str, region: str) -> dict[str, list[tuple[int, float]]]:
    """The job's train metric samples per host, read once from CloudWatch Logs."""
    found: list[dict] = []
    logs.stream_logs(job_name, region, follow=False, echo=lambda line: found.append(json.loads(line)), as_json=True)
    by_host: dict[str, list[tuple[int, float]]] = {}
    for event in found:
        for label, samples in train_samples([event["message"]]).items():
            by_host.setdefault(event["host"] + label, []).extend(samples)
    return by_host


def instance_metrics(job_name: str, region: str, plan, description: dict) -> dict[str, dict[str, float]]:
    """host -> metric -> its average over the job, in percent of the host (CPU divided by the host's vCPUs)."""
    start = description.get("TrainingStartTime") or description.get("CreationTime")
    end = description.get("TrainingEndTime") or dt.datetime.now(dt.timezone.utc)
    if not isinstance(start, dt.datetime):
        return {}
    margin = dt.timedelta(minutes=5)  # metrics come per minute; a short probe may fit inside one
    names = hosts.all_hosts(plan.instance_groups)
    queries, keys = [], {}
    for h, host in enumerate(names):
        for m, metric in enumerate(INSTANCE_METRICS):
            key = f"m{h}_{m}"
            keys[key] = (host, metric)
            queries.append(
                {
                    "Id": key,
                    "ReturnData": True,
                    "MetricStat": {
                        "Metric": {
                            "Namespace": NAMESPACE,
                            "MetricName": metric,
                            "Dimensions": [{"Name": "Host", "Value": f"{job_name}/{host}"}],
                        },
                        "Period": 60,
                        "Stat": "Average",
                    },
                }
            )
    cloudwatch = aws.client("cloudwatch", region)
    found: dict[str, dict[str, float]] = {}
    with aws.aws_errors(f"reading the instance metrics of {job_name}", region=region):
        for first in range(0, len(queries), 500):  # GetMetricData takes at most 500 queries
            pages = cloudwatch.get_paginator("get_metric_data").paginate(
                MetricDataQueries=queries[first : first + 500], StartTime=start - margin, EndTime=end + margin
            )
            for page in pages:
                for result in page["MetricDataResults"]:
                    if not result.get("Values"):
                        continue
                    host, metric = keys[result["Id"]]
                    value = sum(result["Values"]) / len(result["Values"])
                    if metric == PER_VCPU:
                        info = catalog.instance(hosts.group_of(plan.instance_groups, host).instance_type)
                        value = value / info.vcpus if info is not None else value
                    found.setdefault(host, {})[metric] = round(value, 1)
    return found


def _or_nothing(read: Callable[[], Any], warn: Echo) -> Any:
    """What `read` returns, or None with a warning: a probe without its logs or metrics (no permission to read
    them, say) is still reported."""
    try:
        return read()
    except DfmError as err:
        warn(err.message)
        return None


def measure(number: int, built: training_request.TrainingRequest, description: dict, warn: Echo = print) -> Measurement:
    job_name, region = built.job_name, built.region
    status = description["TrainingJobStatus"]
    per_host = _or_nothing(lambda: instance_metrics(job_name, region, built.plan, description), warn) or {}
    samples = _or_nothing(lambda: metric_lines(job_name, region), warn) or {}
    throughput = steady_throughput(samples)
    metrics = sorted({metric for values in per_host.values() for metric in values})
    utilization = {
        metric: round(
            sum(v[metric] for v in per_host.values() if metric in v) / sum(1 for v in per_host.values() if metric in v),
            1,
        )
        for metric in metrics
    }
    return Measurement(
        number,
        status,
        job_name,
        reason=aws.one_line(description["FailureReason"]) if description.get("FailureReason") else None,
        examples_per_sec=throughput.median,
        throughput=throughput,
        startup_s=startup_seconds(description),
        billable_s=description.get("BillableTimeInSeconds"),
        wall_s=_seconds(description.get("TrainingEndTime"), description.get("CreationTime")),
        utilization=utilization,
        hosts=per_host,
    )


# ------------------------------------------------------------------------------------------- executing
def execute(
    probe_request: ProbeRequest,
    *,
    echo: Echo = print,
    warn: Echo = print,
    poll_seconds: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Measurement]:
    """Submit the probes, at most max_parallel running at once, follow each to its end and measure it. A probe that
    fails is measured with its reason and the others go on; Ctrl-C stops every probe still running
    (ProbeInterrupted)."""
    pending = list(probe_request.trainings)
    active: dict[int, training_request.TrainingRequest] = {}
    states: dict[int, str] = {}
    done: list[Measurement] = []
    sagemaker = None
    try:
        while pending or active:
            while pending and len(active) < probe_request.probe.max_parallel:
                number, built = pending.pop(0)
                try:
                    training_jobs.submit(built, echo=echo, warn=warn)
                except DfmError as err:
                    done.append(Measurement(number, "Failed", built.job_name, reason=err.message))
                    echo(f"[dfm probe] candidate {number} not submitted: {err.message}")
                    continue
                active[number] = built
            for number, built in list(active.items()):
                sagemaker = sagemaker or aws.client("sagemaker", built.region)
                with aws.aws_errors(f"describing {built.job_name}", job_name=built.job_name, region=built.region):
                    description = sagemaker.describe_training_job(TrainingJobName=built.job_name)
                state = description.get("SecondaryStatus") or description["TrainingJobStatus"]
                if states.get(number) != state:
                    echo(f"[dfm probe] candidate {number} ({built.job_name}): {state}")
                    states[number] = state
                if description["TrainingJobStatus"] in logs.TERMINAL_STATUSES:
                    measured = measure(number, built, description, warn)
                    if measured.reason:
                        echo(f"[dfm probe] candidate {number} {measured.status}: {measured.reason}")
                    done.append(measured)
                    del active[number]
            if active:
                sleep(poll_seconds)
    except KeyboardInterrupt:
        for number, built in active.items():
            try:
                training_jobs.stop(built.job_name, built.region)
                echo(f"[dfm probe] stopping {built.job_name} (candidate {number})")
            except DfmError as err:
                warn(f"could not stop {built.job_name}: {err.message}")
        raise ProbeInterrupted(done) from None
    return sorted(done, key=lambda m: m.number)
