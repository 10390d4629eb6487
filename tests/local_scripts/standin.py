"""A stand-in entry point for the --local tests: reports what the container gave it, then behaves on demand.

Writes $SM_OUTPUT_DATA_DIR/report-<host>[-rank<r>].json (env, argv, cwd, the files and Pipe bytes it saw, its
SM_NUM_CPUS and the cores it, a thread of it and a child of it may run on),
prints metric lines, and then finishes, sleeps, or fails as its hyperparameters ask. Stdlib only.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--behave", default="ok")  # ok | fail | sleep
parser.add_argument("--on_host", default="")  # apply `behave` only on this host ("" = every host)
parser.add_argument("--sleep_s", type=float, default=0)
parser.add_argument("--pipe_epochs", type=int, default=0)
parser.add_argument("--spawn_child", default="False")
parser.add_argument("--listen", default="False")  # bind a port on all interfaces, as a TF server does
parser.add_argument("--stop_on", default="")  # this host stops itself (SIGSTOP) after its train lines: a hung process
parser.add_argument("--stop_marker", default="")  # with stop_on: where that host writes its pid just before stopping
parser.add_argument("--interrupt", default="never")  # first | always: the chief SIGKILLs itself (a lost instance)
parser.add_argument("--allocate_mb", type=int, default=0)  # with on_host: that host holds this much, then sleeps
parser.add_argument("--warning", default="")  # printed as the scripts print a warning (deepfm_log.warn)
parser.add_argument("--hold_until", default="")  # after its train lines, wait until this file exists (120 s at most)
parser.add_argument("--probe_ps_s", type=float, default=0)  # PS jobs: wait for every ps; the master then watches them
args, unknown = parser.parse_known_args()

host = json.load(open(os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "input/config/resourceconfig.json")))[
    "current_host"
]
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("HOROVOD_RANK"))
name = host + (f"-rank{rank}" if rank is not None else "")
data_dir = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "input", "data")
config = json.load(open(os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "input/config/inputdataconfig.json")))

files, pipes = {}, {}
for channel, spec in config.items():
    if spec["TrainingInputMode"] == "Pipe":
        pipes[channel] = []
        for epoch in range(args.pipe_epochs):
            with open(os.path.join(data_dir, f"{channel}_{epoch}"), "rb") as fifo:
                pipes[channel].append(hashlib.sha256(fifo.read()).hexdigest())
    else:
        root = os.path.join(data_dir, channel)
        files[channel] = sorted(
            os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root, followlinks=True) for f in fs
        )

report = {
    "host": host,
    "rank": rank,
    "pid": os.getpid(),
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "python": sys.executable,
    "path": os.environ.get("PATH", ""),
    "pythonpath": os.environ.get("PYTHONPATH", ""),
    "env": {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("SM_", "TF_CONFIG", "SAGEMAKER_", "DFM_", "CURRENT_HOST", "TRAINING_JOB_NAME"))
    },
    "files": files,
    "pipes": pipes,
    "num_cpus": os.environ.get("SM_NUM_CPUS"),
    "memory_cgroup": next(  # the cgroup v1 memory controller's group this process runs in
        (line.split(":", 2)[2] for line in open("/proc/self/cgroup").read().splitlines() if ":memory:" in line), None
    )
    if os.path.exists("/proc/self/cgroup")
    else None,
}
if hasattr(os, "sched_getaffinity"):  # the cores this process, a thread of it and a child of it may run on
    import threading

    report["cpus"] = sorted(os.sched_getaffinity(0))
    seen = []
    thread = threading.Thread(target=lambda: seen.extend(sorted(os.sched_getaffinity(0))))
    thread.start()
    thread.join()
    report["thread_cpus"] = seen
    child = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    report["child_cpus"] = json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout)
if host == "algo-1" and rank in (None, "0"):  # the chief keeps a run counter as its "checkpoint"
    counter = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "checkpoints", "count.txt")
    report["resumed_from"] = int(open(counter).read()) if os.path.exists(counter) else 0
    with open(counter, "w") as handle:
        handle.write(str(report["resumed_from"] + 1))
    if args.interrupt == "always" or args.interrupt == "first" and report["resumed_from"] == 0:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
if args.listen == "True":
    import socket

    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    report["listen_port"] = listener.getsockname()[1]
    report["loopback_reachable"] = socket.create_connection(("127.0.0.1", report["listen_port"]), 2) is not None
if args.probe_ps_s:
    import socket

    def port_open(address):
        host_, port = address.rsplit(":", 1)
        try:
            with socket.create_connection((host_, int(port)), timeout=1) as probe:
                return probe.getsockname() != probe.getpeername()  # not the kernel connecting a port to itself
        except OSError:
            return False

    def wait_until(predicate, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.2)
        return predicate()

    tf_config = json.loads(os.environ["TF_CONFIG"])
    ps, master = tf_config["cluster"]["ps"], tf_config["cluster"]["master"][0]
    if tf_config["task"]["type"] == "master":  # once every ps serves, open the master's port for the workers
        report["ps_all_up"] = wait_until(lambda: all(map(port_open, ps)), 90)
        chief = socket.socket()
        chief.bind(tuple([master.rsplit(":", 1)[0], int(master.rsplit(":", 1)[1])]))
        chief.listen()
        # then watch the ps servers while the workers' scripts end: ps[i] is host i's, the master is host 0
        wait_until(lambda: not any(map(port_open, ps[1:])), args.probe_ps_s)
        report["ps_up"] = [port_open(address) for address in ps]
    else:  # a worker leaves as soon as the master is up
        report["master_seen"] = wait_until(lambda: port_open(master), 90)
if args.spawn_child == "True":
    report["child_pid"] = subprocess.Popen(["sleep", "300"]).pid
out = os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], f"report-{name}.json")
with open(out + ".tmp", "w") as handle:
    json.dump(report, handle)
os.replace(out + ".tmp", out)


def stopped(marker):
    """Whether the process whose pid `marker` holds has been stopped by a signal (without /proc: has written it)."""
    try:
        with open(marker) as handle:
            pid = int(handle.read())
        if not os.path.isdir("/proc"):
            return True
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, ValueError):
        return False


if args.stop_on and args.stop_marker and args.stop_on != host:
    # the other hosts' train lines wait until the stopping host has stopped: when the chief falls silent, the
    # stopped process is there for the stall watchdog to find
    deadline = time.monotonic() + 120
    while not stopped(args.stop_marker) and time.monotonic() < deadline:
        time.sleep(0.05)
for step in (10, 20):
    print(f"[dfm] train step={step} loss={1.0 / step:.4f} auc=0.6{step} examples_per_sec=1000.0", flush=True)
mine = args.on_host in ("", host)
hold_deadline = time.monotonic() + 120
while args.hold_until and not os.path.exists(args.hold_until) and time.monotonic() < hold_deadline:
    time.sleep(0.05)
if args.stop_on == host:
    import signal

    if args.stop_marker:
        with open(args.stop_marker + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(args.stop_marker + ".tmp", args.stop_marker)
    os.kill(os.getpid(), signal.SIGSTOP)
if mine and args.allocate_mb:  # every page written, so it is resident
    held = b"x" * (args.allocate_mb << 20)
    print(f"[dfm] allocated {args.allocate_mb} MB", flush=True)
if mine and args.behave == "sleep":
    time.sleep(args.sleep_s)
if mine and args.behave == "fail":
    print("[dfm] error: stand-in failing on purpose", flush=True)
    sys.exit(3)
print("[dfm] eval step=20 loss=0.5000 auc=0.7000", flush=True)
if args.warning:
    print(f"[dfm] warning: {args.warning}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"model-{name}.txt"), "w") as handle:
    handle.write("model")
