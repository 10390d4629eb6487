"""`dfm data convert` and `dfm data split`: text rows to TFRecord files, and files laid out as channels per host
and worker (TensorFlow loads inside the commands)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.cli import options
from launcher.cli.options import positive
from launcher.cli.render import progress
from launcher.errors import DfmError


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Folder for the TFRecords."
)
@options.field_size(39, "Exact number of id:value pairs every row must have.")
@options.feature_size("Also check every id is below this.")
@options.files("Output files; rows are dealt round-robin (counts differ by at most one; at most one file a row).")
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
        with progress(sum(p.stat().st_size for p in paths), "converting") as bar:
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


@click.command("split")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for the channel folders and split.json.",
)
@click.option("--hosts", type=int, default=1, show_default=True, callback=positive)
@click.option(
    "--workers", type=int, default=1, show_default=True, callback=positive, help="Training processes per host."
)
@click.option(
    "--files-per-worker",
    type=int,
    default=1,
    show_default=True,
    callback=positive,
    help="Files each worker gets (from each of its channels with --multi-path).",
)
@click.option("--multi-path", is_flag=True, help="One folder per channel: train/, train-1/, ...")
@click.option(
    "--channels",
    type=int,
    default=None,
    callback=positive,
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
            with progress(total, "splitting") as bar:
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
