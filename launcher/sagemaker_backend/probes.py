"""`dfm probe` on SageMaker: each runnable candidate one capped training job, built and submitted by the same path
as `dfm launch` (`training_request.build`, `training_jobs.submit`), up to max_parallel at a time, followed to its
end and measured.

`dryrun(probe) -> ProbeRequest` is pure (offline: the SDK builds each request); `execute(request)` submits exactly
those requests. Measured per probe: steady-state examples/s from the chief's metric lines in CloudWatch Logs, the
start-up phases from SecondaryStatusTransitions, BillableTimeInSeconds and TrainingTimeInSeconds, and each host's
instance metrics (namespace /aws/sagemaker/TrainingJobs, dimension Host=<job>/algo-N) over the training phase, read
once CloudWatch has published its last minute, per role, the GPU metrics per GPU. Any way out of `execute` stops
every probe job it may have started.
"""

from __future__ import annotations

import datetime as dt
import contextlib
import json
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from launcher.errors import DfmError
from launcher.facts import catalog
from launcher.plans import hosts
from launcher.plans.probe_plan import ProbePlan
from launcher.plans.probe_results import Measurement, ProbeInterrupted, Sample, steady_throughput, train_samples
from launcher.sagemaker_backend import aws, training_jobs, logs, training_request

Echo = Callable[[str], None]
NAMESPACE = "/aws/sagemaker/TrainingJobs"
INSTANCE_METRICS = ("CPUUtilization", "MemoryUtilization", "GPUUtilization", "GPUMemoryUtilization")


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
PERIOD_S = 60  # the instance metrics come one point a minute
PUBLISH_WAIT = dt.timedelta(minutes=5)  # at most this long after a job's end for its last minute of metrics
PER_VCPU = ("CPUUtilization",)  # summed over the host's vCPUs (up to 100 x vCPUs): divided back to a host's %
PER_GPU = ("GPUUtilization", "GPUMemoryUtilization")  # summed over the host's GPUs (up to 100 x GPUs): per GPU

Points = dict[str, dict[str, list[tuple[dt.datetime, float]]]]  # host -> metric -> (minute, value), as published
Phase = tuple[dt.datetime, dt.datetime]


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


def training_phases(description: dict) -> list[Phase]:
    """When the job trained: each Training status of SecondaryStatusTransitions, from its StartTime to its EndTime
    (else the next status's start, else the job's end). Downloading, start-up and the upload are left out; a spot
    job interrupted and resumed trains in more than one phase."""
    transitions = description.get("SecondaryStatusTransitions") or []
    phases = []
    for position, transition in enumerate(transitions):
        if transition.get("Status") != "Training" or not isinstance(transition.get("StartTime"), dt.datetime):
            continue
        later = transitions[position + 1].get("StartTime") if position + 1 < len(transitions) else None
        end = transition.get("EndTime") or later or description.get("TrainingEndTime")
        if isinstance(end, dt.datetime) and end > transition["StartTime"]:
            phases.append((transition["StartTime"], end))
    return phases


def phase_average(points: list[tuple[dt.datetime, float]], phases: list[Phase]) -> float | None:
    """The mean of one-minute points over the phases, each point weighted by how much of its minute lies in them."""
    total = weight = 0.0
    for minute, value in points:
        covered = sum(
            max(0.0, (min(minute + dt.timedelta(seconds=PERIOD_S), end) - max(minute, start)).total_seconds())
            for start, end in phases
        )
        total, weight = total + value * covered, weight + covered
    return total / weight if weight else None


def covers_end(points: Points, hosts_named: list[str], end: dt.datetime) -> bool:
    """Every host has published the minute in which the phase ended."""
    last_minute = end - dt.timedelta(seconds=PERIOD_S)
    return all(
        any(minute >= last_minute for series in points.get(host, {}).values() for minute, _ in series)
        for host in hosts_named
    )


def per_host(points: Points, phases: list[Phase], plan) -> dict[str, dict[str, float]]:
    """host -> metric -> its average over the training phases, in percent of the host (CPU divided by the host's
    vCPUs) or of one GPU (the GPU metrics divided by the host's GPUs)."""
    found: dict[str, dict[str, float]] = {}
    for host, metrics in points.items():
        info = catalog.instance(hosts.group_of(plan.instance_groups, host).instance_type)
        for metric, series in metrics.items():
            value = phase_average(series, phases)
            if value is None:
                continue
            units = (info.vcpus if metric in PER_VCPU else info.gpus if metric in PER_GPU else 1) if info else 1
            found.setdefault(host, {})[metric] = round(value / (units or 1), 1)
    return found


def role_average(by_host: dict[str, dict[str, float]], plan, role: str) -> dict[str, float]:
    """metric -> its mean over the hosts of one role ("worker": the chief and worker hosts; "ps": the parameter
    servers' own instances)."""
    of_role = [v for host, v in by_host.items() if hosts.group_of(plan.instance_groups, host).role == role]
    metrics = sorted({metric for values in of_role for metric in values})
    return {m: round(sum(v[m] for v in of_role if m in v) / sum(1 for v in of_role if m in v), 1) for m in metrics}


def instance_metrics(job_name: str, region: str, plan, description: dict) -> Points:
    """Every host's instance metrics over the job's training phases, one point a minute, as CloudWatch has them
    now (the last minute may not be published yet: `covers_end`)."""
    phases = training_phases(description)
    if not phases:
        return {}
    start = phases[0][0].replace(second=0, microsecond=0)
    end = phases[-1][1] + dt.timedelta(seconds=PERIOD_S)
    queries, keys = [], {}
    for h, host in enumerate(hosts.all_hosts(plan.instance_groups)):
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
                        "Period": PERIOD_S,
                        "Stat": "Average",
                    },
                }
            )
    cloudwatch = aws.client("cloudwatch", region)
    found: Points = {}
    with aws.aws_errors(f"reading the instance metrics of {job_name}", region=region):
        for first in range(0, len(queries), 500):  # GetMetricData takes at most 500 queries
            pages = cloudwatch.get_paginator("get_metric_data").paginate(
                MetricDataQueries=queries[first : first + 500], StartTime=start, EndTime=end
            )
            for page in pages:
                for result in page["MetricDataResults"]:
                    host, metric = keys[result["Id"]]
                    series = list(zip(result.get("Timestamps", []), result.get("Values", [])))
                    if series:
                        found.setdefault(host, {}).setdefault(metric, []).extend(series)
    return found


def metric_lines(job_name: str, region: str) -> dict[str, list[tuple[int, float]]]:
    """The job's train metric samples per host, read once from CloudWatch Logs."""
    found: list[dict] = []
    logs.stream_logs(job_name, region, follow=False, echo=lambda line: found.append(json.loads(line)), as_json=True)
    by_host: dict[str, list[tuple[int, float]]] = {}
    for event in found:
        for label, samples in train_samples([event["message"]]).items():
            by_host.setdefault(event["host"] + label, []).extend(samples)
    return by_host


def _or_nothing(read: Callable[[], Any], warn: Echo) -> Any:
    """What `read` returns, or None with a warning: a probe without its logs or metrics (no permission to read
    them, say) is still reported."""
    try:
        return read()
    except DfmError as err:
        warn(err.message)
        return None


def measurement(
    number: int,
    built: training_request.TrainingRequest,
    description: dict,
    samples: dict[str, list[Sample]],
    points: Points,
) -> Measurement:
    """What one ended probe measured, from its description, metric lines and instance metrics."""
    by_host = per_host(points, training_phases(description), built.plan)
    throughput = steady_throughput(samples)
    return Measurement(
        number,
        description["TrainingJobStatus"],
        built.job_name,
        reason=aws.one_line(description["FailureReason"]) if description.get("FailureReason") else None,
        examples_per_sec=throughput.median,
        throughput=throughput,
        startup_s=startup_seconds(description),
        billable_s=description.get("BillableTimeInSeconds"),
        training_s=description.get("TrainingTimeInSeconds"),
        wall_s=_seconds(description.get("TrainingEndTime"), description.get("CreationTime")),
        utilization=role_average(by_host, built.plan, "worker"),
        ps_utilization=role_average(by_host, built.plan, "ps"),
        hosts=by_host,
    )


# ------------------------------------------------------------------------------------------- executing
CLOCK_SKEW = dt.timedelta(minutes=5)  # this machine's clock against SageMaker's, when telling our job from an older one


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class _Ended:
    """A probe that has ended, waiting for CloudWatch to publish its last minute of instance metrics."""

    built: training_request.TrainingRequest
    description: dict
    samples: dict[str, list[tuple[int, float]]]
    points: Points = field(default_factory=dict)

    def settled(self, now: dt.datetime, warn: Echo) -> bool:
        """Read the metrics again: True once they cover the end of training, or after PUBLISH_WAIT (with a
        warning), or when there is nothing to wait for (no training phase, metrics not readable)."""
        built = self.built
        read = _or_nothing(lambda: instance_metrics(built.job_name, built.region, built.plan, self.description), warn)
        phases = training_phases(self.description)
        if read is None or not phases:
            return True
        self.points, end = read, phases[-1][1]
        if covers_end(read, hosts.all_hosts(built.plan.instance_groups), end):
            return True
        if now < end + PUBLISH_WAIT:
            return False
        warn(
            f"{built.job_name}: CloudWatch has not published every host's last minute of instance metrics "
            f"{PUBLISH_WAIT.seconds // 60} min after training ended: utilization is averaged over what it has"
        )
        return True

    def measured(self, number: int) -> Measurement:
        return measurement(number, self.built, self.description, self.samples, self.points)


def _resource_in_use(err: DfmError) -> bool:
    cause = err.__cause__
    return getattr(cause, "response", {}).get("Error", {}).get("Code") == "ResourceInUse"


def _created_since(built: training_request.TrainingRequest, since: dt.datetime) -> bool:
    """A job of this name exists and was created no earlier than `since` (this probe's, not an older one's)."""
    sagemaker = aws.client("sagemaker", built.region)
    try:
        with aws.aws_errors(f"describing {built.job_name}", job_name=built.job_name, region=built.region):
            created = sagemaker.describe_training_job(TrainingJobName=built.job_name).get("CreationTime")
    except aws.JobNotFound:
        return False
    return isinstance(created, dt.datetime) and created >= since


def _submit(built: training_request.TrainingRequest, now: dt.datetime, echo: Echo, warn: Echo) -> str | None:
    """None once the job exists, else why it was not created. A CreateTrainingJob that botocore retried and that
    SageMaker answered ResourceInUse went through the first time: that job is ours."""
    try:
        training_jobs.submit(built, echo=echo, warn=warn)
    except DfmError as err:
        if not (_resource_in_use(err) and _created_since(built, now - CLOCK_SKEW)):
            return err.message
        echo(f"[dfm probe] {built.job_name}: created by the first of CreateTrainingJob's attempts; following it")
    return None


def _stop_all(started: dict[int, training_request.TrainingRequest], why: str, echo: Echo, warn: Echo) -> list:
    """Stop every probe that may be running (a second Ctrl-C does not cut this short); each stopped one as a
    Measurement."""
    found = []
    for number, built in started.items():
        while True:
            try:
                training_jobs.stop(built.job_name, built.region)
            except KeyboardInterrupt:
                echo(f"[dfm probe] stopping {built.job_name} first")
                continue
            except aws.JobNotFound:
                break  # interrupted before CreateTrainingJob created it
            except DfmError as err:
                warn(f"could not stop {built.job_name}: {err.message}; stop it with: dfm stop {built.job_name}")
                found.append(Measurement(number, "InProgress", built.job_name, reason=f"not stopped: {err.message}"))
                break
            echo(f"[dfm probe] stopping {built.job_name} (candidate {number})")
            found.append(Measurement(number, "Stopped", built.job_name, reason=f"stopped by dfm probe: {why}"))
            break
    return found


class _Terminated(BaseException):
    """SIGTERM or SIGHUP (a closed terminal, a CI timeout), raised like Ctrl-C's KeyboardInterrupt: nothing on the
    way catches it before `execute` has stopped the probes."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):
        raise _Terminated(f"terminated by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def execute(
    probe_request: ProbeRequest,
    *,
    echo: Echo = print,
    warn: Echo = print,
    poll_seconds: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], dt.datetime] = _utc_now,
) -> list[Measurement]:
    """Submit the probes, at most max_parallel running at once, follow each to its end and measure it once
    CloudWatch has its instance metrics. A probe that fails is measured with its reason and the others go on.
    Whatever ends the probe early (Ctrl-C, SIGTERM, an AWS error, a bug) stops every probe job it may have started;
    all but a bug raise ProbeInterrupted with what was measured (and the error)."""
    pending = list(probe_request.trainings)
    started: dict[int, training_request.TrainingRequest] = {}  # may be running: to stop on any way out
    ended: dict[int, _Ended] = {}
    states: dict[int, str] = {}
    done: list[Measurement] = []
    sagemaker = None
    try:
        with _terminate_as_interrupt():
            while pending or started or ended:
                while pending and len(started) < probe_request.probe.max_parallel:
                    number, built = pending.pop(0)
                    started[number] = built  # before the call: once CreateTrainingJob is sent, the job may exist
                    refused = _submit(built, now(), echo, warn)
                    if refused is not None:
                        del started[number]
                        done.append(Measurement(number, "Failed", built.job_name, reason=refused))
                        echo(f"[dfm probe] candidate {number} not submitted: {refused}")
                for number, built in list(started.items()):
                    sagemaker = sagemaker or aws.client("sagemaker", built.region)
                    with aws.aws_errors(f"describing {built.job_name}", job_name=built.job_name, region=built.region):
                        description = sagemaker.describe_training_job(TrainingJobName=built.job_name)
                    state = description.get("SecondaryStatus") or description["TrainingJobStatus"]
                    if states.get(number) != state:
                        echo(f"[dfm probe] candidate {number} ({built.job_name}): {state}")
                        states[number] = state
                    if description["TrainingJobStatus"] in logs.TERMINAL_STATUSES:
                        samples = _or_nothing(lambda: metric_lines(built.job_name, built.region), warn) or {}
                        ended[number] = _Ended(built, description, samples)
                        del started[number]
                for number, waiting in list(ended.items()):
                    if waiting.settled(now(), warn):
                        measured = waiting.measured(number)
                        if measured.reason:
                            echo(f"[dfm probe] candidate {number} {measured.status}: {measured.reason}")
                        done.append(measured)
                        del ended[number]
                if started or ended:
                    sleep(poll_seconds)
    except BaseException as exc:
        error = DfmError(str(exc), 1) if isinstance(exc, _Terminated) else exc if isinstance(exc, DfmError) else None
        why = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else error.message if error else type(exc).__name__
        done += [waiting.measured(number) for number, waiting in ended.items()]
        done += _stop_all(started, why, echo, warn)
        if error is not None or isinstance(exc, KeyboardInterrupt):
            raise ProbeInterrupted(sorted(done, key=lambda m: m.number), error) from None
        raise
    return sorted(done, key=lambda m: m.number)
