"""What the bundled scripts' lines say, wherever they are read (a local run's processes, a SageMaker job's log
stream): their metric lines, read with the regexes SageMaker scrapes them with (conventions.METRIC_DEFINITIONS),
the progress lines between them, `[dfm] exported <path>` and `[dfm] warning: ...`; and the baseline's verdict.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from launcher.facts.conventions import METRIC_DEFINITIONS

_EXPORTED = re.compile(r"\[dfm\] exported (\S.*)$")
_WARNING = re.compile(r"\[dfm\] warning: (\S.*)$")  # deepfm_log.warn: the summary repeats them
_STEP = re.compile(r"\[dfm\] (?:train|eval) step=(\d+)")  # SageMaker's definitions have no eval:step
# rank 0's step between the train lines (deepfm_log.ProgressTicker): for the progress bar only
PROGRESS_LINE = re.compile(r"\[dfm\] progress step=(\d+)")


@functools.cache
def _metric_patterns() -> tuple[tuple[str, str, re.Pattern], ...]:
    """(kind, metric, regex) per metric definition: "train:loss" -> ("train", "loss", ...)."""
    return tuple((*d["Name"].split(":", 1), re.compile(d["Regex"])) for d in METRIC_DEFINITIONS)


def parse_metric_line(line: str) -> tuple[str, dict[str, float]] | None:
    """("train" | "eval", {metric: value}) for a metric line, as SageMaker's metric definitions read it; else None."""
    found: dict[str, dict[str, float]] = {}
    for kind, metric, pattern in _metric_patterns():
        match = pattern.search(line)
        if match:
            found.setdefault(kind, {})[metric] = float(match.group(1))
    if not found:
        return None
    kind = next(iter(found))
    return kind, found[kind]


# DeepFM within this eval AUC of the logistic-regression baseline adds nothing the baseline lacks: the AUC of
# one run of the demo moves about 0.001 from run to run (docs/quality.md).
BASELINE_MARGIN = 0.002


def baseline_line(evaluation: dict[str, float] | None) -> str:
    """The summary's line comparing the final evaluation's AUC with the baseline's (bundled scripts, `baseline`
    on): within BASELINE_MARGIN "adds nothing here", above "adds X", below "is worse here"; "" without both."""
    if not evaluation or "auc" not in evaluation or "baseline_auc" not in evaluation:
        return ""
    model, baseline = evaluation["auc"], evaluation["baseline_auc"]
    gap = round(model - baseline, 6)  # the lines carry 6 decimals
    if abs(gap) <= BASELINE_MARGIN:
        verdict = "the deep part adds nothing here"
    elif gap > 0:
        verdict = f"the deep part adds {gap:.4f} AUC"
    else:
        verdict = f"the deep part is worse here: {-gap:.4f} AUC below it"
    return f"  DeepFM {model:.4f}, logistic regression {baseline:.4f} on the same data: {verdict}"


@dataclass
class Progress:
    train: dict[str, dict[str, float]] = field(default_factory=dict)  # label -> latest train values
    speeds: dict[str, list[float]] = field(default_factory=dict)  # label -> every examples_per_sec seen
    eval: dict[str, float] | None = None
    eval_label: str | None = None
    exported: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the scripts' `[dfm] warning: ...` lines, each once
    history: list[tuple[str, dict[str, float]]] = field(default_factory=list)  # every metric line, in order
    changed: bool = False  # a metric line came since the display last showed them
    ticked: int | None = None  # the step of the last progress line
    moved: bool = False  # a progress line came since the bar last showed it

    def feed(self, label: str, line: str) -> bool:
        """Take one process line; -> whether it was a metric line."""
        ticked = PROGRESS_LINE.search(line)
        if ticked:
            self.ticked, self.moved = int(ticked.group(1)), True
            return False
        exported = _EXPORTED.search(line)
        if exported:
            self.exported.append(exported.group(1).strip())
            return False
        warning = _WARNING.search(line)
        if warning:
            if warning.group(1).strip() not in self.warnings:
                self.warnings.append(warning.group(1).strip())
            return False
        parsed = parse_metric_line(line)
        if parsed is None:
            return False
        kind, values = parsed
        step = _STEP.search(line)
        self.history.append((kind, {**values, "step": float(step.group(1))} if step else values))
        if kind == "train":
            self.train[label] = values
            if "examples_per_sec" in values:
                self.speeds.setdefault(label, []).append(values["examples_per_sec"])
        else:
            self.eval, self.eval_label = values, label
        self.changed = True
        return True

    @property
    def step(self) -> int | None:
        steps = [v["step"] for v in self.train.values() if "step" in v]
        return int(max(steps)) if steps else None

    @property
    def steps_done(self) -> int | None:
        """The step reached, by the train lines or the progress lines between them."""
        known = [s for s in (self.step, self.ticked) if s is not None]
        return max(known) if known else None

    @property
    def examples_per_sec(self) -> float | None:
        """Latest throughput, summed over the processes that report it."""
        latest = [v["examples_per_sec"] for v in self.train.values() if "examples_per_sec" in v]
        return sum(latest) if latest else None

    @property
    def mean_examples_per_sec(self) -> float | None:
        means = [sum(s) / len(s) for s in self.speeds.values() if s]
        return sum(means) if means else None

    def last_train_loss(self) -> tuple[int, float] | None:
        """(step, loss) of the last train line whose loss is a number (a diverged run's nan matches no regex)."""
        for kind, values in reversed(self.history):
            if kind == "train" and "loss" in values:
                return int(values.get("step", -1)), values["loss"]
        return None

    def line(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.examples_per_sec is not None:
            parts.append(f"{self.examples_per_sec:,.0f} examples/s")
        latest = max(self.train.values(), key=lambda v: v.get("step", 0), default={})
        for name in ("loss", "auc"):
            if name in latest:
                parts.append(f"{name} {latest[name]:.4f}")
        if self.eval:
            parts.append("eval " + " ".join(f"{k} {v:.4f}" for k, v in self.eval.items() if k != "step"))
        return " | ".join(parts) if parts else "starting"
