"""The simulated host's parameter server: a real tf.distribute.Server that lives until it is stopped."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from launcher.local.cluster import LOOPBACK, free_port
from launcher.local.local_processes import PS_SERVER

# A stand-in launcher: starts the ps server, reports its pid, and exits when its stdin closes.
LAUNCHER = """
import subprocess, sys
ps = subprocess.Popen([sys.executable, sys.argv[1]], stdout=open(sys.argv[2], "w"), stderr=subprocess.STDOUT)
print(ps.pid, flush=True)
sys.stdin.read()
"""


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.2)
    return predicate()


def serving(address):
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ps_server_outlives_the_master_and_goes_with_its_launcher(tmp_path):
    master = socket.socket()
    master.bind((LOOPBACK, 0))
    master.listen()
    ps_address = f"{LOOPBACK}:{free_port()}"
    tf_config = {
        "cluster": {
            "master": [f"{LOOPBACK}:{master.getsockname()[1]}"],
            "ps": [ps_address],
            "worker": [f"{LOOPBACK}:{free_port()}"],
        },
        "environment": "cloud",
        "task": {"type": "ps", "index": 0},
    }
    log = tmp_path / "ps.log"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(PS_SERVER), str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
    )
    ps_pid = int(launcher.stdout.readline())
    try:
        assert wait_for(lambda: serving(ps_address) and "listening" in log.read_text(), 60), log.read_text()
        master.close()  # on SageMaker a host's ps does not care about the master: it ends with its own host
        time.sleep(3)
        assert serving(ps_address) and pid_alive(ps_pid)
        launcher.stdin.close()  # the launcher goes: nothing would ever stop the server, so it stops itself
        launcher.wait(timeout=10)
        assert wait_for(lambda: not pid_alive(ps_pid), 20), log.read_text()
        assert "the launcher has gone" in log.read_text()
    finally:
        launcher.kill()
        try:
            os.kill(ps_pid, 9)
        except ProcessLookupError:
            pass
        master.close()


@pytest.mark.parametrize("cores, env, threads", [(1, "", 2), (2, "", 0), (8, "1", 2), (1, "4", 0)])
def test_a_ps_server_on_one_core_still_gets_two_inter_op_threads(monkeypatch, cores, env, threads):
    # its remote calls' handlers hold a thread of that pool while their work needs another
    import importlib.util

    spec = importlib.util.spec_from_file_location("ps_server", PS_SERVER)
    ps_server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ps_server)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", env)
    assert ps_server.inter_op_threads() == threads
