"""The Horovod launch against the toolkit's own MPI code (sagemaker_training.mpi): custom options and mpirun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from local_plans import in_run_dir, standin_plan, toolkit_pythonpath

from launcher.errors import DfmError
from launcher.local import mpi
from launcher.local.container import HostTree, to_host_path
from launcher.local.local_request import build_request
from launcher.local.runner import write_host_tree

needs_toolkit = pytest.mark.skipif(
    toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)"
)

# sagemaker_training.mpi imports paramiko for its ssh checks, which the functions compared here never call.
TOOLKIT_PRELUDE = """
import json, sys, types
sys.modules.setdefault("paramiko", types.ModuleType("paramiko"))
from sagemaker_training import mpi
"""

TOOLKIT_PARSE = (
    TOOLKIT_PRELUDE
    + """
out = []
for options in json.loads(sys.argv[1]):
    try:
        known, rest = mpi._parse_custom_mpi_options(options)
        out.append([known.NCCL_DEBUG, rest])
    except SystemExit:
        out.append("exit")
print(json.dumps(out))
"""
)

OPTIONS = [
    "",
    "-x FOO=1",
    "--NCCL_DEBUG WARN",
    "--NCCL WARN",
    "--NCCL_DEB=TRACE -x A=1",
    "-x FOO='a b'",
    "-x NCCL_DEBUG=WARN -x OMPI_MCA_btl_vader_single_copy_mechanism=none",
    "--mca btl_tcp_if_exclude lo",
    "--bind-to core --map-by socket -x NCCL_DEBUG=INFO",
    "-verbose  --NCCL_DEBUG\tVERSION",
    '-x "B=c d" --NCCL_DEBUG WARN --NCCL_DEBUG INFO',
    "--NCCL_DEBUG",
    "-h",
    "--he",
]


def toolkit(script: str, *args: str, env: dict | None = None, cwd: Path | None = None):
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": toolkit_pythonpath(), "PATH": os.environ["PATH"], **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@needs_toolkit
def test_custom_mpi_options_are_read_as_the_toolkit_reads_them():
    theirs = toolkit(TOOLKIT_PARSE, json.dumps(OPTIONS))
    for options, expected in zip(OPTIONS, theirs):
        if expected == "exit":  # the toolkit's argparse would stop the job: dfm refuses the options instead
            with pytest.raises(DfmError, match="mpi_options"):
                mpi.parse_custom_mpi_options(options)
        else:
            assert list(mpi.parse_custom_mpi_options(options)) == expected, options
    # the points where a shell-style reading would differ: no quoting, prefixes accepted
    assert mpi.parse_custom_mpi_options("-x FOO='a b'")[1] == ["-x", "FOO='a", "b'"]
    assert mpi.parse_custom_mpi_options("--NCCL WARN")[0] == "WARN"


TOOLKIT_MPIRUN = (
    TOOLKIT_PRELUDE
    + """
from sagemaker_training import environment, mapping, runner
env = environment.Environment()
env_vars = env.to_env_vars()
environment.write_env_vars(env_vars)  # as entry_point.run does before choosing the runner: adds PYTHONPATH
master = runner.get(runner.MPIRunnerType, env.user_entry_point, mapping.to_cmd_args(env.hyperparameters), env_vars)
print(json.dumps(master._create_command()))
"""
)


def normalized(cmd: list[str]) -> tuple[list[str], set[str]]:
    """(the command without its `-x` pairs, the set of `-x` values): mpirun reads `-x` in any order."""
    rest, exported, i = [], set(), 0
    while i < len(cmd):
        if cmd[i] == "-x":
            exported.add(cmd[i + 1])
            i += 2
        else:
            rest.append(cmd[i])
            i += 1
    return rest, exported


@needs_toolkit
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun not installed")
@pytest.mark.parametrize(
    "hosts, per_host, options", [(2, 2, "-x NCCL_DEBUG=WARN --NCCL WARN --bind-to core"), (3, 1, "")]
)
def test_mpirun_command_is_the_toolkits_but_for_the_loopback_differences(
    tmp_path, monkeypatch, hosts, per_host, options
):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/lib")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    plan = standin_plan(tmp_path, kind="horovod", hosts=hosts, per_host=per_host, mpi_options=options)
    request = build_request(in_run_dir(plan, str(tmp_path / "runs")))
    mpirun = request.process("mpirun")
    ours, environ = list(mpirun.argv), mpirun.env
    first = request.hosts[0]
    write_host_tree(first, request.source_dir)  # the toolkit reads the host's config files
    theirs = toolkit(
        TOOLKIT_MPIRUN,
        cwd=tmp_path,
        env={
            "SAGEMAKER_BASE_DIR": first.root,
            "LD_LIBRARY_PATH": "/opt/lib",
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "AWS_DEFAULT_REGION": "us-east-1",
            "TRAINING_JOB_NAME": plan.job_name,
            "SAGEMAKER_TRAINING_MODULE": environ["SAGEMAKER_TRAINING_MODULE"],
        },
    )

    # The deliberate differences (the fidelity table in docs/local.md), applied to the toolkit's command:
    names = ",".join(f"algo-{i}" + (f":{per_host}" if per_host > 1 else "") for i in range(1, hosts + 1))
    expected = [
        {
            "mpirun": ours[0],
            names: f"localhost:{hosts * per_host}",
            "eth0": "lo",
            "NCCL_SOCKET_IFNAME=eth0": "NCCL_SOCKET_IFNAME=lo",
        }.get(token, token)
        for token in theirs
    ]
    expected.insert(expected.index("--allow-run-as-root") + 1, "--oversubscribe")  # all ranks on one machine
    gethostname = next(t for t in expected if t.startswith("LD_PRELOAD="))  # the container's hostname shim
    del expected[expected.index(gethostname) - 1 : expected.index(gethostname) + 1]
    program_at = next(i for i, t in enumerate(expected) if t == sys.executable)
    program = expected[program_at:]
    if not request.runtime.has_module("mpi4py"):  # `-m mpi4py` only where the runtime has it
        program = [t for t in program if t not in ("-m", "mpi4py")]
    # each rank goes through rank_exec.py, which maps /opt/ml arguments into its host's tree
    expected = expected[:program_at] + [
        request.runtime.python,
        str(mpi.RANK_EXEC),
        f"{request.job_dir}/rank_hosts.json",
        *program,
    ]
    mapped = [to_host_path(token, HostTree(first.name, Path(first.root))) for token in ours]

    ours_rest, ours_exported = normalized(mapped)
    theirs_rest, theirs_exported = normalized(expected)
    assert ours_rest == theirs_rest
    assert ours_exported - theirs_exported == {"PYTHONUNBUFFERED"}  # lines stream as they are written
    assert theirs_exported - ours_exported == set()
    assert {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "AWS_ACCESS_KEY_ID", "SM_HOSTS"} <= ours_exported
