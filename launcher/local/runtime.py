"""Which Python runs a local job: the runtime whose TensorFlow matches the image's (major.minor).

A runtime is a virtual environment per SageMaker image family, built by `scripts/runtime.sh tf-X.Y` under
$DFM_RUNTIMES (default ~/.cache/dfm/runtimes) as `tf-X.Y/bin/python`; the file `.requirements` is written
last, so its presence says the build finished. The launcher's own interpreter is the runtime for its own
TensorFlow version. Versions come from package metadata: TensorFlow is never imported here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel")
READY_MARKER = ".requirements"


@dataclass(frozen=True)
class Runtime:
    python: str  # the interpreter of every TensorFlow or MPI process of the job
    tf_version: str | None  # the TensorFlow installed there (None: none found)
    name: str  # "tf-2.12"
    own: bool  # the launcher's own interpreter
    note: str  # what the run reports: which runtime and TF it used, or why not the image's

    @property
    def bin_dir(self) -> Path:
        return Path(self.python).parent

    def executable(self, name: str) -> str | None:
        """A program installed in this runtime's bin folder (horovodrun, mpirun), if any."""
        path = self.bin_dir / name
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None

    def has_module(self, module: str) -> bool:
        """Whether `module` is importable in this runtime (asked of the runtime's own interpreter)."""
        if self.own:
            return importlib.util.find_spec(module) is not None
        if not os.access(self.python, os.X_OK):
            return False
        probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        return subprocess.run([self.python, "-c", probe], capture_output=True, timeout=60).returncode == 0


def runtimes_root() -> Path:
    return Path(os.environ.get("DFM_RUNTIMES") or Path.home() / ".cache" / "dfm" / "runtimes")


def major_minor(version: str | None) -> str | None:
    """ "2.12.0" -> "2.12"; "2.12" -> "2.12"; anything else None."""
    parts = str(version or "").split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return f"{int(parts[0])}.{int(parts[1])}"
    return None


def tf_version_in(site_dirs: list[str] | None = None) -> str | None:
    """The TensorFlow version installed in `site_dirs` (None: this interpreter's path), from package metadata."""
    for dist in importlib.metadata.distributions(**({"path": site_dirs} if site_dirs is not None else {})):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") in TENSORFLOW_DISTRIBUTIONS:
            return dist.version
    return None


def _runtime_site_dirs(folder: Path) -> list[str]:
    return [str(p) for p in sorted(folder.glob("lib/python3*/site-packages"))]


def choose_runtime(image_tf: str | None, *, root: Path, own_python: str, own_tf: str | None) -> Runtime:
    """The runtime for an image with TensorFlow `image_tf` (a version or None when the image's is unknown).

    The launcher's interpreter when its TF matches (or the image's is unknown); else `root/tf-X.Y` when it is
    set up; else the launcher's interpreter, with a note saying the image's TF was not available.
    """
    wanted, own_mm = major_minor(image_tf), major_minor(own_tf)
    own_name = f"tf-{own_mm}" if own_mm else "launcher"
    own_tf_text = f"TF {own_tf}" if own_tf else "no TensorFlow"
    if wanted is None:
        return Runtime(
            own_python,
            own_tf,
            own_name,
            True,
            f"{own_tf_text} (the launcher's Python; the image's TF version is not known)",
        )
    if wanted == own_mm:
        return Runtime(own_python, own_tf, own_name, True, f"TF {own_tf} (runtime {own_name}: the launcher's Python)")
    name = f"tf-{wanted}"
    folder = root / name
    python = folder / "bin" / "python"
    tf_version = tf_version_in(_runtime_site_dirs(folder)) if (folder / READY_MARKER).is_file() else None
    if python.exists() and major_minor(tf_version) == wanted:
        return Runtime(str(python), tf_version, name, False, f"TF {tf_version} (runtime {name})")
    return Runtime(
        own_python,
        own_tf,
        own_name,
        True,
        f"image has TF {wanted} but runtime {name} is not set up (scripts/runtime.sh {name}): running on {own_tf_text}",
    )


def for_plan(plan) -> Runtime:
    """The runtime for `plan`'s image: its framework version (also given with a custom image_uri), if any."""
    return choose_runtime(
        plan.framework_version, root=runtimes_root(), own_python=sys.executable, own_tf=tf_version_in()
    )
