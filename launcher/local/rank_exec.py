"""Per-rank wrapper under mpirun/horovodrun: put this rank into its simulated host, then exec the script.

All simulated hosts are this machine, so mpirun starts every rank here; the rank's host is
rank // processes_per_host (mpirun maps by slot, filling one host's slots before the next). The wrapper
takes that host's environment (its SAGEMAKER_BASE_DIR tree and the paths in it) from the JSON file the
launcher wrote, moves onto the host's cores and into its memory cgroup, changes into the host's code dir,
maps /opt/ml arguments into the host's tree and replaces itself with the script. Stdlib only: it runs before
anything else in the rank.

usage: python rank_exec.py HOSTS_JSON PROGRAM [ARGS...]
"""

import json
import os
import sys


def rank_from_env(env):
    for name in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"):
        if name in env:
            return int(env[name])
    raise SystemExit("rank_exec: no MPI/Horovod rank in the environment")


def main(argv):
    hosts_file, program = argv[1], argv[2:]
    with open(hosts_file, encoding="utf-8") as handle:
        layout = json.load(handle)
    rank = rank_from_env(os.environ)
    host = layout["hosts"][rank // layout["processes_per_host"]]
    os.environ.update(host["env"])
    if host.get("cpus"):  # mpirun runs on the first host's cores; the rank moves to its own host's
        os.sched_setaffinity(0, host["cpus"])
    if host.get("memory_group"):  # and into its own host's memory cgroup, before the script allocates anything
        try:
            with open(os.path.join(host["memory_group"], "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        except OSError:  # the launcher could not make the groups: its sampler holds the hosts instead
            pass
    os.chdir(host["cwd"])
    # Arguments naming container paths (--model_dir /opt/ml/model) point into this rank's host tree.
    container = layout["container_base"]
    program = [
        host["base"] + arg[len(container) :] if arg == container or arg.startswith(container + "/") else arg
        for arg in program
    ]
    os.execv(program[0], program)


if __name__ == "__main__":
    main(sys.argv)
