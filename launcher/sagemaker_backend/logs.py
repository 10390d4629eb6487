"""A job's CloudWatch log lines, from every instance, in time order; followed until the job ends. Each kind of
job names its log group and how its state is read (`LogSource`); the reading and following are the same."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from botocore.exceptions import ClientError

from launcher.sagemaker_backend import aws

TERMINAL_STATUSES = ("Completed", "Failed", "Stopped")
# The chief's metric lines (conventions.METRIC_DEFINITIONS): what the stall watchdog counts as progress.
METRIC_LINE = re.compile(r"\[dfm\] (train|eval) step=\d+")
# rank 0's step between the train lines: a terminal's progress bar reads it; the text log leaves it out
PROGRESS_LINE = re.compile(r"\[dfm\] progress step=\d+")

Echo = Callable[[str], None]


class JobState(NamedTuple):
    """A job's state as its logs are followed."""

    status: str  # the job's status (InProgress, Completed, ...)
    progress: str  # the line shown when it changes: "-- Training: ..."
    several_hosts: bool
    phase: str | None = None  # the phase the stall watch reads (training jobs' SecondaryStatus)
    entries: int | None = None  # how many times the job has entered the counted phase so far


@dataclass(frozen=True)
class LogSource:
    """Where a kind of job writes its logs, and how its state is read while they are followed."""

    log_group: str
    state: Callable[[Any, str], JobState]  # (sagemaker client, job name) -> its state


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
            logGroupName=self.log_group, logStreamNamePrefix=f"{self.job_name}/"
        )
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
                logGroupName=self.log_group, logStreamNames=streams[first : first + 100], startTime=self.start_ms
            )
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


# SageMaker's secondary status while the script runs: the only phase the stall watchdog counts. A spot job that
# was interrupted waits for capacity (Interrupted, Starting, Downloading...) up to its max_wait, and a RetryStrategy
# retry starts over: no metric line can come then.
TRAINING_PHASE = "Training"


@dataclass
class StallWatch:
    """Seconds spent in the Training phase since the last metric line, counted from the first line any host wrote
    (provisioning and the download come before it); the host silent longest is named as the likely culprit. A
    phase of None (a job kind without phases) always counts. Every return to Training (a resume after a spot
    interruption or a restart, seen as a phase change or as one more Training entry in the job's transitions)
    starts the silence again: the resumed script restores its checkpoint before its first metric line."""

    timeout_s: float
    clock: Callable[[], float] = time.monotonic
    silent_s: float = 0.0
    started: bool = False  # a host has written a line
    phase: str | None = None
    last_reading: float | None = None
    last_line: dict[str, tuple[float, str]] | None = None
    entries: int | None = None  # times the job had entered Training at the last reading

    def _counts(self) -> bool:
        return self.phase is None or self.phase == TRAINING_PHASE

    def _advance(self) -> float:
        now = self.clock()
        if self.started and self.last_reading is not None and self._counts():
            self.silent_s += now - self.last_reading
        self.last_reading = now
        return now

    def enter(self, phase: str | None, entries: int | None = None) -> str | None:
        """Note the job's phase (and how many times it has entered Training); -> the line to show when the watch
        starts waiting through a phase it does not count."""
        self._advance()
        counted, self.phase = self._counts(), phase
        returned = entries is not None and self.entries is not None and entries > self.entries
        if (phase == TRAINING_PHASE and not counted) or returned:
            self.silent_s = 0.0
        self.entries = entries if entries is not None else self.entries
        if self.started and counted and not self._counts():
            return (
                f"[dfm] stall watch: waiting while the job is {phase}; only time in {TRAINING_PHASE} counts "
                f"toward stall_timeout"
            )
        return None

    def saw(self, host: str, message: str) -> None:
        now = self._advance()
        self.last_line = {**(self.last_line or {}), host: (now, message.strip()[:160])}
        if not self.started or METRIC_LINE.search(message):
            self.started, self.silent_s = True, 0.0

    def check(self) -> None:
        now = self._advance()
        if not self.started or self.silent_s <= self.timeout_s:
            return
        host, (when, line) = min((self.last_line or {}).items(), key=lambda item: item[1][0])
        raise Stalled(
            f"no metric line for {self.silent_s:.0f} s in {self.phase or 'the job'} (stall_timeout "
            f"{self.timeout_s:.0f} s); silent longest: {host}, {now - when:.0f} s since its last line: {line}"
        )


def _render_event(event: dict, multi_host: bool, as_json: bool) -> str:
    host = _host_of(event["logStreamName"])
    message = event["message"].rstrip("\n")
    if as_json:
        return json.dumps({"timestamp": event["timestamp"], "host": host, "message": message})
    return f"[{host}] {message}" if multi_host else message


def _show_event(event: dict, multi_host: bool, as_json: bool, echo: Echo, watch) -> None:
    """A log event echoed (progress lines only in JSON: in text they are the bar's), and told to the watch."""
    if watch is not None:
        watch.line(_host_of(event["logStreamName"]), event["message"])
    if as_json or not PROGRESS_LINE.search(event["message"]):
        echo(_render_event(event, multi_host, as_json))


def _progress_line(description: dict) -> str:
    secondary = description.get("SecondaryStatus") or description["TrainingJobStatus"]
    transitions = description.get("SecondaryStatusTransitions") or []
    message = (
        transitions[-1].get("StatusMessage") if transitions and transitions[-1].get("Status") == secondary else None
    )
    return f"-- {secondary}" + (f": {aws.one_line(message)}" if message else "")


def _training_state(sagemaker_client, job_name: str) -> JobState:
    description = sagemaker_client.describe_training_job(TrainingJobName=job_name)
    groups = aws.instance_groups(description.get("ResourceConfig", {}))
    several = sum(g["instance_count"] for g in groups) > 1
    transitions = description.get("SecondaryStatusTransitions") or []
    entries = sum(1 for t in transitions if t.get("Status") == TRAINING_PHASE)
    phase = description.get("SecondaryStatus")
    return JobState(description["TrainingJobStatus"], _progress_line(description), several, phase, entries)


TRAINING = LogSource("/aws/sagemaker/TrainingJobs", _training_state)


def stream_logs(
    job_name: str,
    region: str | None,
    follow: bool = False,
    echo: Echo = print,
    *,
    poll_seconds: float = 10.0,
    as_json: bool = False,
    source: LogSource = TRAINING,
    stall: StallWatch | None = None,
    watch=None,
) -> str:
    """Print the job's log lines; with `follow`, keep polling until the job ends. Returns its status. With a
    `stall` watch, raises Stalled when the job prints no metric line for longer than its timeout in Training. A
    `watch` (job_watch.JobWatch: a terminal's bar) is told the phase and every line.

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
            state = source.state(sagemaker_client, job_name)
            status, progress, multi_host = state.status, state.progress, state.several_hosts
            if watch is not None:
                watch.phase(state.phase or status)
            if follow and not as_json and progress != last_progress:
                echo(progress)
                last_progress = progress
            waiting = stall.enter(state.phase, state.entries) if stall is not None else None
            if waiting and not as_json:
                echo(waiting)
            for event in cursor.new_events():
                _show_event(event, multi_host, as_json, echo, watch)
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
                        _show_event(event, multi_host, as_json, echo, watch)
                return status
            was_running = True
            time.sleep(poll_seconds)
