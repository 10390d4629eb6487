"""Following a SageMaker tuning job: its state, trial counts, best trial, each trial's hyperparameters and
objective; stop and list (plain boto3). A tuning job writes no log of its own: `logs` follows a trial's."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from launcher.sagemaker_backend import aws
from launcher.sagemaker_backend.training_jobs import _iso

FINAL_STATUSES = ("Completed", "Failed", "Stopped")
RANGE_KINDS = {
    "ContinuousParameterRanges": "continuous",
    "IntegerParameterRanges": "integer",
    "CategoricalParameterRanges": "categorical",
}


def _hyperparameters(tuned: dict) -> dict[str, Any]:
    """The SDK JSON-encodes categorical values ("\\"512\\""): decode what decodes."""
    decoded = {}
    for name, value in (tuned or {}).items():
        try:
            decoded[name] = json.loads(value)
        except (TypeError, ValueError):
            decoded[name] = value
        if isinstance(decoded[name], str):
            try:
                decoded[name] = json.loads(decoded[name])
            except ValueError:
                pass
    return decoded


def _trial(summary: dict) -> dict[str, Any]:
    objective = summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
    return {
        "job_name": summary["TrainingJobName"],
        "status": summary.get("TrainingJobStatus"),
        "objective": objective.get("Value"),
        "hyperparameters": _hyperparameters(summary.get("TunedHyperParameters")),
        "objective_status": summary.get("ObjectiveStatus"),
        "failure_reason": summary.get("FailureReason"),
        "started": _iso(summary.get("TrainingStartTime")),
        "ended": _iso(summary.get("TrainingEndTime")),
    }


def trials(name: str, region: str | None, max_results: int = 100) -> list[dict]:
    region = aws.resolve_region(region)
    client = aws.client("sagemaker", region)
    found: list[dict] = []
    with aws.aws_errors(f"listing the trials of {name}", job_name=name, region=region):
        pages = client.get_paginator("list_training_jobs_for_hyper_parameter_tuning_job").paginate(
            HyperParameterTuningJobName=name, PaginationConfig={"MaxItems": max_results}
        )
        for page in pages:
            found += [_trial(summary) for summary in page["TrainingJobSummaries"]]
    return found


def describe(name: str, region: str | None, *, with_trials: bool = True) -> dict[str, Any]:
    region = aws.resolve_region(region)
    client = aws.client("sagemaker", region)
    with aws.aws_errors(f"describing {name}", job_name=name, region=region):
        description = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    config = description.get("HyperParameterTuningJobConfig", {})
    counters = description.get("TrainingJobStatusCounters", {})
    best = description.get("BestTrainingJob")
    objective = config.get("HyperParameterTuningJobObjective", {})
    summary = {
        "job_name": name,
        "kind": "tuning",
        "status": description.get("HyperParameterTuningJobStatus"),
        "strategy": config.get("Strategy"),
        "objective": {"metric": objective.get("MetricName"), "type": objective.get("Type")},
        "max_jobs": config.get("ResourceLimits", {}).get("MaxNumberOfTrainingJobs"),
        "max_parallel_jobs": config.get("ResourceLimits", {}).get("MaxParallelTrainingJobs"),
        "trials": {
            "completed": counters.get("Completed", 0),
            "running": counters.get("InProgress", 0),
            "stopped": counters.get("Stopped", 0),
            "failed": counters.get("RetryableError", 0) + counters.get("NonRetryableError", 0),
        },
        "best": _trial(best) if best else None,
        "ranges": _ranges(config.get("ParameterRanges") or {}),
        "failure_reason": description.get("FailureReason"),
        "created": _iso(description.get("CreationTime")),
        "ended": _iso(description.get("HyperParameterTuningEndTime")),
        "console_url": console_url(name, region),
    }
    if with_trials:
        summary["trial_list"] = trials(name, region)
    return summary


def _ranges(ranges: dict) -> list[dict[str, Any]]:
    """The job's ParameterRanges as the rows `tune_report` draws from (name, type, scaling)."""
    return [
        {
            "hyperparameter": r["Name"],
            "type": kind,
            "range": ", ".join(r["Values"]) if "Values" in r else f"{r['MinValue']} .. {r['MaxValue']}",
            "scaling": r.get("ScalingType", "Auto"),
        }
        for key, kind in RANGE_KINDS.items()
        for r in ranges.get(key, [])
    ]


def progress_line(summary: dict) -> str:
    trials = summary["trials"]
    line = (
        f"[dfm tune] {summary['job_name']}: {summary['status']}, {trials['completed']} completed, "
        f"{trials['running']} running, {trials['stopped']} stopped, {trials['failed']} failed (of "
        f"{summary['max_jobs']})"
    )
    if summary.get("best"):
        line += f", best {summary['objective']['metric']}={summary['best']['objective']}"
    return line


def wait(
    name: str,
    region: str | None,
    *,
    echo: Callable[[str], None] = print,
    poll_seconds: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    watch: Callable[[dict], None] | None = None,
) -> dict:
    """Follow a tuning job to its end, a line each time its trial counts change; -> its summary with every trial.
    `watch` sees each summary (a terminal's bar)."""
    last = None
    while True:
        summary = describe(name, region, with_trials=False)
        if watch is not None:
            watch(summary)
        line = progress_line(summary)
        if line != last:
            echo(line)
            last = line
        if summary["status"] in FINAL_STATUSES:
            summary["trial_list"] = trials(name, region)
            return summary
        sleep(poll_seconds)


def stop(name: str, region: str | None) -> dict:
    return aws.stop_job(name, region, "HyperParameterTuning", "tuning", console_url)


def list_jobs(region: str | None, name_contains: str | None = None, max_results: int = 20) -> list[dict]:
    """The newest tuning jobs first."""
    return aws.newest_jobs(region, "HyperParameterTuning", "tuning", name_contains, max_results, strategy="Strategy")


def trial_to_follow(summary: dict) -> str | None:
    """The trial whose log `logs` shows: the best so far, else the newest."""
    if summary.get("best"):
        return summary["best"]["job_name"]
    listed = summary.get("trial_list") or []
    return max(listed, key=lambda t: t.get("started") or "")["job_name"] if listed else None


def console_url(name: str, region: str) -> str:
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/hyper-tuning-jobs/{name}"
