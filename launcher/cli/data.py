"""`dfm data ...`: synthesize, inspect, convert and split training data.

numpy and TensorFlow load inside the commands, so `dfm --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from launcher.errors import DfmError
from launcher.facts.contract import bundled_hparams


@click.group()
def data() -> None:
    """Make and lay out training data (synthetic Criteo-like, libsvm -> TFRecord, balanced splits)."""


def _positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value


class _Quiet:
    """Stands in for a progress bar when stderr is not a terminal (logs, CI): no partial lines."""

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


def _progress(length: int, label: str):
    if sys.stderr.isatty():
        return click.progressbar(length=length, label=label, file=sys.stderr)
    return _Quiet()


@data.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for train/, eval/ and meta.json.",
)
@click.option("--rows", type=int, required=True, callback=_positive, help="Training rows.")
@click.option("--eval-rows", type=int, default=0, show_default=True, help="Evaluation rows (0: no eval/).")
@click.option(
    "--files",
    type=int,
    default=1,
    show_default=True,
    callback=_positive,
    help="Training files of equal size (must divide --rows).",
)
@click.option(
    "--eval-files",
    type=int,
    default=None,
    callback=_positive,
    help="Evaluation files (default: --files, or fewer when --eval-rows does not divide).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same data and teacher.")
@click.option(
    "--field-size",
    type=int,
    default=bundled_hparams().DEFAULTS["field_size"],
    show_default=True,
    callback=_positive,
    help="Default: the bundled scripts' field_size.",
)
@click.option(
    "--feature-size",
    type=int,
    default=bundled_hparams().DEFAULTS["feature_size"],
    show_default=True,
    callback=_positive,
    help="Default: the bundled scripts' feature_size.",
)
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
    force: bool,
) -> None:
    """Write synthetic Criteo-like data whose labels come from a planted teacher (known best AUC)."""
    from launcher.data import stream, synth as synth_mod
    from launcher.data.staging import Staged

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
            multi_hot=synth_mod.MultiHot() if multi_hot else None,
            deep_share=deep_share,
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
        _progress(rows + eval_rows, "drawing") as bar,
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
    from launcher.data import raw, synth as synth_mod

    layout = generator.layout
    meta = {
        "columns": raw.column_names(layout.numeric_fields, len(layout.sizes) - layout.numeric_fields, multi_hot),
        "label": raw.LABEL,
        # The teacher buckets counts at these boundaries (bucketize reproduces it exactly); log1p is close.
        "numeric_boundaries": [2**k - 1 for k in range(1, synth_mod.NUMERIC_BUCKETS)],
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


@data.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Folder for the TFRecords."
)
@click.option(
    "--field-size",
    type=int,
    default=39,
    show_default=True,
    callback=_positive,
    help="Exact number of id:value pairs every row must have.",
)
@click.option("--feature-size", type=int, default=None, callback=_positive, help="Also check every id is below this.")
@click.option(
    "--files",
    type=int,
    default=1,
    show_default=True,
    callback=_positive,
    help="Output files; rows are dealt round-robin (counts differ by at most one; at most one file a row).",
)
@click.option("--prefix", default="part", show_default=True)
@click.option("--skip-bad", is_flag=True, help="Write the good rows and report how many were skipped.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace everything in a non-empty --out (the new set is written beside it, swapped in when complete).",
)
def convert(
    inputs: tuple[Path, ...],
    out: Path,
    field_size: int,
    feature_size: int | None,
    files: int,
    prefix: str,
    skip_bad: bool,
    force: bool,
) -> None:
    """Convert libsvm files (or folders of them; plain or gzip) to TFRecord, checking every row."""
    from launcher.data import libsvm
    from launcher.data.split import input_files
    from launcher.data.staging import Staged

    paths = input_files(list(inputs))
    if not paths:
        raise DfmError("no input files found")
    out = out.absolute()
    inside = [p for p in paths if out in p.absolute().parents]
    if inside:
        raise DfmError(f"--out {out} holds the input {inside[0]}: write the TFRecords to another folder", 2)
    with Staged([out], force, f"--out {out}") as stage:
        with _progress(sum(p.stat().st_size for p in paths), "converting") as bar:
            try:
                report = libsvm.convert(
                    paths,
                    stage.folder(out),
                    field_size,
                    files=files,
                    prefix=prefix,
                    feature_size=feature_size,
                    skip_bad=skip_bad,
                    on_bytes=bar.update,
                )
            except libsvm.DamagedInput as err:
                raise DfmError(f"{err}; nothing written", 1) from None
        for bad in report.first_bad:
            click.echo(f"  bad row {bad}", err=True)
        if not report.rows:
            raise DfmError(
                f"no good rows in {len(paths)} input files ({report.bad} bad"
                + (f"; first at {report.first_bad[0]}" if report.first_bad else ": all empty or blank")
                + f"); nothing written, {out} left as it was",
                1,
            )
        if report.bad and not skip_bad:
            raise DfmError(
                f"{report.bad} bad rows (of {report.rows + report.bad}); first at {report.first_bad[0]}; "
                f"nothing written, {out} left as it was (--skip-bad writes the good rows)",
                1,
            )
    skipped = f", skipped {report.bad} bad rows" if report.bad else ""
    fewer = f" (not {files}: one file a row at most)" if len(report.outputs) < files else ""
    click.echo(f"wrote {report.rows} rows to {len(report.outputs)} files{fewer} in {out}{skipped}")


@data.command("split")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for the channel folders and split.json.",
)
@click.option("--hosts", type=int, default=1, show_default=True, callback=_positive)
@click.option(
    "--workers", type=int, default=1, show_default=True, callback=_positive, help="Training processes per host."
)
@click.option(
    "--files-per-worker",
    type=int,
    default=1,
    show_default=True,
    callback=_positive,
    help="Files each worker gets (from each of its channels with --multi-path).",
)
@click.option("--multi-path", is_flag=True, help="One folder per channel: train/, train-1/, ...")
@click.option(
    "--channels",
    type=int,
    default=None,
    callback=_positive,
    help="Channel folders with --multi-path (default: --workers; a multiple of it).",
)
@click.option("--channel", default="train", show_default=True, help="Base channel name.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace existing channel folders and split.json under --out (swapped in when complete).",
)
def split_command(
    inputs: tuple[Path, ...],
    out: Path,
    hosts: int,
    workers: int,
    files_per_worker: int,
    multi_path: bool,
    channels: int | None,
    channel: str,
    force: bool,
) -> None:
    """Re-split TFRecords into equal-count files for hosts x workers (remainder records are dropped)."""
    from launcher.data import split as split_mod
    from launcher.data.staging import Staged
    from launcher.data.tfrecord import DamagedRecords, count_records

    try:
        layout = split_mod.Layout(hosts, workers, files_per_worker, multi_path, channels or 0, channel)
        paths = split_mod.input_files(list(inputs))
    except (ValueError, FileNotFoundError) as err:
        raise DfmError(str(err)) from None
    if not paths:
        raise DfmError("no input files found")
    names = list(dict.fromkeys([*layout.channel_names(), *_earlier_channels(out), "split.json"]))
    if any(out / name in {p.parent for p in paths} for name in names):
        raise DfmError("--out must not contain the input folders")
    with Staged([out / name for name in names], force, f"--out {out}") as stage:
        try:
            total = count_records(paths)
            with _progress(total, "splitting") as bar:
                report = split_mod.split(
                    paths,
                    out,
                    layout,
                    total=total,
                    on_records=bar.update,
                    place=lambda path: stage.path(path.parent) / path.name,
                )
        except DamagedRecords as err:
            raise DfmError(f"{err}; nothing written", 1) from None
        except ValueError as err:
            raise DfmError(str(err)) from None
        summary = {
            "hosts": hosts,
            "workers": workers,
            "files_per_worker": files_per_worker,
            "multi_path": multi_path,
            "channels": layout.channel_names(),
            "files_per_channel": layout.files_per_channel(),
            "records_per_file": report.records_per_file,
            "records": report.total - report.dropped,
            "dropped": report.dropped,
        }
        stage.path(out / "split.json").write_text(json.dumps(summary, indent=2) + "\n")
    click.echo(
        f"wrote {len(report.paths)} files x {report.records_per_file} records into "
        f"{', '.join(n + '/' for n in layout.channel_names())} under {out}"
        + (
            f"; dropped the last {report.dropped} records (not divisible by {len(report.paths)} files)"
            if report.dropped
            else ""
        )
    )


def _earlier_channels(out: Path) -> list[str]:
    """The channel folders an earlier split wrote under `out` (its split.json): --force replaces that whole set."""
    try:
        channels = json.loads((out / "split.json").read_text())["channels"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [name for name in channels if isinstance(name, str) and name and Path(name).name == name]


@data.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--rows",
    type=int,
    default=10000,
    show_default=True,
    callback=_positive,
    help="Rows to sample from the top of the file.",
)
@click.option(
    "--columns", default=None, help="Comma-separated column names (default: the header, else col0, col1, ...)."
)
@click.option("--header/--no-header", default=None, help="Whether the first line names the columns [default: detect].")
@click.option("--label", default=None, help="The label column (default: the first 0/1 column).")
@click.option(
    "--feature-size",
    type=int,
    default=None,
    callback=_positive,
    help="TFRecords: check the ids against this [default: the bundled scripts' feature_size].",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="json for scripts (TFRecords: text by default).",
)
def inspect_command(
    file: Path,
    rows: int,
    columns: str | None,
    header: bool | None,
    label: str | None,
    feature_size: int | None,
    output: str,
) -> None:
    """Summarize TFRecord files or folders (rows, fields, ids against feature_size, label rate), or propose a spec's
    `features:` section from a sample of a TSV or CSV file (plain or gzip)."""
    from launcher.data import inspect as inspect_mod
    from launcher.data import tfrecord_summary

    if file.exists() and tfrecord_summary.is_tfrecord(file):
        try:
            summary = tfrecord_summary.summarize(file, feature_size or bundled_hparams().DEFAULTS["feature_size"])
        except tfrecord_summary.SummaryError as err:
            raise DfmError(str(err)) from None
        click.echo(json.dumps(summary, indent=2) if output == "json" else tfrecord_summary.render(summary))
        return

    names = [name.strip() for name in columns.split(",")] if columns is not None else None
    try:
        sample = inspect_mod.read_sample(file, rows, names, header)
        proposal = inspect_mod.propose(sample, label)
    except inspect_mod.InspectError as err:
        raise DfmError(str(err)) from None
    for note in inspect_mod.notes(proposal):
        click.echo(f"note: {note}", err=True)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "features": proposal.features,
                    "stats": proposal.stats,
                    "sample": {
                        "file": str(file),
                        "rows": len(sample.rows),
                        "header": sample.header,
                        "ragged_skipped": sample.ragged,
                    },
                },
                indent=2,
            )
        )
    else:
        click.echo(inspect_mod.to_yaml(proposal), nl=False)
