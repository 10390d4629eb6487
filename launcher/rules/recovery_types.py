"""The rules that read the instance type, run again on each type `recover:` may move the job to: a recovery
attempt runs the same job on `recover.instance_types[N-1]`, so what is wrong there is wrong with the spec."""

from __future__ import annotations

from typing import Callable, Iterable

from launcher.rules.findings import Finding
from launcher.spec import Spec

Rule = Callable[[Spec], list[Finding]]


def on_type(spec: Spec, instance_type: str) -> Spec:
    """The spec as a recovery attempt on `instance_type` runs it (the worker group moved, the rest kept)."""
    return spec.model_copy(update={"instance": spec.instance.model_copy(update={"type": instance_type})})


def check_recovery_types(spec: Spec, rules: Iterable[Rule]) -> list[Finding]:
    """Each finding the rules make on a recovery type and not on the spec's own type, placed at that type in
    `recover.instance_types` and naming it."""
    if spec.recover is None:
        return []
    rules = tuple(rules)
    seen = {(f.field, f.message) for rule in rules for f in rule(spec)}
    found = []
    for index, instance_type in enumerate(spec.recover.instance_types):
        if instance_type == spec.instance.type:
            continue
        for finding in (f for rule in rules for f in rule(on_type(spec, instance_type))):
            if (finding.field, finding.message) in seen:
                continue
            seen.add((finding.field, finding.message))
            found.append(
                Finding(
                    f"recover.instance_types.{index}",
                    f"a recovery attempt on {instance_type}: {finding.field}: {finding.message}",
                    finding.severity,
                )
            )
    return found
