"""`dfm data synth`: synthetic Criteo-like data with a planted teacher (numpy loads inside the command)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.cli import options
from launcher.cli.options import positive
from launcher.cli.render import progress
from launcher.errors import DfmError
from launcher.facts.contract import bundled_hparams


@click.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for train/, eval/ and meta.json.",
)
@click.option("--rows", type=int, required=True, callback=positive, help="Training rows.")
@click.option("--eval-rows", type=int, default=0, show_default=True, help="Evaluation rows (0: no eval/).")
@options.files("Training files of equal size (must divide --rows).")
@click.option(
    "--eval-files",
    type=int,
    default=None,
    callback=positive,
    help="Evaluation files (default: --files, or fewer when --eval-rows does not divide).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same data and teacher.")
@options.field_size(bundled_hparams().DEFAULTS["field_size"], "Default: the bundled scripts' field_size.")
@options.feature_size("Default: the bundled scripts' feature_size.", default=bundled_hparams().DEFAULTS["feature_size"])
@click.option("--numeric-fields", type=int, default=None, help="Heavy-tailed numeric fields (default: a third).")
@click.option(
    "--signal",
    type=float,
    default=1.5,
    show_default=True,
    help="Spread of the teacher's logit; larger is easier (1.5 gives a teacher AUC near 0.81).",
)
@click.option("--positive-rate", type=float, default=0.25, show_default=True)
@click.option(
    "--deep-share",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of the teacher's logit from a random ReLU network over the latent vectors (0: a pure FM).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tfrecord", "libsvm", "criteo-tsv"]),
    default="tfrecord",
    show_default=True,
    help="criteo-tsv: raw text (label, counts, hex categoricals), not pre-indexed.",
)
@click.option(
    "--missing-rate",
    type=float,
    default=None,
    help="Share of cells left empty (missing) [default: 0.05 with criteo-tsv, else 0].",
)
@click.option(
    "--multi-hot",
    "multi_hot",
    default=None,
    metavar="NAME",
    help="criteo-tsv: add a multi-hot column NAME (ids joined by '|') that the teacher uses.",
)
@click.option(
    "--like",
    type=click.Choice(["criteo-kaggle"]),
    default=None,
    help="Shape the data like a public data set: criteo-kaggle = 13 numeric and 26 categorical fields with "
    "Criteo Kaggle's per-field vocabularies (33,762,577 ids; the generator holds about 1.2 GB for them).",
)
@click.option(
    "--day",
    type=int,
    default=None,
    callback=positive,
    help="Day N of a daily click stream from this seed: the teacher drifted N-1 times, the ids in use by day N, "
    "the day's own rows (same seed, --day 1, 2, 3: consecutive days).",
)
@click.option(
    "--drift",
    type=float,
    default=None,
    help="With --day: share of the teacher's weight variance renewed each day [default: 0.1].",
)
@click.option(
    "--new-ids",
    type=float,
    default=None,
    help="With --day: share of a field's ids not yet in use on day 1 (new_ids**N on day N) [default: 0.1].",
)
@click.option(
    "--force", is_flag=True, help="Replace existing train/, eval/ and meta.json under --out (swapped in when complete)."
)
def synth(
    out: Path,
    rows: int,
    eval_rows: int,
    files: int,
    eval_files: int | None,
    seed: int,
    field_size: int,
    feature_size: int,
    numeric_fields: int | None,
    signal: float,
    positive_rate: float,
    deep_share: float,
    fmt: str,
    missing_rate: float | None,
    multi_hot: str | None,
    like: str | None,
    day: int | None,
    drift: float | None,
    new_ids: float | None,
    force: bool,
) -> None:
    """Write synthetic Criteo-like data whose labels come from a planted teacher (known best AUC)."""
    from launcher.data import stream, synth as synth_mod, synth_rows
    from launcher.data.staging import Staged

    category_sizes = None
    if like is not None:
        context = click.get_current_context()
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("field_size", "feature_size", "numeric_fields")
            if context.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise DfmError(f"--like {like} sets the fields and their sizes: drop {', '.join(given)}")
        field_size, feature_size, numeric_fields, category_sizes = synth_rows.like_sizes(like)

    if day is None and (drift is not None or new_ids is not None):
        raise DfmError("--drift and --new-ids describe the days: add --day N")
    drift = 0.1 if drift is None else drift
    new_ids = 0.1 if new_ids is None else new_ids
    if missing_rate is None:
        missing_rate = 0.05 if fmt == "criteo-tsv" else 0.0
    if multi_hot is not None and fmt != "criteo-tsv":
        raise DfmError("--multi-hot needs --format criteo-tsv (the pre-indexed formats have a fixed field count)")
    if eval_rows < 0:
        raise DfmError("--eval-rows must be 0 or more")
    if rows % files:
        raise DfmError(f"--rows {rows} does not split into {files} equal files; use a multiple of {files}")
    if eval_files is None:
        eval_files = max(d for d in range(1, files + 1) if eval_rows % d == 0) if eval_rows else 1
    elif eval_rows % eval_files:
        raise DfmError(f"--eval-rows {eval_rows} does not split into {eval_files} equal files")
    try:
        generator = synth_mod.Generator(
            seed,
            field_size=field_size,
            feature_size=feature_size,
            numeric_fields=numeric_fields,
            signal=signal,
            positive_rate=positive_rate,
            missing_rate=missing_rate,
            multi_hot=synth_rows.MultiHot() if multi_hot else None,
            deep_share=deep_share,
            category_sizes=category_sizes,
            day=day,
            drift=drift,
            new_ids=new_ids,
        )
    except ValueError as err:
        raise DfmError(str(err)) from None
    if multi_hot is not None:
        from launcher.data import raw

        layout = generator.layout
        if multi_hot in raw.column_names(layout.numeric_fields, len(layout.sizes) - layout.numeric_fields):
            raise DfmError(f"--multi-hot {multi_hot} is already a column name; pick another, e.g. recent_cats")
    with (
        Staged([out / "train", out / "eval", out / "meta.json"], force, f"--out {out}") as stage,
        progress(rows + eval_rows, "drawing") as bar,
    ):
        parts = [(stage.folder(out / "train"), rows, files)] + (
            [(stage.folder(out / "eval"), eval_rows, eval_files)] if eval_rows else []
        )
        results = stream.write_parts(generator, parts, fmt=fmt, on_rows=bar.update)
        (train_auc, train_rate), held_out = results[0], results[1:]
        meta = {
            "rows": rows,
            "eval_rows": eval_rows,
            "files": files,
            "eval_files": eval_files if eval_rows else 0,
            "seed": seed,
            "field_size": field_size,
            "feature_size": feature_size,
            "numeric_fields": numeric_fields if numeric_fields is not None else field_size // 3,
            "signal": signal,
            "format": fmt,
            "positive_rate": train_rate,
            "teacher_auc": train_auc,
        }
        if held_out:
            meta["eval_teacher_auc"] = held_out[0][0]
        if missing_rate:
            meta["missing_rate"] = missing_rate
        if deep_share:
            meta["deep_share"] = deep_share
        if day is not None:
            meta.update(day=day, drift=drift, new_ids=new_ids)
        if like is not None:
            meta["like"] = like
            meta["category_sizes"] = list(category_sizes)
        if fmt == "criteo-tsv":
            meta.update(_raw_meta(generator, multi_hot))
        stage.path(out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    click.echo(
        f"wrote {rows} train rows in {files} files"
        + (f" and {eval_rows} eval rows in {eval_files} files" if eval_rows else "")
        + f" to {out}; positives {train_rate:.1%}, teacher AUC {train_auc:.4f}"
        + (f" (eval {held_out[0][0]:.4f})" if held_out else "")
    )


def _raw_meta(generator, multi_hot: str | None) -> dict:
    from launcher.data import raw, synth_rows

    layout = generator.layout
    meta = {
        "columns": raw.column_names(layout.numeric_fields, len(layout.sizes) - layout.numeric_fields, multi_hot),
        "label": raw.LABEL,
        # The teacher buckets counts at these boundaries (bucketize reproduces it exactly); log1p is close.
        "numeric_boundaries": [2**k - 1 for k in range(1, synth_rows.NUMERIC_BUCKETS)],
    }
    if multi_hot:
        bag = generator.sampler.multi_hot
        meta["multi_hot"] = {
            "name": multi_hot,
            "separator": raw.SEPARATOR,
            "vocabulary": bag.vocabulary,
            "max_length": bag.max_length,
            "pooling": "mean",
        }
    return meta
