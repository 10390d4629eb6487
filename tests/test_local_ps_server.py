"""The simulated host's parameter server: a real tf.distribute.Server that leaves when the master has gone."""

import json
import os
import socket
import subprocess
import sys

import pytest

from launcher.local.cluster import LOOPBACK, free_port
from launcher.local.runner import PS_SERVER


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ps_server_serves_then_exits_when_the_master_goes_down():
    master = socket.socket()
    master.bind((LOOPBACK, 0))
    master.listen()
    ps_address = f"{LOOPBACK}:{free_port()}"
    tf_config = {"cluster": {"master": [f"{LOOPBACK}:{master.getsockname()[1]}"], "ps": [ps_address],
                             "worker": [f"{LOOPBACK}:{free_port()}"]},
                 "environment": "cloud", "task": {"type": "ps", "index": 0}}
    proc = subprocess.Popen([sys.executable, str(PS_SERVER)], env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "is up" in line:  # the server has seen the master: only a master that was up can go down
                break
        assert any("listening" in line for line in lines), lines
        assert any("master" in line and "is up" in line for line in lines), lines
        host, port = ps_address.split(":")
        socket.create_connection((host, int(port)), timeout=5).close()  # the ps task really serves
        master.close()
        try:
            rest, _ = proc.communicate(timeout=60)  # keep reading: TensorFlow's logs could fill the pipe
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("ps server still up 60 s after the master went down:\n" + proc.communicate()[0][-3000:])
        assert proc.returncode == 0
        assert "master is down" in rest
    finally:
        proc.kill()
        master.close()
