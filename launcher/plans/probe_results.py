"""What a probe measured, and what it means for the full job: steady-state throughput from the scripts' metric
lines (warm-up and the windows holding other work left out, at least MIN_WINDOWS of them, with their spread), cost
per million examples and per epoch, the Pareto front of time against cost, which candidates cannot be told apart,
and the recommendation for a deadline or a budget. Pure: both backends hand their measurements in.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from launcher.facts import conventions
from launcher.plans.probe_plan import Candidate, ProbePlan, gpu_workers

WARMUP_SHARE = 0.2  # the first fifth of the steps (and always the first window) is warm-up: graph building, caches
MIN_WINDOWS = 4  # clean windows after warm-up a figure needs; fewer: the candidate is "not measured"
SAME_WITHIN = 0.10  # medians closer than this share (or overlapping ranges) cannot be told apart
LOW_CPU_PERCENT = (
    50.0  # below this average CPU utilization a candidate's input pipeline, not its hardware, is the limit
)
COMPLETED = "Completed"
_STEP = re.compile(r"\[dfm\] train step=(\d+)")
_SPEED = re.compile(next(m["Regex"] for m in conventions.METRIC_DEFINITIONS if m["Name"] == "train:examples_per_sec"))
# Work between train lines that a timed window must not hold: an evaluation, a checkpoint, the end of the data (the
# next epoch's input is built, its shuffle buffer filled).
_OTHER_WORK = re.compile(r"\[dfm\] (?:eval|checkpoint) step=(\d+)|epoch \d+/\d+ done at step (\d+)")


class ProbeInterrupted(Exception):
    """Ctrl-C, or `error` (an AWS error, say): every probe dfm started is stopped; `measurements` holds what was
    measured by then, the stopped probes among them."""

    def __init__(self, measurements: list[Measurement], error: Exception | None = None):
        super().__init__("interrupted")
        self.measurements = measurements
        self.error = error


@dataclass(frozen=True)
class Throughput:
    """Steady-state examples/s over the clean windows after warm-up (summed over the processes that report their
    own share): the median window and the spread, or why there is no figure."""

    median: float | None = None
    low: float | None = None  # the slowest window
    high: float | None = None  # the fastest window
    q1: float | None = None
    q3: float | None = None
    windows: int = 0  # clean windows the figure rests on (the fewest of any process)
    left_out: int = 0  # windows after warm-up left out: an evaluation, a checkpoint or the data's end inside
    reason: str | None = None  # why not measured

    def document(self) -> dict[str, Any]:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Measurement:
    number: int  # the candidate's
    status: str  # Completed | Failed | Stopped
    job_name: str
    reason: str | None = None  # why it failed
    examples_per_sec: float | None = None  # steady state (the median window), summed over the reporting processes
    startup_s: float | None = None  # submit (or start) to the first training step
    billable_s: float | None = None
    training_s: float | None = None  # TrainingTimeInSeconds: with billable_s, the spot saving
    wall_s: float | None = None
    utilization: Mapping[str, float] = field(default_factory=dict)  # metric -> mean over the chief and worker hosts
    ps_utilization: Mapping[str, float] = field(default_factory=dict)  # the same over the ps group's own hosts
    hosts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # host -> metric -> mean percent
    memory: Mapping[str, int] = field(default_factory=dict)  # local runs: host -> its peak memory, bytes
    throughput: Throughput | None = None  # the figure's spread, or why there is none


Sample = tuple[int, "float | None"]  # (step, examples/s) of a train line; (step, None): other work at that step


def train_samples(lines: Iterable[str], label_of=lambda line: "") -> dict[str, list[Sample]]:
    """(step, examples/s) of every train metric line (SageMaker's metric regexes), and (step, None) of every line of
    other work (an evaluation, a checkpoint, an epoch's end), per process label, in the order printed."""
    found: dict[str, list[Sample]] = {}
    for line in lines:
        step, speed = _STEP.search(line), _SPEED.search(line)
        if step and speed:
            found.setdefault(label_of(line), []).append((int(step.group(1)), float(speed.group(1))))
            continue
        other = _OTHER_WORK.search(line)
        if other:
            found.setdefault(label_of(line), []).append((int(other.group(1) or other.group(2)), None))
    return found


def clean_windows(samples: list[Sample], other_work: Iterable[int] = ()) -> tuple[list[float], int, int]:
    """(examples/s of each clean window after warm-up, windows left out for other work, train lines after warm-up).
    Warm-up: the first window and the first fifth of the steps. A window (a, b] is left out when other work (of this
    process or `other_work`'s steps, from any process) falls at a step from a to b."""
    train = sorted((step, speed) for step, speed in samples if speed is not None)  # log events may come unordered
    work = {step for step, speed in samples if speed is None} | set(other_work)
    if not train:
        return [], 0, 0
    last = max(step for step, _ in train)
    kept, left_out, after = [], 0, 0
    for (start, _), (end, speed) in zip(train, train[1:]):
        if end <= WARMUP_SHARE * last:
            continue
        after += 1
        if any(start <= step <= end for step in work):
            left_out += 1
        elif speed > 0:
            kept.append(speed)
    return kept, left_out, after


def _not_measured(kept: int, left_out: int, after: int) -> str:
    why = f"{after} train line(s) after warm-up, {kept} clean, need {MIN_WINDOWS}"
    if left_out:
        why += f" ({left_out} held an evaluation, a checkpoint or the data's end: a larger sample, or"
        return why + " fewer hyperparameters.log_steps)"
    return why + ": raise --max-steps or lower hyperparameters.log_steps"


def steady_throughput(samples_by_label: Mapping[str, list[Sample]]) -> Throughput:
    """The steady state of every process that reports its own share, summed: each process's median clean window
    and spread (quartiles, slowest and fastest), or "not measured" with the reason when a process has fewer than
    MIN_WINDOWS clean windows after warm-up."""
    work = {step for samples in samples_by_label.values() for step, speed in samples if speed is None}
    parts, left_out = [], 0
    for label, samples in samples_by_label.items():
        if not any(speed is not None for _, speed in samples):
            continue
        kept, dropped, after = clean_windows(samples, work)
        left_out += dropped
        if len(kept) < MIN_WINDOWS:
            return Throughput(
                windows=len(kept),
                left_out=dropped,
                reason=(f"{label}: " if label else "") + (_not_measured(len(kept), dropped, after)),
            )
        q1, _, q3 = statistics.quantiles(kept, n=4, method="inclusive")
        parts.append((statistics.median(kept), min(kept), max(kept), q1, q3, len(kept)))
    if not parts:
        return Throughput(reason="no train line with examples_per_sec in the logs")
    median, low, high, q1, q3 = (sum(p[i] for p in parts) for i in range(5))
    return Throughput(median, low, high, q1, q3, min(p[5] for p in parts), left_out)


def steady_examples_per_sec(samples_by_label: Mapping[str, list[Sample]]) -> float | None:
    return steady_throughput(samples_by_label).median


def indistinguishable(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two measured rows this probe cannot tell apart: their ranges over windows (slowest to fastest) overlap, or
    their medians differ by less than SAME_WITHIN."""
    x, y = a["examples_per_sec"], b["examples_per_sec"]
    if abs(x - y) < SAME_WITHIN * max(x, y):
        return True
    (lo_a, hi_a), (lo_b, hi_b) = _range(a), _range(b)
    return lo_a <= hi_b and lo_b <= hi_a


def _range(entry: Mapping[str, Any]) -> tuple[float, float]:
    spread = entry.get("spread") or {}
    speed = entry["examples_per_sec"]
    return (spread.get("low") or speed, spread.get("high") or speed)


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
    the probe measured). A completed run without a steady-state figure is "not measured", with the reason."""
    plan = candidate.plan
    price, price_basis = hourly_usd(candidate, measurement)
    throughput = measurement.throughput if measurement else None
    speed = measurement.examples_per_sec if measurement else None
    startup = (measurement.startup_s if measurement else None) or 0.0
    status = measurement.status if measurement else "not run"
    reason = measurement.reason if measurement else None
    if status == COMPLETED and not speed:
        status, reason = "not measured", (throughput.reason if throughput else None) or reason
    out: dict[str, Any] = {
        "candidate": candidate.number,
        "settings": list(candidate.settings),
        "instances": " + ".join(f"{g.count} x {g.instance_type}" for g in plan.instance_groups),
        "distribution": plan.distribution.kind,
        "job_name": plan.job_name,
        "status": status,
        "reason": reason,
        "examples_per_sec": _round(speed, 1) if status == COMPLETED else None,
        "spread": throughput.document() if throughput and status == COMPLETED else None,
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
    speed = out["examples_per_sec"]
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


def measured(entry: Mapping[str, Any]) -> bool:
    """A completed run with a steady-state figure: the only kind a report ranks first or recommends."""
    return entry["status"] == COMPLETED and bool(entry["examples_per_sec"])


def sort_key(entry: Mapping[str, Any]) -> tuple:
    """Cheapest per epoch first (per million examples without a row count); unmeasured candidates last."""
    cost = entry["epoch_usd"] if entry["epoch_usd"] is not None else entry["usd_per_million_examples"]
    usable = measured(entry) and cost is not None
    return (not usable, cost if usable else 0.0, -(entry["examples_per_sec"] or 0.0), entry["candidate"])


def local_sort_key(entry: Mapping[str, Any]) -> tuple:
    """Fastest first (every local candidate ran on the same cores: its price is not what it costs here)."""
    return (not measured(entry), -(entry["examples_per_sec"] or 0.0), entry["candidate"])


def rows(probe: ProbePlan, measurements: Iterable[Measurement], *, local: bool = False) -> list[dict[str, Any]]:
    by_number = {m.number: m for m in measurements}
    table = [row(c, by_number.get(c.number), probe) for c in probe.runnable]
    table.sort(key=local_sort_key if local else sort_key)
    front = pareto_front(table)
    groups = indistinguishable_groups(table)
    for entry in table:
        entry["pareto"] = entry["candidate"] in front
        entry["same_as"] = next((sorted(set(g) - {entry["candidate"]}) for g in groups if entry["candidate"] in g), [])
    return table


def indistinguishable_groups(table: Iterable[Mapping[str, Any]]) -> list[list[int]]:
    """The measured candidates this probe cannot tell apart, joined in groups (a tie of a tie is a tie); groups of
    two or more, each in candidate order."""
    entries = [e for e in table if measured(e)]
    groups: list[set[int]] = []
    for e in entries:
        joined = {e["candidate"]}
        for other in entries:
            if other is not e and indistinguishable(e, other):
                joined.add(other["candidate"])
        for group in [g for g in groups if g & joined]:
            joined |= group
            groups.remove(group)
        groups.append(joined)
    return sorted((sorted(g) for g in groups if len(g) > 1), key=lambda g: g[0])


def _time_cost(entry: Mapping[str, Any]) -> tuple[float, float] | None:
    """(time, cost) per epoch, else per million examples; None for a candidate not measured."""
    if not measured(entry):
        return None
    if entry["epoch_s"] is not None and entry["epoch_usd"] is not None:
        return float(entry["epoch_s"]), float(entry["epoch_usd"])
    if entry["usd_per_million_examples"] is not None:
        return 1e6 / entry["examples_per_sec"], float(entry["usd_per_million_examples"])
    return None


def pareto_front(table: Iterable[Mapping[str, Any]]) -> set[int]:
    """The measured candidates no other one beats on both time and cost."""
    points = {e["candidate"]: p for e in table if (p := _time_cost(e)) is not None}
    return {
        n
        for n, (t, c) in points.items()
        if not any(t2 <= t and c2 <= c and (t2, c2) != (t, c) for m, (t2, c2) in points.items() if m != n)
    }


def launchable(settings: Iterable[str]) -> list[str]:
    """--set lines a `dfm launch` on SageMaker takes: the local-only ones (`local.*`) left out."""
    return [line for line in settings if not line.strip().startswith("local.") and line.strip() != "local"]


def _key(line: str) -> str:
    return line.partition("=")[0].strip()


def recommend(
    table: list[Mapping[str, Any]],
    probe: ProbePlan,
    *,
    deadline_h: float | None = None,
    budget_usd: float | None = None,
    local: bool = False,
) -> dict[str, Any] | None:
    """The cheapest candidate whose full job ends within the deadline, the fastest whose full job costs at most the
    budget, or (neither given) the cheapest per epoch; with the --set lines to use. Only completed, measured
    candidates count. Locally: the fastest (of those within the deadline or budget), see `_recommend_local`.
    None: no candidate fits."""
    measured_rows = [e for e in table if _time_cost(e) is not None or (local and measured(e))]
    if deadline_h is not None:
        fits = [e for e in measured_rows if e["job_s"] is not None and e["job_s"] <= deadline_h * 3600]
        why = f"the {'fastest' if local else 'cheapest'} within {deadline_h:g} h"
    elif budget_usd is not None:
        fits = [e for e in measured_rows if e["job_usd"] is not None and e["job_usd"] <= budget_usd]
        why = f"the fastest within ${budget_usd:g}"
    else:
        fits, why = measured_rows, "the fastest here" if local else "the cheapest per epoch"
    if not fits:
        return None
    if local:
        return _recommend_local(fits, table, probe, why)
    by_time = budget_usd is not None and deadline_h is None
    chosen = min(fits, key=lambda e: _time_cost(e)[0 if by_time else 1])
    return {
        "candidate": chosen["candidate"],
        "why": why,
        "set": launchable([*probe.base_settings, *chosen["settings"]]),
        "not_told_apart": [],
    }


LOCAL_BLIND = ("instance.type",)  # what a local probe cannot tell apart: every candidate ran on the same cores


def _recommend_local(
    fits: list[Mapping[str, Any]], table: list[Mapping[str, Any]], probe: ProbePlan, why: str
) -> dict[str, Any]:
    """The fastest candidate, unless another one is indistinguishable from it in anything but what a local run
    cannot tell (instance types): then no candidate (`candidate` and `set` None), only the tie and what differs.
    The instance type is never recommended from a local probe when the candidates try several."""
    best = max(fits, key=lambda e: e["examples_per_sec"])
    tied = [e for e in fits if e is not best and indistinguishable(e, best)]
    values: dict[str, set[str]] = {}
    for entry in table:
        for line in entry["settings"]:
            values.setdefault(_key(line), set()).add(line)
    blind = {key for key, lines in values.items() if key in LOCAL_BLIND and len(lines) > 1}
    differing = {
        _key(line) for e in tied for line in set(e["settings"]) ^ set(best["settings"]) if _key(line) not in blind
    }
    out = {
        "candidate": best["candidate"],
        "why": why,
        "set": launchable([*probe.base_settings, *(s for s in best["settings"] if _key(s) not in blind)]),
        "not_told_apart": sorted(blind),
        "tied": sorted(e["candidate"] for e in [best, *tied]) if tied else [],
    }
    if differing:
        out.update(candidate=None, set=None, differing=sorted(differing))
    return out
