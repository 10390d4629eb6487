"""What a probe measured, and what it means for the full job: steady-state throughput from the scripts' metric
lines (warm-up excluded), cost per million examples and per epoch, the Pareto front of time against cost, and the
recommendation for a deadline or a budget. Pure: both backends hand their measurements in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from launcher.facts import conventions
from launcher.plans.probe_plan import Candidate, ProbePlan, gpu_workers

WARMUP_SHARE = 0.2  # the first fifth of the steps (and always the first window) is warm-up: graph building, caches
LOW_CPU_PERCENT = (
    50.0  # below this average CPU utilization a candidate's input pipeline, not its hardware, is the limit
)
_STEP = re.compile(r"\[dfm\] train step=(\d+)")
_SPEED = re.compile(next(m["Regex"] for m in conventions.METRIC_DEFINITIONS if m["Name"] == "train:examples_per_sec"))


class ProbeInterrupted(Exception):
    """Ctrl-C, or `error` (an AWS error, say): every probe dfm started is stopped; `measurements` holds what was
    measured by then, the stopped probes among them."""

    def __init__(self, measurements: list[Measurement], error: Exception | None = None):
        super().__init__("interrupted")
        self.measurements = measurements
        self.error = error


@dataclass(frozen=True)
class Measurement:
    number: int  # the candidate's
    status: str  # Completed | Failed | Stopped
    job_name: str
    reason: str | None = None  # why it failed
    examples_per_sec: float | None = None  # steady state, summed over the processes that report it
    startup_s: float | None = None  # submit (or start) to the first training step
    billable_s: float | None = None
    training_s: float | None = None  # TrainingTimeInSeconds: with billable_s, the spot saving
    wall_s: float | None = None
    utilization: Mapping[str, float] = field(default_factory=dict)  # metric -> mean over the chief and worker hosts
    ps_utilization: Mapping[str, float] = field(default_factory=dict)  # the same over the ps group's own hosts
    hosts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # host -> metric -> mean percent
    memory: Mapping[str, int] = field(default_factory=dict)  # local runs: host -> its peak memory, bytes


def train_samples(lines: Iterable[str], label_of=lambda line: "") -> dict[str, list[tuple[int, float]]]:
    """(step, examples/s) of every train metric line, per process label (SageMaker's metric regexes)."""
    found: dict[str, list[tuple[int, float]]] = {}
    for line in lines:
        step, speed = _STEP.search(line), _SPEED.search(line)
        if step and speed:
            found.setdefault(label_of(line), []).append((int(step.group(1)), float(speed.group(1))))
    return found


def steady_rate(samples: list[tuple[int, float]]) -> float | None:
    """Examples/s after warm-up: the first window and the first fifth of the steps dropped; the harmonic mean of
    the windows left (equal step windows: total examples over total time)."""
    if not samples:
        return None
    last = max(step for step, _ in samples)
    kept = [speed for step, speed in samples[1:] if step > WARMUP_SHARE * last] or [samples[-1][1]]
    kept = [speed for speed in kept if speed > 0]
    return len(kept) / sum(1 / speed for speed in kept) if kept else None


def steady_examples_per_sec(samples_by_label: Mapping[str, list[tuple[int, float]]]) -> float | None:
    rates = [rate for rate in (steady_rate(s) for s in samples_by_label.values()) if rate is not None]
    return sum(rates) if rates else None


# --------------------------------------------------------------------------------------------- the report
def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def hourly_usd(candidate: Candidate, measurement: Measurement | None) -> tuple[float | None, str]:
    """What the candidate's hosts cost per hour of training, and on what basis: the on-demand list price, or for a
    spot candidate that price x BillableTimeInSeconds / TrainingTimeInSeconds (AWS's own spot saving formula)."""
    price = candidate.usd_per_hour
    if price is None or candidate.plan.spot_max_wait is None:
        return price, "on-demand"
    billable, trained = (measurement.billable_s, measurement.training_s) if measurement else (None, None)
    if billable is None or not trained:
        return price, "on-demand (spot, its saving not measured)"
    return price * billable / trained, f"spot: billed {billable:g} s of {trained:g} s trained"


def row(candidate: Candidate, measurement: Measurement | None, probe: ProbePlan) -> dict[str, Any]:
    """One line of the report: what was measured and what it means for the full job (its time counts the start-up
    the probe measured)."""
    plan = candidate.plan
    price, price_basis = hourly_usd(candidate, measurement)
    speed = measurement.examples_per_sec if measurement else None
    startup = (measurement.startup_s if measurement else None) or 0.0
    out: dict[str, Any] = {
        "candidate": candidate.number,
        "settings": list(candidate.settings),
        "instances": " + ".join(f"{g.count} x {g.instance_type}" for g in plan.instance_groups),
        "distribution": plan.distribution.kind,
        "job_name": plan.job_name,
        "status": measurement.status if measurement else "not run",
        "reason": measurement.reason if measurement else None,
        "examples_per_sec": _round(speed, 1),
        "usd_per_hour": _round(price, 3),
        "price_basis": price_basis,
        "startup_s": _round(measurement.startup_s, 0) if measurement else None,
        "billable_s": measurement.billable_s if measurement else None,
        "utilization": dict(measurement.utilization) if measurement else {},
        "ps_utilization": dict(measurement.ps_utilization) if measurement else {},
        "memory": dict(measurement.memory) if measurement else {},
        "usd_per_million_examples": None,
        "epoch_s": None,
        "epoch_usd": None,
        "job_s": None,
        "job_usd": None,
        "note": None,
    }
    if speed:
        if price is not None:
            out["usd_per_million_examples"] = _round(price / 3600 / speed * 1e6, 4)
        if probe.rows:
            epoch_s = probe.rows / speed
            out.update(epoch_s=round(epoch_s, 1), job_s=round(epoch_s * probe.epochs + startup, 1))
            if price is not None:
                out.update(
                    epoch_usd=_round(epoch_s / 3600 * price, 4),
                    job_usd=_round(epoch_s * probe.epochs / 3600 * price, 4),
                )
    cpu = out["utilization"].get("CPUUtilization")
    if cpu is not None and cpu < LOW_CPU_PERCENT and not gpu_workers(plan):
        out["note"] = (
            f"CPU {cpu:.0f}% on average: the input pipeline, not the hardware, looks like the limit "
            "(more data threads, prefetch, Pipe/FastFile or more files before more or larger instances)"
        )
    return out


def sort_key(entry: Mapping[str, Any]) -> tuple:
    """Cheapest per epoch first (per million examples without a row count); unmeasured candidates last."""
    cost = entry["epoch_usd"] if entry["epoch_usd"] is not None else entry["usd_per_million_examples"]
    return (cost is None, cost if cost is not None else 0.0, -(entry["examples_per_sec"] or 0.0), entry["candidate"])


def rows(probe: ProbePlan, measurements: Iterable[Measurement]) -> list[dict[str, Any]]:
    by_number = {m.number: m for m in measurements}
    table = [row(c, by_number.get(c.number), probe) for c in probe.runnable]
    table.sort(key=sort_key)
    front = pareto_front(table)
    for entry in table:
        entry["pareto"] = entry["candidate"] in front
    return table


def _time_cost(entry: Mapping[str, Any]) -> tuple[float, float] | None:
    """(time, cost) per epoch, else per million examples."""
    if entry["epoch_s"] is not None and entry["epoch_usd"] is not None:
        return float(entry["epoch_s"]), float(entry["epoch_usd"])
    if entry["examples_per_sec"] and entry["usd_per_million_examples"] is not None:
        return 1e6 / entry["examples_per_sec"], float(entry["usd_per_million_examples"])
    return None


def pareto_front(table: Iterable[Mapping[str, Any]]) -> set[int]:
    """The candidates no other one beats on both time and cost."""
    points = {e["candidate"]: p for e in table if (p := _time_cost(e)) is not None}
    return {
        n
        for n, (t, c) in points.items()
        if not any(t2 <= t and c2 <= c and (t2, c2) != (t, c) for m, (t2, c2) in points.items() if m != n)
    }


def recommend(
    table: list[Mapping[str, Any]],
    probe: ProbePlan,
    *,
    deadline_h: float | None = None,
    budget_usd: float | None = None,
) -> dict[str, Any] | None:
    """The cheapest candidate whose full job ends within the deadline, the fastest whose full job costs at most the
    budget, or (neither given) the cheapest per epoch; with the --set lines to use. None: no candidate fits."""
    measured = [e for e in table if _time_cost(e) is not None]
    if deadline_h is not None:
        fits = [e for e in measured if e["job_s"] is not None and e["job_s"] <= deadline_h * 3600]
        chosen, why = (
            (min(fits, key=lambda e: _time_cost(e)[1]) if fits else None),
            f"the cheapest within {deadline_h:g} h",
        )
    elif budget_usd is not None:
        fits = [e for e in measured if e["job_usd"] is not None and e["job_usd"] <= budget_usd]
        chosen, why = (
            (min(fits, key=lambda e: _time_cost(e)[0]) if fits else None),
            f"the fastest within ${budget_usd:g}",
        )
    else:
        chosen, why = (min(measured, key=lambda e: _time_cost(e)[1]) if measured else None), "the cheapest per epoch"
    if chosen is None:
        return None
    return {"candidate": chosen["candidate"], "why": why, "set": [*probe.base_settings, *chosen["settings"]]}
