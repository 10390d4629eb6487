"""`dfm init LAYOUT`: a short, commented job spec to start from, on the newest image that runs that layout.

The role and the bucket come from --role/--bucket, else DFM_ROLE_ARN/DFM_BUCKET, else the SageMaker SDK's
defaults file; on a terminal dfm asks for what is still missing. A spec written without them holds
`${DFM_ROLE_ARN:-placeholder}` forms, which validate with a warning naming the variable to set.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import yaml

from launcher.cli.placeholders import BUCKET_VARIABLE, PLACEHOLDER_BUCKET, PLACEHOLDER_ROLE, ROLE_VARIABLE
from launcher.errors import DfmError
from launcher.facts import catalog, images
from launcher.spec.value_types import BUCKET


@dataclass(frozen=True)
class Layout:
    about: str  # the spec's first comment line
    entry_point: str
    instance_type: str
    count: int
    distribution: str  # the YAML text after `distribution:` (a space and a word, or an indented map)
    needs_horovod: bool = False


LAYOUTS: dict[str, Layout] = {
    "ps": Layout(
        "Parameter server: a ps and a worker on every host, asynchronous updates (CPU).",
        "deepfm-ps",
        "ml.c5.4xlarge",
        2,
        " parameter_server",
    ),
    "hetero-ps": Layout(
        "Parameter servers on their own memory instances (group `ps`), workers on GPU instances.",
        "deepfm-ps",
        "ml.g5.2xlarge",
        2,
        "\n  parameter_server:\n    ps: {type: ml.r5.4xlarge, count: 1}   # holds the embedding tables",
    ),
    "horovod": Layout(
        "Horovod: one process per GPU, gradients averaged over all of them (synchronous).",
        "deepfm-horovod",
        "ml.g5.12xlarge",
        2,
        "",
        needs_horovod=True,
    ),
    "mirrored": Layout(
        "MultiWorkerMirroredStrategy: one worker per host, one replica per GPU (synchronous).",
        "deepfm-mirrored",
        "ml.g5.12xlarge",
        2,
        " multi_worker_mirrored",
    ),
    "single": Layout("One host, no distribution: the simplest job.", "deepfm-ps", "ml.c5.2xlarge", 1, " none"),
}


def image_for(layout: Layout) -> images.TrainingImage:
    """The newest training image that runs the layout (Horovod ends at an older image)."""
    usable = [image for image in images.IMAGES.values() if image.horovod or not layout.needs_horovod]
    return max(usable, key=lambda image: images.version_tuple(image.version))


def sdk_config_files() -> list[Path]:
    """The SageMaker SDK v2's defaults files in the order it merges them (a later one wins): the admin config
    (SAGEMAKER_ADMIN_CONFIG_OVERRIDE, else config.yaml in platformdirs' site config dir for "sagemaker"), then
    the user config (SAGEMAKER_USER_CONFIG_OVERRIDE, else config.yaml in its user config dir). A directory
    stands for the config.yaml in it; an s3:// location is left to the SDK."""
    from platformdirs import site_config_dir, user_config_dir

    found = []
    for variable, folder in (
        ("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", site_config_dir("sagemaker")),
        ("SAGEMAKER_USER_CONFIG_OVERRIDE", user_config_dir("sagemaker")),
    ):
        location = os.environ.get(variable) or str(Path(folder) / "config.yaml")
        if location.startswith("s3://"):
            continue
        path = Path(location)
        found.append(path / "config.yaml" if path.is_dir() else path)
    return found


def _read_defaults(path: Path) -> dict[str, str]:
    try:
        sagemaker = (yaml.safe_load(path.read_text()) or {}).get("SageMaker") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return {}
    session = ((sagemaker.get("PythonSDK") or {}).get("Modules") or {}).get("Session") or {}
    found = {"role": (sagemaker.get("TrainingJob") or {}).get("RoleArn"), "bucket": session.get("DefaultS3Bucket")}
    return {key: value for key, value in found.items() if isinstance(value, str) and value}


def sdk_defaults() -> dict[str, str]:
    """Role and bucket from the SageMaker SDK's defaults files (`sdk_config_files`), read as plain YAML, the user
    file's values over the admin file's (bucket_from: the file and key the bucket came from); {} when there is
    none."""
    merged: dict[str, str] = {}
    for path in sdk_config_files():
        found = _read_defaults(path)
        merged.update(found, **({"bucket_from": f"{path}: DefaultS3Bucket"} if "bucket" in found else {}))
    return merged


def check_bucket(bucket: str, source: str) -> None:
    """A literal bucket must be one the spec's S3 URIs accept; a `${DFM_BUCKET:-...}` form is checked later."""
    if "${" not in bucket and not BUCKET.fullmatch(bucket):
        raise DfmError(
            f"{source}: '{bucket}' is not an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens, "
            f"starting and ending with a letter or digit); nothing written"
        )


def render(name: str, layout_name: str, role: str, bucket: str, region: str, file: str) -> str:
    """The spec text (pure: the same arguments give the same file)."""
    layout = LAYOUTS[layout_name]
    image = image_for(layout)
    gpus = (catalog.instance(layout.instance_type) or catalog.InstanceType(0, 0)).gpus
    distribution = layout.distribution or f"\n  horovod: {{processes_per_host: {gpus}}}   # one process per GPU"
    return f"""\
# {layout.about}
# Written by `dfm init {layout_name}`. Check it, dry-run it, then launch it:
#   dfm validate {file}
#   dfm launch {file} --dry-run
#   dfm launch {file}
# Every field: docs/spec.md.
name: {name}
role: {role}
region: {region}
entry_point: {layout.entry_point}   # a bundled DeepFM script; or your own script with source_dir
framework: {{version: "{image.short}", python: {image.python}}}   # the newest image with this layout
instance: {{type: {layout.instance_type}, count: {layout.count}, volume_gb: 50}}
distribution:{distribution}
data:
  mode: File              # download the data before training starts
  s3_shard: {str(layout.count > 1).lower():<5}           # each host gets its own share of the files under train/
  train: s3://{bucket}/{name}/train/
  eval: s3://{bucket}/{name}/eval/
output: s3://{bucket}/{name}/   # each job writes under <output>/<job name>/
checkpoints: auto         # <output>/<job name>/checkpoints
max_run: 3600             # seconds: SageMaker stops the job after this
hyperparameters:
  # TFRecords of ids: one more than the largest id (dfm data inspect DIR shows it). Raw TSV/CSV with a
  # features: section (dfm data inspect FILE writes one): drop this line, the section's fields set it
  feature_size: 117581
  batch_size: 1024
  epochs: 1
"""


def on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _resolve(value: str | None, variable: str, found: str | None, prompt: str, placeholder: str) -> str:
    value = value or os.environ.get(variable) or found
    if value:
        return value
    if on_terminal():
        value = click.prompt(f"{prompt} (empty: set {variable} later)", default="", show_default=False).strip()
    return value or f"${{{variable}:-{placeholder}}}"


@click.command()
@click.argument("layout", type=click.Choice(list(LAYOUTS)), default="ps")
@click.option(
    "--output",
    "-o",
    "path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The spec file to write [default: <name>.yaml].",
)
@click.option("--name", default=None, help="The job's base name [default: deepfm-<layout>].")
@click.option(
    "--role",
    default=None,
    metavar="ARN",
    help=f"SageMaker execution role [default: {ROLE_VARIABLE}, or the SageMaker SDK's config].",
)
@click.option(
    "--bucket",
    default=None,
    help=f"S3 bucket for data and output [default: {BUCKET_VARIABLE}, or the SageMaker SDK's config].",
)
@click.option("--region", default=None, help="AWS region [default: AWS_REGION or AWS_DEFAULT_REGION, else us-east-1].")
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
def init(
    layout: str,
    path: str | None,
    name: str | None,
    role: str | None,
    bucket: str | None,
    region: str | None,
    force: bool,
) -> None:
    """Write a commented job spec to start from: ps (default), hetero-ps, horovod, mirrored or single."""
    name = name or f"deepfm-{layout}"
    target = Path(path or f"{name}.yaml")
    if target.exists() and not force:
        raise DfmError(f"{target}: already exists; pass --force to overwrite it, or -o another file")
    defaults = sdk_defaults()
    role = _resolve(role, ROLE_VARIABLE, defaults.get("role"), "SageMaker execution role ARN", PLACEHOLDER_ROLE)
    given = {"--bucket": bucket, BUCKET_VARIABLE: os.environ.get(BUCKET_VARIABLE)}
    source = next((where for where, value in given.items() if value), defaults.get("bucket_from", "the S3 bucket"))
    bucket = _resolve(bucket, BUCKET_VARIABLE, defaults.get("bucket"), "S3 bucket", PLACEHOLDER_BUCKET)
    bucket = bucket.removeprefix("s3://").rstrip("/")
    check_bucket(bucket, source)
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    try:
        target.write_text(render(name, layout, role, bucket, region, target.name))
    except OSError as err:
        raise DfmError(f"{target}: cannot write: {err.strerror}") from None
    click.echo(f"wrote {target} ({layout}); next: dfm validate {target}")
    if "${" in role + bucket:
        click.echo(
            f"set {ROLE_VARIABLE} and {BUCKET_VARIABLE} (or edit role and the s3:// URIs) before launching", err=True
        )


COMMANDS: list = [init]
