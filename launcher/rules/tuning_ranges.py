"""The `tune.ranges` rules: each range against the bundled script's own parser (a name it reads, values it
accepts, the type it parses), and each range on its own (bounds, scaling, the API's limits per range).

A range the script cannot parse fails a trial after it was paid for; the SDK checks none of it.
"""

from __future__ import annotations

from launcher.facts import contract
from launcher.facts import conventions
from launcher.rules.findings import Finding, error, warning
from launcher.rules.tuning_limits import service_limit
from launcher.spec import Spec, did_you_mean
from launcher.spec.tuning_spec import CategoricalRange, ContinuousRange, IntegerRange


def _script_refuses(name: str, value: object) -> str | None:
    """The bundled script's own parser on `--name value`, as SageMaker renders it: its message, or None."""
    hparams = contract.bundled_hparams()
    try:
        hparams.parse_hyperparameters(conventions.render_argv({name: value}))
    except (hparams.HyperparameterError, SystemExit) as err:
        return str(err)
    return None


def _type_problem(name: str, rng) -> str | None:
    """A range whose values the script cannot parse: a float range on an integer, a range on a word."""
    hparams = contract.bundled_hparams()
    default = hparams.DEFAULTS[name]
    if isinstance(rng, CategoricalRange):
        for value in rng.values:
            try:
                hparams.convert(name, conventions.render_argv({name: value})[1])
            except hparams.HyperparameterError as err:
                return str(err).split(": ", 1)[-1]
        return None
    if name in hparams.CHOICES or isinstance(default, (bool, str, list)):
        return f"{name} takes words or lists, not numbers from a range: use {{values: [...]}}"
    if isinstance(default, int) and isinstance(rng, ContinuousRange):
        return f"{name} is an integer: add `type: integer` (a continuous range sends values like 3.7)"
    return None


def check_tune_ranges(spec: Spec) -> list[Finding]:
    tune = spec.tune
    if tune is None:
        return []
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return [
            warning(
                f"tune.ranges.{name}",
                f"dfm cannot check that {spec.entry_point} reads --{name} or accepts "
                f"{_describe(rng)}: make sure its argument parser does",
            )
            for name, rng in tune.ranges.items()
        ]
    known = contract.bundled_hparams().DEFAULTS
    problems = []
    for name, rng in tune.ranges.items():
        field = f"tune.ranges.{name}"
        if name not in known:
            problems.append(
                error(field, f"{spec.entry_point} has no hyperparameter '{name}'{did_you_mean(name, known)}")
            )
            continue
        if name in contract.DERIVED_HYPERPARAMETERS:
            problems.append(error(field, f"{name} cannot be tuned: {contract.DERIVED_HYPERPARAMETERS[name]}"))
            continue
        if name in spec.hyperparameters:
            problems.append(
                error(
                    field,
                    f"also fixed in hyperparameters.{name}: a trial gets one or the other; "
                    f"drop hyperparameters.{name} or this range",
                )
            )
        problem = _type_problem(name, rng)
        if problem:
            problems.append(error(field, problem))
            continue
        values = rng.values if isinstance(rng, CategoricalRange) else [rng.min, rng.max]
        for value in values:
            refused = _script_refuses(name, value)
            if refused:
                problems.append(
                    error(field, f"{value!r} is outside what {spec.entry_point} accepts ({refused}): narrow the range")
                )
                break
    return problems


def _describe(rng) -> str:
    if isinstance(rng, CategoricalRange):
        return f"the values {rng.values}"
    return f"{'integers' if isinstance(rng, IntegerRange) else 'numbers'} {rng.min}..{rng.max}"


def check_tune_range_values(spec: Spec) -> list[Finding]:
    """Each range on its own: min below max, log scaling above zero, the API's limits per range."""
    tune = spec.tune
    if tune is None:
        return []
    problems = []
    max_values = service_limit("ParameterValues")
    max_value_length = service_limit("ParameterValue")
    for name, rng in tune.ranges.items():
        field = f"tune.ranges.{name}"
        if isinstance(rng, CategoricalRange):
            if max_values is not None and len(rng.values) > max_values:
                problems.append(
                    error(
                        field,
                        f"{len(rng.values)} values, SageMaker allows {max_values} per categorical range: try fewer",
                    )
                )
            if len({str(v) for v in rng.values}) < len(rng.values):
                problems.append(error(field, "a value repeats: list each value once"))
            too_long = [v for v in rng.values if max_value_length is not None and len(str(v)) > max_value_length]
            if too_long:
                problems.append(
                    error(field, f"a value longer than SageMaker's {max_value_length} characters: shorten it")
                )
            continue
        if rng.min >= rng.max:
            problems.append(
                error(
                    field,
                    f"min {rng.min} is not below max {rng.max}: swap them, or fix the value with "
                    f"hyperparameters.{name}",
                )
            )
        if rng.scaling in ("log", "reverse_log") and rng.min <= 0:
            problems.append(
                error(
                    f"{field}.scaling", f"{rng.scaling} scaling needs min > 0, got {rng.min}: raise min or use linear"
                )
            )
        if rng.scaling == "reverse_log" and isinstance(rng, ContinuousRange) and rng.max >= 1:
            problems.append(
                error(f"{field}.scaling", f"reverse_log scaling needs max < 1, got {rng.max}: use log or linear")
            )
        if rng.scaling == "reverse_log" and isinstance(rng, IntegerRange):
            problems.append(
                error(f"{field}.scaling", "reverse_log applies to continuous ranges only: use log or linear")
            )
    return problems
