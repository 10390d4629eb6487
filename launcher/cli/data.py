"""`dfm data`: the group, and `dfm data inspect`. Its other commands live beside it (data_synth, data_layout, and
prepare); numpy and TensorFlow load inside the commands, so `dfm --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.cli import options
from launcher.cli.options import positive
from launcher.errors import DfmError
from launcher.facts.contract import bundled_hparams


@click.group()
def data() -> None:
    """Make and lay out training data (synthetic Criteo-like, libsvm -> TFRecord, balanced splits)."""


@data.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--rows",
    type=int,
    default=10000,
    show_default=True,
    callback=positive,
    help="Rows to sample from the top of the file.",
)
@click.option(
    "--columns", default=None, help="Comma-separated column names (default: the header, else col0, col1, ...)."
)
@click.option("--header/--no-header", default=None, help="Whether the first line names the columns [default: detect].")
@click.option("--label", default=None, help="The label column (default: the first 0/1 column).")
@options.feature_size("TFRecords: check the ids against this [default: the bundled scripts' feature_size].")
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
