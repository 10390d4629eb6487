"""Hyperparameter rules: a spec's values as the bundled scripts will parse them, checked offline.

Each value is rendered exactly as the container passes it (`--name value`, conventions.render_argv) and
converted and range-checked by the scripts' own parser (entrypoints/deepfm_hparams.py, loaded by
`contract.bundled_hparams`), so nothing the script would refuse after the instances are paid for gets past
`dfm validate`. Other rules read numbers through `script_values`, never the raw YAML values.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from launcher.facts import contract
from launcher.facts import conventions
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec, did_you_mean


def _converted(spec: Spec) -> tuple[dict[str, Any], list[Finding]]:
    """(name -> the value the script parses, problems) for the spec's own hyperparameters."""
    hparams = contract.bundled_hparams()
    values: dict[str, Any] = {}
    problems = []
    for name, value in spec.hyperparameters.items():
        field = f"hyperparameters.{name}"
        if name not in hparams.DEFAULTS:
            problems.append(
                error(field, f"{spec.entry_point} has no hyperparameter '{name}'{did_you_mean(name, hparams.DEFAULTS)}")
            )
        elif name in contract.DERIVED_HYPERPARAMETERS:
            problems.append(error(field, f"{contract.DERIVED_HYPERPARAMETERS[name]}: drop this hyperparameter"))
        else:
            try:
                values[name] = hparams.convert(name, conventions.render_argv({name: value})[1])
            except hparams.HyperparameterError as err:
                problems.append(error(field, str(err).split(": ", 1)[-1]))
    typed = Namespace(**{**hparams.DEFAULTS, **values})
    problems += [
        error(f"hyperparameters.{name}", message) for name, message in hparams.value_problems(typed) if name in values
    ]
    return values, problems


def script_values(spec: Spec) -> Namespace | None:
    """Every hyperparameter of a bundled script as it will parse them (defaults filled in), or None when
    the entry point is not bundled or a value is invalid (check_bundled_hyperparameters reports it)."""
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return None
    values, problems = _converted(spec)
    return None if problems else Namespace(**{**contract.bundled_hparams().DEFAULTS, **values})


def check_bundled_hyperparameters(spec: Spec) -> list[Finding]:
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return []
    return _converted(spec)[1]


def check_boolean_hyperparameters(spec: Spec) -> list[Finding]:
    """The bundled scripts parse "True"/"False"; a user's argparse `type=bool` reads "False" as true."""
    if spec.entry_point in contract.BUNDLED_ENTRY_POINTS:
        return []
    return [
        warning(
            f"hyperparameters.{name}",
            f"arrives as the string '{value}': parse it explicitly (argparse type=bool reads 'False' as true)",
        )
        for name, value in spec.hyperparameters.items()
        if isinstance(value, bool)
    ]


EVALUATION_HYPERPARAMETERS = ("eval_steps", "eval_batches", "early_stopping_patience")


def pipe_mode_eval(spec: Spec) -> bool:
    """The bundled scripts read a Pipe-mode eval channel once, after training (each reading takes a FIFO of
    its own), so nothing evaluates while training runs."""
    return spec.data.mode == "Pipe" and isinstance(spec.data.eval, str)


def evaluates_while_training(spec: Spec, values: Namespace) -> bool:
    """Whether a bundled script evaluates before its end: an eval channel read in File or FastFile mode, and
    evaluations every eval_steps steps or after each of several epochs (epochs 0: until max_steps)."""
    return spec.data.eval is not None and not pipe_mode_eval(spec) and bool(values.eval_steps or values.epochs != 1)


def check_evaluation_schedule(spec: Spec) -> list[Finding]:
    """Evaluation settings that would do nothing: the bundled scripts evaluate on the `eval` channel only,
    and a Pipe-mode one only after training."""
    given = [name for name in EVALUATION_HYPERPARAMETERS if name in spec.hyperparameters]
    values = script_values(spec)
    if not given or values is None or not any(getattr(values, name) for name in given):
        return []
    if spec.data.eval is None:
        return [
            warning(
                f"hyperparameters.{given[0]}",
                f"nothing is evaluated without an eval channel: add data.eval, or drop {', '.join(given)}",
            )
        ]
    during = [name for name in ("eval_steps", "early_stopping_patience") if getattr(values, name)]
    if during and pipe_mode_eval(spec):
        return [
            warning(
                f"hyperparameters.{during[0]}",
                "a Pipe-mode eval channel is read once, after training, so "
                f"{' and '.join(during)} cannot act: use data.mode File or FastFile to evaluate during training",
            )
        ]
    return []
