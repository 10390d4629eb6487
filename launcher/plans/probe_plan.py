"""A probe: short, capped copies of one spec over candidate setups, each compiled through the same rules as
`dfm validate`. Pure: the compile step is handed in (`compile.compile_spec` by the CLI), so a refused candidate
keeps dfm's own message and is never run.

Candidates come from `--try KEY=V1,V2,...` (the cross product of every --try) or from the spec's `probe:`
variants. Each probe is the candidate's spec with `max_steps` (the bundled scripts stop there), no export, no warm
pool, its `max_run` as the safety bound, tagged `dfm:kind=probe` so that status, logs, stop and list see what it is.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from launcher.facts import catalog, contract, conventions
from launcher.plans.training_plan import Plan

if TYPE_CHECKING:
    from launcher.spec import Spec

KIND_TAG = "dfm:kind"
KIND = "probe"
GROUP_TAG = "dfm:probe"
TRAIN_LINES = 10  # train lines a bundled script's probe prints at least: the first fifth warm-up, the rest timed


@dataclass(frozen=True)
class Candidate:
    number: int  # 1, 2, ... in the order tried
    settings: tuple[str, ...]  # the candidate's --set lines: what a recommendation prints
    plan: Plan | None  # None: refused
    errors: tuple[str, ...] = ()  # why the rules refused it

    @property
    def ok(self) -> bool:
        return self.plan is not None

    @property
    def usd_per_hour(self) -> float | None:
        return usd_per_hour(self.plan) if self.plan is not None else None


@dataclass(frozen=True)
class ProbePlan:
    name: str  # the probe's name: its jobs are <name>-<number>, tagged dfm:probe=<name>
    spec_path: str
    base_settings: tuple[str, ...]  # the user's own --set lines, part of every candidate
    candidates: tuple[Candidate, ...]
    max_steps: int
    max_run: int  # seconds: each probe's safety bound
    max_parallel: int
    epochs: int  # of the full job: how many epochs its estimate counts
    rows: int | None  # training rows of one full epoch, when known
    rows_source: str | None = None  # where `rows` came from

    @property
    def runnable(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.ok)

    @property
    def refused(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if not c.ok)

    def cost_ceiling(self) -> dict[str, Any]:
        """The sum of each probe's max_run x its price (on-demand list prices)."""
        ceilings = [c.plan.cost.get("max_usd") for c in self.runnable]
        known = [usd for usd in ceilings if usd is not None]
        return {
            "max_usd": round(sum(known), 2) if len(known) == len(ceilings) else None,
            "probes": len(ceilings),
            "max_run_s": self.max_run,
            "note": "each probe's max_run x its on-demand price; a probe ends at max_steps, usually far sooner",
        }


# ------------------------------------------------------------------------------------------ candidates
def split_values(text: str) -> list[str]:
    """`a,b,[1,2]` -> ["a", "b", "[1,2]"]: commas inside brackets or braces belong to the value."""
    values, depth, current = [], 0, ""
    for char in text:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        if char == "," and depth == 0:
            values.append(current.strip())
            current = ""
        else:
            current += char
    values.append(current.strip())
    return values


def parse_try(text: str) -> tuple[str, list[str]]:
    """`KEY=V1,V2` -> (KEY, [V1, V2]); ValueError naming what is wrong."""
    key, sep, raw = text.partition("=")
    values = split_values(raw) if sep else []
    if not key.strip() or not values or not all(values):
        raise ValueError(f"--try {text}: expected KEY=V1,V2,..., e.g. --try instance.count=1,2")
    return key.strip(), values


def variant_lines(variant: str | Sequence[str] | Mapping[str, Any]) -> tuple[str, ...]:
    """A `probe:` variant as --set lines."""
    if isinstance(variant, str):
        return (variant,)
    if isinstance(variant, Mapping):
        return tuple(f"{key}={json.dumps(value)}" for key, value in variant.items())
    return tuple(variant)


def candidate_settings(tries: Iterable[str], variants: Iterable[Any] = ()) -> list[tuple[str, ...]]:
    """Every candidate's --set lines: the cross product of the --try options, else the spec's variants, else the
    spec as it is (one candidate)."""
    parsed = [parse_try(text) for text in tries]
    if parsed:
        return [
            tuple(f"{key}={value}" for key, value in zip([k for k, _ in parsed], combo))
            for combo in itertools.product(*[values for _, values in parsed])
        ]
    found = [variant_lines(v) for v in variants]
    return found or [()]


def follow_distribution(settings: tuple[str, ...], entry_point: str) -> tuple[str, ...]:
    """A candidate that changes the distribution of a bundled script gets the bundled script that runs it."""
    bundled = contract.BUNDLED_ENTRY_POINTS.get(entry_point)
    if bundled is None or any(line.startswith("entry_point=") for line in settings):
        return settings
    for line in settings:
        key, _, value = line.partition("=")
        if key.strip() != "distribution" or value.strip() in bundled.distributions:
            continue
        for name, other in contract.BUNDLED_ENTRY_POINTS.items():
            if value.strip() in other.distributions:
                return (*settings, f"entry_point={name}")
    return settings


def probe_settings(
    name: str,
    number: int,
    max_steps: int,
    max_run: int,
    bundled: bool,
    data: Mapping[str, str] = (),
    local: bool = False,
    log_steps: int | None = None,
) -> tuple[str, ...]:
    """What makes a candidate a probe: capped, no export, no resubmission, no warm pool, tagged, maybe on smaller
    data (locally the run's timeout is the bound)."""
    lines = [f"local.timeout_s={max_run}"] if local else []
    lines += [
        f"max_run={max_run}",
        "recover=null",
        "warm_pool_seconds=0",  # a warm pool is billed after the probe and gives the next one an unfair start-up
        f"tags.{KIND_TAG}={KIND}",
        f"tags.{GROUP_TAG}={name}",
        f"tags.dfm:candidate='{number}'",
        f"hyperparameters.max_steps={max_steps}",
    ]
    if bundled:  # repeat the (maybe small) data until max_steps; the probe's model is not wanted
        lines += ["hyperparameters.epochs=0", "hyperparameters.export=false", *timed_windows(max_steps, log_steps)]
    lines += [f"data.{channel}={uri}" for channel, uri in dict(data).items()]
    return tuple(lines)


def timed_windows(max_steps: int, log_steps: int | None = None) -> list[str]:
    """A bundled script's settings that leave a probe enough clean windows to time: a train line at least every
    max_steps / TRAIN_LINES steps (the spec's log_steps when it is already that often), each the end of a window
    (a parameter-server chief's lines otherwise come while its closures run, as often as its reads of the step: too
    few in a short probe), no evaluation before max_steps (the final one comes after the last train line) and no
    checkpoint before it."""
    every = max(1, max_steps // TRAIN_LINES)
    given = log_steps if isinstance(log_steps, int) and not isinstance(log_steps, bool) and log_steps > 0 else every
    return [
        f"hyperparameters.log_steps={min(every, given)}",
        f"hyperparameters.eval_steps={max_steps + 1}",
        f"hyperparameters.checkpoint_steps={max_steps}",
        "hyperparameters.line_barrier=true",
    ]


def probe_name(spec_name: str, candidates: int, now: float | None = None) -> str:
    """`<spec>-probe-YYMMDD-HHMMSS`, the spec's name cut so that every candidate's job name `<probe>-N` fits."""
    stamp = time.strftime("%y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return conventions.fit_job_name(spec_name, f"-probe-{stamp}", conventions.MAX_JOB_NAME - len(f"-{candidates}"))


def job_name(name: str, number: int) -> str:
    return f"{name}-{number}"


# compile(settings, job name) -> (plan or None, error lines)
Compile = Callable[[tuple[str, ...], str], "tuple[Plan | None, Sequence[str]]"]


def build_probe_plan(
    spec: Spec,
    compile_candidate: Compile,
    *,
    tries: Iterable[str] = (),
    base_settings: Sequence[str] = (),
    name: str | None = None,
    rows: int | None = None,
    stats_rows: tuple[int, str] | None = None,
    local: bool = False,
) -> ProbePlan:
    """Every candidate compiled through the rules, as a probe of the spec's `probe:` settings (or their defaults).
    Rows of one epoch: `rows` (--rows), else `probe.rows`, else `stats_rows` ((rows, where they were counted))."""
    from launcher.spec.probe_spec import Probe

    settings = spec.probe or Probe()
    settings_lines = list(candidate_settings(tries, settings.variants))
    name = name or probe_name(spec.name, len(settings_lines))
    bundled = spec.entry_point in contract.BUNDLED_ENTRY_POINTS
    max_run = settings.minutes * 60
    candidates = []
    for number, lines in enumerate(settings_lines, start=1):
        lines = follow_distribution(lines, spec.entry_point)
        capped = probe_settings(
            name,
            number,
            settings.max_steps,
            max_run,
            bundled,
            {} if local else settings.data,
            local,
            spec.hyperparameters.get("log_steps"),
        )
        plan, errors = compile_candidate((*base_settings, *lines, *capped), job_name(name, number))
        candidates.append(Candidate(number, lines, plan, tuple(errors)))
    default = contract.bundled_hparams().DEFAULTS["epochs"] if bundled else 1
    epochs = int(spec.hyperparameters.get("epochs", default) or default)
    return ProbePlan(
        name,
        spec.path,
        tuple(base_settings),
        tuple(candidates),
        settings.max_steps,
        max_run,
        settings.max_parallel,
        epochs,
        *epoch_rows(rows, settings.rows, stats_rows, {} if local else settings.data),
    )


def epoch_rows(
    given: int | None, spec_rows: int | None, stats: tuple[int, str] | None, sample: Mapping[str, str]
) -> tuple[int | None, str | None]:
    """(rows of one full epoch, where they came from); a count from statistics says when the probe reads a sample
    (`probe.data`) instead of the data it was counted on."""
    if given:
        return given, "--rows"
    if spec_rows:
        return spec_rows, "probe.rows"
    if stats is None:
        return None, None
    count, counted = stats
    if sample:
        counted += f", not the sample the probe reads ({', '.join(sorted(dict(sample).values()))})"
    return count, counted


def usd_per_hour(plan: Plan) -> float | None:
    """The job's on-demand price per hour, every host counted."""
    total = 0.0
    for group in (plan.cost or {}).get("groups", ()):
        if group.get("instance_hourly_usd") is None:
            return None
        total += group["instance_hourly_usd"] * group["instance_count"]
    return total if total and not math.isnan(total) else None


def gpu_workers(plan: Plan) -> bool:
    """The chief and worker hosts have GPUs: their CPU utilization says little about what limits them."""
    found = (catalog.instance(g.instance_type) for g in plan.instance_groups if g.role == "worker")
    return any(info is not None and info.gpus for info in found)
