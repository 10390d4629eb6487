"""The one way from a spec file to a Plan: read it (with overrides), run the rules, build the plan.

`dfm validate`, every mode of `dfm launch` and the tests go through `compile_spec`, so they all see the
same errors, warnings and plan. Nothing heavy is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from launcher import rules
from launcher.errors import DfmError
from launcher.rules.findings import warning
from launcher.rules.prepare_rules import prepared_layout_fits
from launcher.plans.training_plan import Plan, build_plan
from launcher.spec import Spec, SpecError, load_spec


@dataclass(frozen=True)
class Compiled:
    spec: Spec | None  # None when the file could not be read or validated
    plan: Plan | None  # None when there are errors
    errors: tuple[str, ...]  # rendered `file:line: field: message` lines
    refused_warnings: tuple[str, ...] = ()  # the warnings of a spec with errors (a plan holds its own)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def warnings(self) -> tuple[str, ...]:
        """The rules' warnings: the plan's, or those of the spec the errors refused."""
        return self.plan.warnings if self.plan is not None else self.refused_warnings


def compile_spec(
    source: str | Mapping[str, Any],
    overrides: Iterable[str] = (),
    job_name: str | None = None,
    *,
    env: dict[str, str] | None = None,
) -> Compiled:
    """Spec file (or spec data) + `--set` overrides + job name -> plan, or the errors that stop it, with the
    warnings. `env` replaces os.environ for `${VAR}` substitution (tests).
    """
    try:
        spec = load_spec(source, overrides, env=env)
    except SpecError as err:
        return Compiled(None, None, tuple(err.lines()))
    findings = rules.check(spec, job_name)
    errors = [finding.render(spec) for finding in rules.errors(findings)]
    warnings = [finding.render(spec) for finding in rules.warnings(findings)]
    if errors:
        return Compiled(spec, None, tuple(errors), tuple(warnings))
    return Compiled(spec, build_plan(spec, job_name=job_name, warnings=warnings), ())


def compile_trial(spec: Spec, values: Mapping[str, Any], job_name: str, run_dir: str) -> Plan:
    """A tuning trial's plan: the spec with the trial's hyperparameters (and no tune: section: a trial is a training
    job), checked by the same rules as `dfm validate` (a value they refuse fails the trial with their message,
    exit 2), run under `run_dir`."""
    trial = spec.model_copy(
        update={
            "hyperparameters": {**spec.hyperparameters, **values},
            "tune": None,
            "local": spec.local.model_copy(update={"run_dir": run_dir}),
        }
    )
    findings = rules.check(trial, job_name)
    refused = [finding.render(trial) for finding in rules.errors(findings)]
    if refused:
        raise DfmError(f"trial {job_name} refused: {'; '.join(refused)}", 2)
    return build_plan(trial, job_name=job_name, warnings=[f.render(trial) for f in rules.warnings(findings)])


def shard_warnings(spec: Spec, plan: Plan) -> list[str]:
    """ShardedByS3Key deals whole objects to hosts: a channel sharded among N hosts needs N files, or some hosts
    get none. The warning for the commands that cannot count them: `dfm validate`, the SageMaker dry runs and a
    tuning job. A SageMaker launch lists the bucket instead, and `--local` counts its local files (both warn of
    the hosts left idle); prepared data whose layout fits (`prepare:`) has enough files by construction."""
    if prepared_layout_fits(spec):
        return []
    return [
        warning(
            "data.s3_shard",
            f"channel {name}: ShardedByS3Key deals whole objects to its {hosts} hosts: the prefix needs at least "
            f"{hosts} files, or hosts sit idle (checked at launch, not offline)",
        ).render(spec)
        for name, hosts in plan.sharded_hosts().items()
    ]
