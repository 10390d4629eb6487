"""A simulated host's parameter server, started the way the TF container toolkit starts it.

The toolkit builds a `tf.distribute.Server` for the `ps` task of the host's TF_CONFIG cluster (GPUs hidden)
and lets it join forever; the host's container ends when the master has gone (the toolkit polls the
master's port). Here the server exits once the master's port has been open and is closed again, or when
the launcher that started it has gone. Run by path with the job's Python; needs only TensorFlow.
"""

import json
import os
import socket
import sys
import time


def port_open(address):
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1) as probe:
            # A closed loopback port in the ephemeral range can be "connected" to itself by the kernel.
            return probe.getsockname() != probe.getpeername()
    except OSError:
        return False


def wait_until_master_is_done(master, launcher_pid, interval=0.5):
    seen_up = False
    while os.getppid() == launcher_pid:
        up = port_open(master)
        if seen_up and not up:
            return "master is down"
        if up and not seen_up:
            print(f"ps server: master {master} is up", flush=True)
        seen_up = seen_up or up
        time.sleep(interval)
    return "launcher has gone"


def main():
    launcher_pid = os.getppid()
    config = json.loads(os.environ["TF_CONFIG"])
    import tensorflow as tf

    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]), job_name="ps", task_index=config["task"]["index"],
        config=tf.compat.v1.ConfigProto(device_count={"GPU": 0}), start=True)
    print(f"ps server {config['task']['index']} listening on {server.target}", flush=True)
    reason = wait_until_master_is_done(config["cluster"]["master"][0], launcher_pid)
    print(f"ps server stopping: {reason}", flush=True)
    # server.join() never returns and a started server keeps the interpreter from exiting normally.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
