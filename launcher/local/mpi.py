"""The Horovod launch: the container's mpirun command line, pointed at one machine holding every host.

On SageMaker the toolkit on the first host (sagemaker_training.mpi.MasterRunner) runs `mpirun --host
algo-1:P,algo-2:P -np N ...` exporting PATH, LD_LIBRARY_PATH, its gethostname LD_PRELOAD, the credentials
in its environment and every variable it sets for the script (`-x NAME`), with the spec's custom MPI
options appended, and ssh reaching the other hosts. Here all slots are `localhost`, the network interface
is loopback, and a small wrapper (`rank_exec.py`) gives each rank the tree of the host its rank falls on.
Without mpirun, `horovodrun --gloo` launches the same ranks.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from launcher.local.container import HostTree
    from launcher.local.runtime import Runtime

from launcher.facts.conventions import CONTAINER_BASE_DIR
from launcher.errors import DfmError

RANK_EXEC = Path(__file__).with_name("rank_exec.py")
LOOPBACK_INTERFACE = "lo"
# Exported by the toolkit's mpirun whatever the job: the image sets both (here only when set, as Open MPI
# warns about a missing one), and the credentials only when present.
SYSTEM_VARIABLES = ("LD_LIBRARY_PATH", "PATH")
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class _OptionsParser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit the toolkit; say it as dfm says things
        raise DfmError(
            f"distribution.horovod.mpi_options: the container toolkit cannot read these options "
            f"({message}); it reads `--NCCL_DEBUG LEVEL` and passes everything else to mpirun",
            2,
        )

    def exit(self, status=0, message=None):
        raise DfmError(
            "distribution.horovod.mpi_options: `-h`/`--help` would make the container toolkit print "
            "its usage and exit instead of training; remove it",
            2,
        )


def parse_custom_mpi_options(custom_options: str) -> tuple[str, list[str]]:
    """(NCCL_DEBUG level, options for mpirun), read as the toolkit reads them: a plain whitespace split (no
    quoting: `-x FOO='a b'` is two words) and argparse's parse_known_args, so `--NCCL_DEBUG X`,
    `--NCCL_DEBUG=X` and any unambiguous prefix (`--NCCL X`) set the level; the default is INFO."""
    parser = _OptionsParser()
    parser.add_argument("--NCCL_DEBUG", default="INFO", type=str)
    known, rest = parser.parse_known_args((custom_options or "").split())
    return known.NCCL_DEBUG, rest


def script_command(runtime: "Runtime", entry_point: str, argv: list[str]) -> list[str]:
    # The toolkit's MPI runner starts `python -m mpi4py script.py` so an uncaught exception aborts all ranks.
    if runtime.has_module("mpi4py"):
        return [runtime.python, "-m", "mpi4py", entry_point, *argv]
    return [runtime.python, entry_point, *argv]


def rank_hosts_layout(
    processes_per_host: int, hosts: list[tuple[Mapping[str, str], "HostTree", tuple[int, ...], str]]
) -> dict:
    """What rank_exec.py reads to place a rank on its host: env, code dir, the tree standing in for /opt/ml,
    the host's cores (empty: not confined) and its memory cgroup (empty: none)."""
    return {
        "processes_per_host": processes_per_host,
        "container_base": CONTAINER_BASE_DIR,
        "hosts": [
            {"env": dict(env), "cwd": str(tree.code), "base": str(tree.base), "cpus": list(cpus), "memory_group": group}
            for env, tree, cpus, group in hosts
        ],
    }


def launcher_command(
    *,
    ranks: int,
    rank_hosts: Path,
    program: list[str],
    exported: list[str],
    custom_options: str,
    runtime: "Runtime",
    environ: Mapping[str, str],
) -> list[str]:
    """mpirun (or horovodrun) for `ranks` ranks of `program`, each through rank_exec.py. `exported`: the
    variables the toolkit sets for the script; `environ`: mpirun's own environment."""
    wrapped = [runtime.python, str(RANK_EXEC), str(rank_hosts), *program]
    mpirun = runtime.executable("mpirun") or shutil.which("mpirun", path=environ.get("PATH"))
    if mpirun:
        nccl_debug, extra = parse_custom_mpi_options(custom_options)
        cmd = [
            mpirun,
            "--host",
            f"localhost:{ranks}",
            "-np",
            str(ranks),
            "--allow-run-as-root",
            "--oversubscribe",
            "--display-map",
            "--tag-output",
            "-mca",
            "btl_tcp_if_include",
            LOOPBACK_INTERFACE,
            "-mca",
            "oob_tcp_if_include",
            LOOPBACK_INTERFACE,
            "-mca",
            "plm_rsh_no_tree_spawn",
            "1",
            "-bind-to",
            "none",
            "-map-by",
            "slot",
            "-mca",
            "pml",
            "ob1",
            "-mca",
            "btl",
            "^openib",
            "-mca",
            "orte_abort_on_non_zero_status",
            "1",
            "-mca",
            "btl_vader_single_copy_mechanism",
            "none",
            "-x",
            "NCCL_MIN_NRINGS=4",
            "-x",
            f"NCCL_SOCKET_IFNAME={LOOPBACK_INTERFACE}",
            "-x",
            f"NCCL_DEBUG={nccl_debug}",
        ]
        for name in SYSTEM_VARIABLES:
            if name in environ:
                cmd += ["-x", name]
        cmd += extra
        for name in [*(n for n in CREDENTIAL_VARIABLES if n in environ), *exported]:
            cmd += ["-x", name]
        return cmd + wrapped
    horovodrun = runtime.executable("horovodrun") or shutil.which("horovodrun", path=environ.get("PATH"))
    if horovodrun:
        return [horovodrun, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", *wrapped]
    raise DfmError("a Horovod job needs mpirun (Open MPI) or horovodrun on this machine; neither was found")
