"""The processes of a local run: per distribution, what each simulated host starts (the script with its
TF_CONFIG, a ps server, mpirun and the ranks it starts), with the environment the container's toolkit gives it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from launcher.facts import contract
from launcher.plans import tasks
from launcher.local import cluster, mpi
from launcher.local.container import HostTree, container_env, host_argv, to_host_path
from launcher.local.cores import CoreLayout
from launcher.local.runtime import Runtime

PS_SERVER = Path(__file__).with_name("ps_server.py")

# A launcher started inside a job (or a test) must not leak its own container variables to the children.
NOT_INHERITED = ("SM_*", "TF_CONFIG", "SAGEMAKER_BASE_DIR")
INHERITS = "the launcher's environment without " + ", ".join(NOT_INHERITED) + ", then each process's env"


@dataclass(frozen=True)
class LocalProcess:
    label: str  # "algo-1/master", "algo-2/ps", "mpirun", "algo-2/rank3"
    host: str
    role: str  # ps | master | worker | train | mpirun | rank
    argv: tuple[str, ...]
    env: Mapping[str, str]  # set over the inherited environment (INHERITS)
    cwd: str
    log_file: str
    supervision: str = "script"  # script: its exit ends or fails the job; ps: stopped with its host;
    #                              rank: started by mpirun (argv as the rank runs it, after rank_exec.py)
    rank: int | None = None


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not (k.startswith("SM_") or k in NOT_INHERITED)}


def log_file(log_dir: Path, label: str) -> str:
    return str(log_dir / (label.replace("/", "-") + ".log"))


def _base_env(runtime: Runtime, environ: Mapping[str, str]) -> dict[str, str]:
    # the runtime's bin first, as in an activated virtual environment: `python` there is the job's Python
    return {
        "PATH": os.pathsep.join([str(runtime.bin_dir), *filter(None, [environ.get("PATH")])]),
        "PYTHONUNBUFFERED": "1",
    }  # lines reach the terminal as they are written


def _host_env(
    plan, tree: HostTree, environ: Mapping[str, str], owned: CoreLayout, current_host: str | None = None
) -> dict[str, str]:
    """What the toolkit sets for the script: SM_* and the rest (container_env), and PYTHONPATH, its own sys.path
    with the code dir first (here the host's code dir, then the launcher's PYTHONPATH, if any)."""
    env = container_env(plan, tree, current_host=current_host, num_cpus=owned.per_host)
    env["PYTHONPATH"] = os.pathsep.join([str(tree.code), *filter(None, [environ.get("PYTHONPATH")])])
    return env


def processes(
    plan,
    trees: list[HostTree],
    runtime: Runtime,
    environ: Mapping[str, str],
    job_dir: Path,
    owned: CoreLayout,
    memory_groups: Mapping[str, str] | None = None,
):
    """(processes, the master's label, files to write) for the plan's distribution. `memory_groups`: host -> the
    memory cgroup its processes run in (an MPI rank moves into its host's itself)."""
    kind, base, logs = plan.distribution.kind, _base_env(runtime, environ), job_dir / "logs"

    def script(
        tree: HostTree, label: str, role: str, tf_config: dict | None = None, extra_env: Mapping[str, str] | None = None
    ) -> LocalProcess:
        env = {**base, **_host_env(plan, tree, environ, owned), **(extra_env or {})}
        if tf_config is not None:
            env["TF_CONFIG"] = json.dumps(tf_config)
        return LocalProcess(
            label,
            tree.host,
            role,
            (runtime.python, plan.entry_point, *host_argv(plan, tree)),
            env,
            str(tree.code),
            log_file(logs, label),
        )

    if kind == "horovod":
        return _mpi_processes(plan, trees, runtime, environ, job_dir, owned, memory_groups or {})
    if not plan.toolkit_cluster:  # every host runs the script, which builds the cluster itself
        addresses = {a: f"{cluster.LOOPBACK}:{cluster.free_port()}" for a in tasks.container_addresses(plan)}
        extra_env = {contract.bundled_cluster().ADDRESSES_ENV: json.dumps(addresses)}
        scripts = [script(t, f"{t.host}/train", "train", extra_env=extra_env) for t in trees]
        return tuple(scripts), scripts[0].label, {}
    if kind == "parameter_server" and len(trees) > 1:
        layout = cluster.Layout.allocate([t.host for t in trees], with_ps=True)
        # The job's environment reaches the toolkit's process, and so its ps server (TF_NUM_INTRAOP_THREADS...).
        job_env = {str(k): str(v) for k, v in plan.environment.items()}
        servers = [
            LocalProcess(
                f"{t.host}/ps",
                t.host,
                "ps",
                (runtime.python, str(PS_SERVER)),
                {**base, **job_env, "TF_CONFIG": json.dumps(cluster.ps_tf_config(layout, t.host, ps_task=True))},
                str(t.base),
                log_file(logs, f"{t.host}/ps"),
                "ps",
            )
            for t in trees
        ]
        roles = {t.host: "master" if t.host == layout.master else "worker" for t in trees}
        scripts = [
            script(t, f"{t.host}/{roles[t.host]}", roles[t.host], cluster.ps_tf_config(layout, t.host)) for t in trees
        ]
        return (*servers, *scripts), f"{layout.master}/master", {}
    if kind == "multi_worker_mirrored":
        layout = cluster.Layout.allocate([t.host for t in trees], with_ps=False)
        scripts = [script(t, f"{t.host}/worker", "worker", cluster.mwms_tf_config(layout, t.host)) for t in trees]
        return tuple(scripts), scripts[0].label, {}
    # no distribution (or PS on one host): the toolkit just runs the script on every host
    scripts = [script(t, f"{t.host}/train", "train") for t in trees]
    return tuple(scripts), scripts[0].label, {}


def _mpi_processes(
    plan,
    trees: list[HostTree],
    runtime: Runtime,
    environ: Mapping[str, str],
    job_dir: Path,
    owned: CoreLayout,
    memory_groups: Mapping[str, str],
):
    """The first host's toolkit runs mpirun, exporting its own environment to every rank; rank_exec.py then
    gives each rank its host's tree and cores (the rank's host is rank // processes_per_host)."""
    per_host, first, logs = plan.distribution.processes_per_host, trees[0], job_dir / "logs"
    envs = {t.host: _host_env(plan, t, environ, owned, current_host=first.host) for t in trees}
    mpirun_env = {**_base_env(runtime, environ), **envs[first.host]}
    rank_hosts = job_dir / "rank_hosts.json"
    # the toolkit exports what it sets for the script (SM_*, PYTHONPATH); PYTHONUNBUFFERED is dfm's own
    exported = sorted(n for n in envs[first.host] if n.startswith("SM_")) + ["PYTHONPATH", "PYTHONUNBUFFERED"]
    program = mpi.script_command(runtime, plan.entry_point, list(plan.argv))
    cmd = mpi.launcher_command(
        ranks=per_host * len(trees),
        rank_hosts=rank_hosts,
        program=program,
        exported=exported,
        custom_options=plan.distribution.mpi_options,
        runtime=runtime,
        environ={**inherited_env(environ), **mpirun_env},
    )
    processes = [
        LocalProcess("mpirun", first.host, "mpirun", tuple(cmd), mpirun_env, str(first.code), log_file(logs, "mpirun"))
    ]
    for rank in range(per_host * len(trees)):
        tree = trees[rank // per_host]
        label = f"{tree.host}/rank{rank}"
        processes.append(
            LocalProcess(
                label,
                tree.host,
                "rank",
                tuple(to_host_path(a, tree) for a in program),
                {**mpirun_env, **envs[tree.host]},
                str(tree.code),
                log_file(logs, label),
                "rank",
                rank,
            )
        )
    layout = mpi.rank_hosts_layout(
        per_host, [(envs[t.host], t, owned.cpus[t.host], memory_groups.get(t.host, "")) for t in trees]
    )
    return tuple(processes), "mpirun", {str(rank_hosts): layout}
