"""Rules for parameter servers on their own instance group (`distribution.parameter_server.ps`)."""

from __future__ import annotations

from argparse import Namespace

from launcher.facts import catalog
from launcher.facts import contract
from launcher.plans import hosts
from launcher.facts import service_model
from launcher.rules.findings import Finding, error, warning
from launcher.rules.hparams import script_values
from launcher.spec import Spec, did_you_mean

PS_FIELD = "distribution.parameter_server.ps"


def table_rows(spec: Spec, values: Namespace) -> int:
    """The embedding tables' rows: `feature_size`, or the ids the `features:` section's fields need."""
    if spec.features is not None:
        features = contract.bundled_features()
        try:
            return features.feature_size_of(features.spec_from_dict(spec.features, check=False), vocabulary_sizes={})
        except (AttributeError, KeyError, TypeError, ValueError):  # an invalid section: check_features reports it
            return 0
    return values.feature_size


def check_ps_group(spec: Spec) -> list[Finding]:
    ps = spec.ps_group
    if ps is None:
        return []
    groups = hosts.layout(spec.instance.type, spec.instance.count, ps.type, ps.count)
    problems = [error(PS_FIELD, problem) for problem in hosts.group_problems(groups)]
    try:
        if ps.type not in service_model.enum("TrainingInstanceType"):
            known = service_model.enum("TrainingInstanceType")
            problems.append(
                error(
                    f"{PS_FIELD}.type",
                    service_model.enum_message(
                        "TrainingInstanceType", ps.type, "a training instance type", did_you_mean(ps.type, known)
                    ),
                )
            )
    except service_model.ModelUnavailable:
        pass
    info = catalog.instance(ps.type)
    if info is not None and (info.gpus or info.accelerators):
        problems.append(
            warning(
                f"{PS_FIELD}.type",
                f"{ps.type} has {info.gpus or info.accelerators} GPUs/accelerators a "
                "parameter server never uses: pick a memory-optimized CPU type (ml.r5, ml.r6i, ml.r7i)",
            )
        )
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        problems.append(
            warning(
                PS_FIELD,
                "on instance groups SageMaker's TensorFlow toolkit sets no TF_CONFIG and starts no "
                "parameter server: your script must build the cluster itself from "
                "/opt/ml/input/config/resourceconfig.json (as deepfm-ps does)",
            )
        )
        return problems
    values = script_values(spec)  # None: a bad value, which check_bundled_hyperparameters reports
    rows = table_rows(spec, values) if values is not None else 0
    if rows:
        for severity, message in hosts.embedding_memory_findings(
            rows, values.embedding_size, values.optimizer, groups[-1], spec.may_restore, values.baseline
        ):
            problems.append(error(PS_FIELD, message) if severity == "error" else warning(PS_FIELD, message))
    return problems
