"""The parameter-server chief's watch over its worker tasks: a worker that dies ends the run, with a line
naming it, instead of a hang.

TensorFlow's ClusterCoordinator takes a worker it cannot reach for a preempted one: it puts that worker's
closures back for the others and waits up to an hour (`_WORKER_MAXIMUM_RECOVERY_SEC`) for it to return,
while the chief's end-of-data accounting waits for the dead worker's answer forever. Inside a SageMaker job
nothing restarts a dead task (a per-GPU worker, the chief's own worker, another host's), so the chief checks
every worker's port; one closed for longer than `$DFM_WORKER_WAIT_S` seconds (default 60) ends the chief, exit 1.
A worker that hangs with its port open is the launcher's stall watchdog's to catch (`stall_timeout`).
"""

import os
import threading
import time

from deepfm_log import log
from hetero_cluster import port_open

WAIT_ENV = "DFM_WORKER_WAIT_S"
DEFAULT_WAIT_S = 60.0


def wait_s(environ=None):
    value = (environ if environ is not None else os.environ).get(WAIT_ENV, "")
    return float(value) if value.strip() else DEFAULT_WAIT_S


def lost_worker_message(index, address, seconds):
    return (
        f"error: worker task {index} ({address}) has been unreachable for {seconds:.0f} s: it has died, and "
        "TensorFlow's ClusterCoordinator would wait up to an hour for it to come back; stopping the chief "
        f"(${WAIT_ENV} sets this wait)"
    )


def _exit(message):
    log(message)
    os._exit(1)  # the main thread is blocked in coordinator.join(); its threads would keep the process up


class WorkerWatch:
    """Checks the workers' ports every `poll_s` seconds from a daemon thread; `on_lost(message)` (default: log
    it and exit 1) once one has been closed for `wait_s` seconds. `stop()` before the chief's own shutdown."""

    def __init__(self, workers, wait_s=DEFAULT_WAIT_S, poll_s=1.0, on_lost=_exit, probe=port_open):
        self.workers, self.wait_s, self.poll_s = list(workers), float(wait_s), float(poll_s)
        self.on_lost, self.probe = on_lost, probe
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dfm-worker-watch", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stopped.set()

    def _run(self):
        down_since = {}
        while not self._stopped.wait(self.poll_s):
            now = time.monotonic()
            for index, address in enumerate(self.workers):
                if self.probe(address):
                    down_since.pop(index, None)
                    continue
                since = down_since.setdefault(index, now)
                if now - since >= self.wait_s and not self._stopped.is_set():
                    self.on_lost(lost_worker_message(index, address, now - since))
                    return


def watch_workers(cluster):
    """Start watching `cluster`'s workers (the chief's hook, once its tasks are all up)."""
    return WorkerWatch(cluster.get("worker", []), wait_s()).start()
