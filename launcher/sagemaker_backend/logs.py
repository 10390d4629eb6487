"""A job's CloudWatch log lines, from every instance, in time order; followed until the job ends. Each kind of
job names its log group and how its state is read (`LogSource`); the reading and following are the same."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from botocore.exceptions import ClientError

from launcher.sagemaker_backend import aws

TERMINAL_STATUSES = ("Completed", "Failed", "Stopped")
# The chief's metric lines (conventions.METRIC_DEFINITIONS): what the stall watchdog counts as progress.
METRIC_LINE = re.compile(r"\[dfm\] (train|eval) step=\d+")

Echo = Callable[[str], None]


@dataclass(frozen=True)
class LogSource:
    """Where a kind of job writes its logs, and how its state is read while they are followed."""

    log_group: str
    state: Callable[[Any, str], tuple[str, str, bool]]  # (sagemaker client, job) -> (status, progress line, several hosts)


def _host_of(stream_name: str) -> str:
    # Streams are named <job>/<host>-<epoch seconds>, e.g. deepfm-ps-.../algo-2-1700000000
    host = stream_name.split("/", 1)[-1]
    return re.sub(r"-\d{9,}$", "", host)


class _LogCursor:
    """Reads a job's CloudWatch events once each, across all of its instances' streams."""

    def __init__(self, logs_client, log_group: str, job_name: str):
        self.logs, self.log_group, self.job_name = logs_client, log_group, job_name
        self.start_ms, self.ids_at_start = 0, set()

    def _streams(self) -> list[str]:
        names = []
        pages = self.logs.get_paginator("describe_log_streams").paginate(
            logGroupName=self.log_group, logStreamNamePrefix=f"{self.job_name}/")
        for page in pages:
            names += [stream["logStreamName"] for stream in page["logStreams"]]
        return names

    def new_events(self) -> list[dict]:
        try:
            streams = self._streams()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []  # no instance has written a line yet
            raise
        events = []
        for first in range(0, len(streams), 100):  # FilterLogEvents takes at most 100 stream names
            pages = self.logs.get_paginator("filter_log_events").paginate(
                logGroupName=self.log_group, logStreamNames=streams[first:first + 100], startTime=self.start_ms)
            for page in pages:
                events += page["events"]
        fresh = [e for e in events if e["eventId"] not in self.ids_at_start]
        fresh.sort(key=lambda e: (e["timestamp"], e.get("ingestionTime", 0)))
        if fresh:
            last = fresh[-1]["timestamp"]
            previous = self.ids_at_start if last == self.start_ms else set()
            self.start_ms = last
            self.ids_at_start = previous | {e["eventId"] for e in fresh if e["timestamp"] == last}
        return fresh


class Stalled(Exception):
    """The job printed no metric line for longer than its stall timeout."""

    def stopped(self, job_name: str) -> str:
        """The one line said when dfm has stopped a stalled job."""
        return f"job {job_name} stalled: {self}; dfm stopped it"


@dataclass
class StallWatch:
    """Seconds since the last metric line, counted from the first line any host wrote (provisioning and the
    download come before it); the host silent longest is named as the likely culprit."""

    timeout_s: float
    clock: Callable[[], float] = time.monotonic
    last_metric: float | None = None
    last_line: dict[str, tuple[float, str]] | None = None

    def saw(self, host: str, message: str) -> None:
        now = self.clock()
        self.last_line = {**(self.last_line or {}), host: (now, message.strip()[:160])}
        if self.last_metric is None or METRIC_LINE.search(message):
            self.last_metric = now

    def check(self) -> None:
        if self.last_metric is None:
            return
        now = self.clock()
        if now - self.last_metric <= self.timeout_s:
            return
        host, (when, line) = min((self.last_line or {}).items(), key=lambda item: item[1][0])
        raise Stalled(f"no metric line for {now - self.last_metric:.0f} s (stall_timeout {self.timeout_s:.0f} s); "
                      f"silent longest: {host}, {now - when:.0f} s since its last line: {line}")


def _render_event(event: dict, multi_host: bool, as_json: bool) -> str:
    host = _host_of(event["logStreamName"])
    message = event["message"].rstrip("\n")
    if as_json:
        return json.dumps({"timestamp": event["timestamp"], "host": host, "message": message})
    return f"[{host}] {message}" if multi_host else message


def _progress_line(description: dict) -> str:
    secondary = description.get("SecondaryStatus") or description["TrainingJobStatus"]
    transitions = description.get("SecondaryStatusTransitions") or []
    message = transitions[-1].get("StatusMessage") if transitions and transitions[-1].get("Status") == secondary else None
    return f"-- {secondary}" + (f": {aws.one_line(message)}" if message else "")


def _training_state(sagemaker_client, job_name: str) -> tuple[str, str, bool]:
    description = sagemaker_client.describe_training_job(TrainingJobName=job_name)
    groups = aws.instance_groups(description.get("ResourceConfig", {}))
    return description["TrainingJobStatus"], _progress_line(description), sum(g["instance_count"] for g in groups) > 1


TRAINING = LogSource("/aws/sagemaker/TrainingJobs", _training_state)


def stream_logs(job_name: str, region: str | None, follow: bool = False, echo: Echo = print, *,
                poll_seconds: float = 10.0, as_json: bool = False, source: LogSource = TRAINING,
                stall: StallWatch | None = None) -> str:
    """Print the job's log lines; with `follow`, keep polling until the job ends. Returns its status. With a
    `stall` watch, raises Stalled when the job prints no metric line for longer than its timeout.

    Following in text, a `-- <state>` line marks each change of SageMaker's secondary status (starting,
    downloading, training, uploading...): minutes pass before an instance writes its first line.
    """
    region = aws.resolve_region(region)
    session = aws.boto_session(region)
    sagemaker_client, logs_client = session.client("sagemaker"), session.client("logs")
    cursor = _LogCursor(logs_client, source.log_group, job_name)
    was_running, last_progress = False, None
    with aws.aws_errors(f"reading the logs of {job_name}", job_name=job_name, region=region):
        while True:
            status, progress, multi_host = source.state(sagemaker_client, job_name)
            if follow and not as_json and progress != last_progress:
                echo(progress)
                last_progress = progress
            for event in cursor.new_events():
                echo(_render_event(event, multi_host, as_json))
                if stall is not None:
                    stall.saw(_host_of(event["logStreamName"]), event["message"])
            if not follow:
                return status
            if stall is not None and status not in TERMINAL_STATUSES:
                stall.check()
            if status in TERMINAL_STATUSES:
                if was_running:  # lines written just before the end reach CloudWatch a little later
                    time.sleep(poll_seconds)
                    for event in cursor.new_events():
                        echo(_render_event(event, multi_host, as_json))
                return status
            was_running = True
            time.sleep(poll_seconds)


