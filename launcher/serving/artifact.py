"""A model to serve, as the container would get it: a folder (a local run's, or any SavedModel folder) or a
`model.tar.gz`, laid out into the folder that becomes `/opt/ml/model`, and what the container finds in it."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from launcher.errors import DfmError
from launcher.serving import contract

LOCAL_RUN_MODEL = Path("hosts", "algo-1", "model")  # where a local run's chief exports (SM_MODEL_DIR of algo-1)


@dataclass(frozen=True)
class ServePlan:
    """`dfm serve MODEL`: the artifact named, and the loopback port to answer on (0: any free one)."""

    model: Path | str  # a local file or folder; or a training job's name or an s3:// URI (`remote`)
    port: int = 8080
    host: str = "127.0.0.1"
    region: str | None = None  # where a training job's (or an s3://) model is downloaded from

    def remote(self) -> bool:
        """A training job's name or an s3:// model.tar.gz, not a local file or folder."""
        text = str(self.model)
        return text.startswith("s3://") or (
            "/" not in text and not text.endswith(".tar.gz") and not Path(text).exists()
        )


@dataclass(frozen=True)
class Artifact:
    """The artifact's root folder (the container's /opt/ml/model), what the container finds in it, and the
    temporary folder a `model.tar.gz` was unpacked into (None for a folder)."""

    source: Path
    root: Path
    layout: contract.Layout
    unpacked: Path | None = None

    def model_folder(self, model: contract.Model, version: int) -> Path:
        return self.root / model.folder / str(version)

    def close(self) -> None:
        if self.unpacked is not None:
            shutil.rmtree(self.unpacked, ignore_errors=True)


def open_artifact(source: Path) -> Artifact:
    """The artifact at `source` with its layout checked: a model.tar.gz is unpacked into a temporary folder; a
    local run's folder serves its chief's export. A layout the container refuses is refused (exit 1), each
    problem with its fix."""
    source = Path(source)
    if not source.exists():
        raise DfmError(
            f"{source}: no such file or folder (give a model folder, a model.tar.gz or a local run's folder)"
        )
    if source.is_dir():
        root = source / LOCAL_RUN_MODEL if (source / LOCAL_RUN_MODEL).is_dir() else source
        artifact = Artifact(source, root, contract.find_models(folder_files(root)))
    else:
        artifact = _unpack(source)
    problems = list(artifact.layout.problems)
    if problems and not artifact.layout.models and _is_version_folder(artifact.root):
        problems = [
            f"{problems[0]}; {artifact.root} is itself a version folder: serve its parent, {artifact.root.parent}"
        ]
    if problems:
        artifact.close()
        raise DfmError(f"{source}: " + "; ".join(problems), exit_code=1)
    return artifact


def _is_version_folder(root: Path) -> bool:
    return root.name.isdigit() and (root / "saved_model.pb").is_file()


def folder_files(root: Path) -> list[str]:
    files = []
    for folder, _, names in os.walk(root):
        rel = Path(folder).relative_to(root)
        files += [str(PurePosixPath(*rel.parts, name)) for name in names]
    return files


def _unpack(source: Path) -> Artifact:
    try:
        archive = tarfile.open(source, "r:*")
    except (tarfile.TarError, OSError) as err:
        raise DfmError(f"{source}: not a folder nor a readable tar archive ({err}); give a model.tar.gz", 1) from None
    with archive:
        members = [m for m in archive.getmembers() if m.isfile() or m.isdir()]
        for member in members:
            path = PurePosixPath(member.name)
            if path.is_absolute() or ".." in path.parts:
                raise DfmError(
                    f"{source}: member {member.name} leaves the archive's folder; rebuild it with relative paths", 1
                )
        layout = contract.find_models(str(PurePosixPath(m.name)) for m in members if m.isfile())
        unpacked = Path(tempfile.mkdtemp(prefix="dfm-serve-"))
        if not layout.problems:
            try:
                archive.extractall(unpacked, members=members, filter="data")
            except (tarfile.TarError, OSError) as err:
                shutil.rmtree(unpacked, ignore_errors=True)
                raise DfmError(f"{source}: cannot unpack ({err})", 1) from None
    return Artifact(source, unpacked, layout, unpacked)
