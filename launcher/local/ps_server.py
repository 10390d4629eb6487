"""A simulated host's parameter server, started the way the TF container toolkit starts it.

The toolkit builds a `tf.distribute.Server` for the `ps` task of the host's TF_CONFIG cluster (GPUs hidden)
in its own process, then runs the host's script; the server ends with that process, once the host's script
has ended (on a non-master host the toolkit's wait for the master returns at once: it probes the master's
gRPC port with curl, which fails). Here the launcher stops this server when the host's script has ended;
the server also exits by itself when the launcher that started it has gone. Run by path with the job's
Python; needs only TensorFlow.
"""

import json
import os
import signal
import sys
import time


def inter_op_threads(minimum=2):
    """0 (TensorFlow's default: as many as this process's cores) unless that is below `minimum`: the server
    serves remote calls on that pool, and a handler holds a thread of it while the work it waits for needs
    another, so a server on one core (a simulated host of one core) would never finish a step."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    default = int(os.environ.get("TF_NUM_INTEROP_THREADS", "0") or 0) or cores
    return minimum if default < minimum else 0


def wait_for_launcher_to_go(launcher_pid, interval=0.5):
    while os.getppid() == launcher_pid:
        time.sleep(interval)


def stop(signum, _frame):
    print(f"ps server stopping: {signal.Signals(signum).name} (its host's script has ended, or the run)", flush=True)
    os._exit(0)


def main():
    launcher_pid = os.getppid()
    signal.signal(signal.SIGTERM, stop)
    config = json.loads(os.environ["TF_CONFIG"])
    import tensorflow as tf

    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]),
        job_name="ps",
        task_index=config["task"]["index"],
        config=tf.compat.v1.ConfigProto(device_count={"GPU": 0}, inter_op_parallelism_threads=inter_op_threads()),
        start=True,
    )
    print(
        f"ps server {config['task']['index']} listening on {server.target} (TF {tf.__version__}, {sys.executable})",
        flush=True,
    )
    wait_for_launcher_to_go(launcher_pid)
    print("ps server stopping: the launcher has gone", flush=True)
    # server.join() never returns and a started server keeps the interpreter from exiting normally.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
