"""The operations rules: recovery needs checkpoints to resume from and instance types the job can move to; the
stall watchdog needs metric lines to watch. The request limits (retry attempts, MLflow ARN, TensorBoard URI)
are checked with every other request value in `rules.request_rules`."""

from __future__ import annotations

from launcher.facts import catalog
from launcher.facts import contract
from launcher.facts import service_model
from launcher.plans import recovery
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec


def check_recover(spec: Spec) -> list[Finding]:
    if spec.recover is None:
        return []
    problems = []
    if spec.checkpoint_config is None:
        problems.append(
            error(
                "checkpoints",
                "recover: resubmits the job to resume from its checkpoints: remove "
                "`checkpoints: false` (or drop recover:)",
            )
        )
    most_tags = service_model.limit(service_model.shape_at("Tags"), "max")
    if most_tags is not None and len(spec.tags) >= most_tags:
        problems.append(
            error(
                "tags",
                f"recover: tags each resubmission {recovery.FIRST_ATTEMPT_TAG}: <first job>, and "
                f"a job takes at most {most_tags} tags: keep at most {most_tags - 1}",
            )
        )
    first = catalog.instance(spec.instance.type)
    for index, instance_type in enumerate(spec.recover.instance_types):
        info = catalog.instance(instance_type)
        if first is None or info is None:
            continue  # an unknown type is refused (or warned of) with the request's limits
        if info.gpus != first.gpus:
            problems.append(
                error(
                    f"recover.instance_types.{index}",
                    f"{instance_type} has {info.gpus} GPUs where {spec.instance.type} has {first.gpus}: "
                    "a recovery moves the same job (image, ranks, replicas), so list types with "
                    f"{first.gpus} GPUs",
                )
            )
    return problems


def check_stall_timeout(spec: Spec) -> list[Finding]:
    if spec.stall_timeout is None or spec.entry_point in contract.BUNDLED_ENTRY_POINTS:
        return []
    return [
        warning(
            "stall_timeout",
            "the watchdog counts the chief's `[dfm] train step=...` / `[dfm] eval ...` "
            "lines: your script must print them, or the job is stopped as stalled",
        )
    ]
