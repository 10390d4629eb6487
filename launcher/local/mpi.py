"""The Horovod launch: the container's mpirun command line, pointed at one machine holding every host.

On SageMaker the toolkit on the first host runs `mpirun --host algo-1:P,algo-2:P -np N ...` with its
environment exported to every rank (`-x NAME`), the spec's custom MPI options appended, and ssh reaching
the other hosts. Here all slots are `localhost`, the network interface is loopback, and a small wrapper
(`rank_exec.py`) gives each rank the tree of the host its rank falls on. Without mpirun, `horovodrun
--gloo` launches the same ranks.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from launcher.local.container import HostTree

from launcher.contract import CONTAINER_BASE_DIR
from launcher.errors import DfmError

RANK_EXEC = Path(__file__).with_name("rank_exec.py")
LOOPBACK_INTERFACE = "lo"


def nccl_debug_and_rest(custom_options: str) -> tuple[str, list[str]]:
    """The toolkit reads `--NCCL_DEBUG X` out of the custom options (default INFO); the rest go to mpirun."""
    tokens, rest, nccl_debug = shlex.split(custom_options or ""), [], "INFO"
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--NCCL_DEBUG" and i + 1 < len(tokens):
            nccl_debug, i = tokens[i + 1], i + 2
            continue
        if token.startswith("--NCCL_DEBUG="):
            nccl_debug = token.split("=", 1)[1]
        else:
            rest.append(token)
        i += 1
    return nccl_debug, rest


def script_command(entry_point: str, argv: list[str]) -> list[str]:
    # The toolkit's MPI runner starts `python -m mpi4py script.py` so an uncaught exception aborts all ranks.
    if importlib.util.find_spec("mpi4py") is not None:
        return [sys.executable, "-m", "mpi4py", entry_point, *argv]
    return [sys.executable, entry_point, *argv]


def write_rank_hosts(path: Path, processes_per_host: int, hosts: list[tuple[Mapping[str, str], "HostTree"]]) -> Path:
    """What rank_exec.py needs to place a rank on its host: env, code dir, and the tree standing in for /opt/ml."""
    layout = {"processes_per_host": processes_per_host, "container_base": CONTAINER_BASE_DIR,
              "hosts": [{"env": dict(env), "cwd": str(tree.code), "base": str(tree.base)} for env, tree in hosts]}
    path.write_text(json.dumps(layout))
    return path


def launcher_command(*, ranks: int, rank_hosts: Path, program: list[str], exported: list[str],
                     custom_options: str) -> list[str]:
    mpirun = shutil.which("mpirun")
    wrapped = [sys.executable, str(RANK_EXEC), str(rank_hosts), *program]
    if mpirun:
        nccl_debug, extra = nccl_debug_and_rest(custom_options)
        cmd = [mpirun, "--host", f"localhost:{ranks}", "-np", str(ranks), "--allow-run-as-root", "--oversubscribe",
               "--display-map", "--tag-output",
               "-mca", "btl_tcp_if_include", LOOPBACK_INTERFACE, "-mca", "oob_tcp_if_include", LOOPBACK_INTERFACE,
               "-mca", "plm_rsh_no_tree_spawn", "1", "-bind-to", "none", "-map-by", "slot",
               "-mca", "pml", "ob1", "-mca", "btl", "^openib", "-mca", "orte_abort_on_non_zero_status", "1",
               "-mca", "btl_vader_single_copy_mechanism", "none",
               "-x", "NCCL_MIN_NRINGS=4", "-x", f"NCCL_SOCKET_IFNAME={LOOPBACK_INTERFACE}",
               "-x", f"NCCL_DEBUG={nccl_debug}", *extra]
        for name in exported:
            cmd += ["-x", name]
        return cmd + wrapped
    horovodrun = shutil.which("horovodrun") or (str(Path(sys.executable).with_name("horovodrun"))
                                                if Path(sys.executable).with_name("horovodrun").exists() else None)
    if horovodrun:
        return [horovodrun, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", *wrapped]
    raise DfmError("a Horovod job needs mpirun (Open MPI) or horovodrun on this machine; neither was found")
