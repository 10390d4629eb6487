"""The `prepare:` rules: what `dfm data prepare` reads and writes must be what the training job then reads.

The prepared files follow the job's layout (launcher/data/prepare_job.py); `check_prepared_layout` proves
offline, with the bundled scripts' own shard table, that every worker of the job gets files, which is what
the "at least N files" launch-time warning of ShardedByS3Key can otherwise only check at launch.
"""

from __future__ import annotations

from launcher.facts import conventions
from launcher.rules.findings import Finding, error
from launcher.spec import Spec

MAX_PROCESSING_OUTPUTS = 10  # ProcessingOutputConfig.Outputs (botocore's model)


def check_prepare(spec: Spec) -> list[Finding]:
    prepare = spec.prepare
    if prepare is None:
        return []
    problems = []
    raw = prepare.input.format != "libsvm"
    features = spec.features
    if not raw and features is not None:
        problems.append(
            error(
                "features",
                "prepare.input.format libsvm writes pre-indexed (label, ids, values) "
                "records: drop features:, or prepare raw tsv/csv/parquet input",
            )
        )
    if raw and (features is None or features.get("format") != "tfrecord"):
        problems.append(
            error(
                "features.format" if features is not None else "prepare.input.format",
                f"prepare writes the {prepare.input.format} columns as tf.train.Examples: set "
                "features.format: tfrecord (and name the label and feature columns in features:)",
            )
        )
    if prepare.input.format in ("tsv", "csv"):
        columns = prepare.input.columns or []
        if not columns:
            problems.append(
                error(
                    "prepare.input",
                    f"{prepare.input.format} input needs columns: [label, i1, c1, ...] (the names in file order)",
                )
            )
        elif features is not None:
            wanted = [features.get("label")] + [
                name for section in ("numeric", "categorical", "multi_hot") for name in (features.get(section) or {})
            ]
            absent = [name for name in wanted if isinstance(name, str) and name not in columns]
            if absent:
                problems.append(error("prepare.input.columns", f"{', '.join(absent)} not among the columns"))
    elif prepare.input.columns is not None:
        problems.append(
            error("prepare.input.columns", f"{prepare.input.format} input names its own columns: drop columns")
        )
    wants_eval = prepare.eval is not None or bool(prepare.eval_fraction)
    if wants_eval and spec.data.eval is None:
        problems.append(error("data.eval", "prepare holds rows out for evaluation: give data.eval, where they go"))
    for channel in conventions.channel_sources(spec):
        if channel.name != conventions.EVAL_CHANNEL and not channel.training:
            continue
        if channel.name == conventions.EVAL_CHANNEL and not wants_eval:
            continue
        if not isinstance(channel.source, str):
            problems.append(
                error(
                    channel.field,
                    "prepare writes to S3 prefixes (ProcessingOutputs); an EFS/FSx channel cannot be its output",
                )
            )
    outputs = len(spec.train_sources) + int(wants_eval) + 1 + int(prepare.event_logs is not None)  # + the report
    if outputs > MAX_PROCESSING_OUTPUTS:
        problems.append(
            error(
                "data.train",
                f"prepare writes {outputs} outputs (channels + eval + report + event logs); a "
                f"processing job takes at most {MAX_PROCESSING_OUTPUTS}",
            )
        )
    if "negative_rate" in spec.hyperparameters and prepare.balance is not None:
        problems.append(error("hyperparameters.negative_rate", "set by prepare.balance.negative_rate: drop it"))
    return problems


def check_prepared_layout(spec: Spec) -> list[Finding]:
    """Every worker of the training job must get at least one prepared file."""
    if spec.prepare is None:
        return []
    from launcher.data import prepare_job

    try:
        layout = prepare_job.prepared_layout(spec)
    except ValueError as err:
        return [error("prepare.files_per_worker", str(err))]
    found = prepare_job.fit(layout, spec.data.s3_shard, prepare_job.shard_table())
    if found.min_files_per_worker >= 1:
        return []
    return [
        error(
            "prepare.files_per_worker",
            f"with {found.files_per_channel} files per channel some workers of "
            "the job would read none: raise files_per_worker",
        )
    ]


def prepared_layout_fits(spec: Spec) -> bool:
    """For the launch-time ShardedByS3Key warning: prepared data needs no look at S3."""
    return spec.prepare is not None and not check_prepared_layout(spec)
