"""The parameter-server cluster of a heterogeneous SageMaker job (instance groups), built by the script.

SageMaker's TensorFlow toolkit builds TF_CONFIG only for its own `parameter_server` distribution, which
puts a ps on every host of one group. With instance groups (ps on their own memory instances, workers on
GPU or CPU instances) the job runs without a toolkit distribution: every host runs the script with no
TF_CONFIG, and the script reads `resourceconfig.json` (`current_host`, `current_group_name`,
`instance_groups: [{instance_group_name, instance_type, hosts}]`) and builds the cluster here:

- chief: the first host of the worker group, at CHIEF_PORT. It coordinates, checkpoints and exports.
- worker: every host of the worker group at WORKER_PORT, the chief's host included (its own worker
  trains on that host's data, as in the homogeneous layout where the master starts a worker child);
  `workers_per_host` tasks per host on multi-GPU hosts (one per GPU, ps_gpu_workers), task k at
  WORKER_PORT + ps_gpu_workers.PORT_STRIDE x k.
- ps: `ps_per_host` tasks on every host of the ps group, at PS_PORT, PS_PORT + 1, ...

Every host computes the same cluster from the same file, so no host waits for another to tell it.
The lifecycle helpers below are the heterogeneous side of what train_ps.py does for the homogeneous one:
ps hosts serve until the chief's port has come and gone; the chief waits until every task answers and
names the ones that do not; a coordinator error caused by a dead ps is turned into one line naming it.

Standard library only: the bundled scripts import this before TensorFlow starts.
"""

import itertools
import json
import os
import re
import socket
import time
from dataclasses import dataclass

RESOURCE_CONFIG = "resourceconfig.json"
CHIEF_PORT, WORKER_PORT, PS_PORT = 2222, 2223, 2224
# {"algo-1:2222": "127.0.0.1:41001", ...}: where each container address really listens. The local
# emulation runs every host on loopback, so each (host, port) gets its own port there; SageMaker needs none.
ADDRESSES_ENV = "DFM_CLUSTER_ADDRESSES"
PORT_STRIDE = 100  # ps_gpu_workers.PORT_STRIDE (not imported: this module stands alone)
JOB_NAMES = {"chief": "chief", "worker": "worker", "ps": "parameter server"}
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
PORTS_FROM = 20000  # free_port's: above the container's own ports (2222-2224, 8890, their strides)


class ClusterError(RuntimeError):
    """The resource config does not describe a usable cluster, or a task of it is missing or dead."""


@dataclass(frozen=True)
class Task:
    job: str  # chief | worker | ps
    index: int
    host: str  # the SageMaker host name (algo-N)
    address: str  # host:port as TensorFlow dials it

    @property
    def name(self):
        return f"{self.job}:{self.index}"

    @property
    def device(self):
        return f"/job:{self.job}/replica:0/task:{self.index}"

    def describe(self):
        return f"{JOB_NAMES[self.job]} {self.name} on {self.host} ({self.address})"


@dataclass(frozen=True)
class HeteroCluster:
    tasks: tuple  # every Task of the job: chief, then workers, then ps, each by index
    current_host: str
    worker_group: str
    ps_group: str
    worker_hosts: tuple
    ps_hosts: tuple

    def job(self, job):
        return [t for t in self.tasks if t.job == job]

    @property
    def chief(self):
        return self.job("chief")[0]

    def cluster_spec(self):
        """{"chief": [...], "worker": [...], "ps": [...]}: for tf.train.ClusterSpec or TF_CONFIG."""
        return {job: [t.address for t in self.job(job)] for job in ("chief", "worker", "ps")}

    def local_tasks(self):
        """The tasks this host runs (chief and worker 0 on the chief's host; one worker on every other
        worker host; the ps tasks on a ps host)."""
        return [t for t in self.tasks if t.host == self.current_host]

    def tf_config(self, task):
        return {"cluster": self.cluster_spec(), "task": {"type": task.job, "index": task.index}, "environment": "cloud"}

    def data_shard(self, host=None):
        """(num_shards, index) of a worker host's training data: the worker group only, in its order."""
        host = host or self.current_host
        if host not in self.worker_hosts:
            raise ClusterError(f"{host} is not in the worker group {self.worker_group!r}: it reads no data")
        return len(self.worker_hosts), self.worker_hosts.index(host)

    def task_at(self, device_or_address):
        """The task a TensorFlow device name (/job:ps/replica:0/task:1) or an address names, or None."""
        for task in self.tasks:
            if device_or_address in (task.device, task.address) or device_or_address.startswith(task.device + "/"):
                return task
        return None


# ---- reading the resource config ----


def resource_config_path(environ=None):
    env = os.environ if environ is None else environ
    base = env.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    return os.path.join(env.get("SM_INPUT_CONFIG_DIR", os.path.join(base, "input", "config")), RESOURCE_CONFIG)


def read_resource_config(path=None, environ=None):
    path = path or resource_config_path(environ)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise ClusterError(f"cannot read {path}: {err}") from err


def addresses_from_env(environ=None):
    env = os.environ if environ is None else environ
    raw = env.get(ADDRESSES_ENV, "")
    if not raw:
        return {}
    try:
        addresses = json.loads(raw)
    except ValueError as err:
        raise ClusterError(f"{ADDRESSES_ENV} is not JSON: {err}") from err
    if not isinstance(addresses, dict):
        raise ClusterError(f"{ADDRESSES_ENV} must map 'host:port' to 'address:port'")
    return {str(k): str(v) for k, v in addresses.items()}


def _groups(resource_config):
    groups = {}
    for group in resource_config.get("instance_groups") or []:
        groups[group["instance_group_name"]] = list(group.get("hosts") or [])
    return groups


def build_cluster(
    resource_config,
    ps_group,
    worker_group=None,
    ps_per_host=1,
    addresses=None,
    ports=(CHIEF_PORT, WORKER_PORT, PS_PORT),
    workers_per_host=1,
):
    """resourceconfig.json (as a dict) + the ps group's name -> HeteroCluster.

    worker_group: the group that trains; may be omitted when the job has exactly two groups.
    addresses: {"host:port": "address"} overrides (see ADDRESSES_ENV); default: the host names themselves.
    """
    groups = _groups(resource_config)
    names = ", ".join(sorted(groups)) or "none"
    if ps_group not in groups:
        raise ClusterError(
            f"resourceconfig.json has no instance group {ps_group!r} for the parameter servers (groups: {names})"
        )
    if worker_group is None:
        others = [g for g in groups if g != ps_group]
        if len(others) != 1:
            raise ClusterError(
                f"cannot tell the worker group: name it (groups besides {ps_group!r}: {', '.join(others) or 'none'})"
            )
        worker_group = others[0]
    if worker_group not in groups:
        raise ClusterError(
            f"resourceconfig.json has no instance group {worker_group!r} for the workers (groups: {names})"
        )
    if worker_group == ps_group:
        raise ClusterError(f"the ps and worker groups must differ (both {ps_group!r})")
    if int(ps_per_host) < 1:
        raise ClusterError(f"ps_per_host must be at least 1, not {ps_per_host}")
    worker_hosts, ps_hosts = groups[worker_group], groups[ps_group]
    for group, hosts in ((worker_group, worker_hosts), (ps_group, ps_hosts)):
        if not hosts:
            raise ClusterError(f"instance group {group!r} has no hosts")
    current = resource_config.get("current_host", "")
    if current not in worker_hosts + ps_hosts:
        raise ClusterError(f"this host ({current or 'unnamed'}) is in neither {worker_group!r} nor {ps_group!r}")
    addresses = addresses or {}
    chief_port, worker_port, ps_port = ports

    def task(job, index, host, port):
        container = f"{host}:{port}"
        return Task(job, index, host, addresses.get(container, container))

    tasks = [task("chief", 0, worker_hosts[0], chief_port)]
    per_host = int(workers_per_host)
    tasks += [
        task("worker", i * per_host + k, host, worker_port + PORT_STRIDE * k)
        for i, host in enumerate(worker_hosts)
        for k in range(per_host)
    ]
    tasks += [
        task("ps", i * ps_per_host + k, host, ps_port + k)
        for i, host in enumerate(ps_hosts)
        for k in range(int(ps_per_host))
    ]
    return HeteroCluster(tuple(tasks), current, worker_group, ps_group, tuple(worker_hosts), tuple(ps_hosts))


# ---- ports ----

_handed_out = itertools.count()


def free_port():
    """A port nobody holds, outside the kernel's ephemeral range. A port from bind(0) is ephemeral: until the
    task it is meant for binds it, any outgoing connection may take it as its source port (a chief then
    failed with "Could not start gRPC server" while its workers waited for it). Each process walks the
    ports from a start spread by its pid, so processes picking ports side by side walk apart, and checks
    each by binding it on every interface, as TensorFlow's server will. The one policy: the chief's own
    worker tasks (train_ps) and the launcher's local runs and tests (launcher.local.cluster) use it."""
    try:
        with open(EPHEMERAL_RANGE) as f:
            low, high = map(int, f.read().split())
    except OSError:  # no such file: not Linux
        low, high = 32768, 65535
    # a range that covers them all leaves only ephemeral ones: any of those, as bind(0) would
    ports = [p for p in range(PORTS_FROM, 65536) if not low <= p <= high] or range(PORTS_FROM, 65536)
    start = os.getpid() * 7919
    for _ in ports:
        port = ports[(start + next(_handed_out)) % len(ports)]
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:  # taken
                continue
        if not _reserve(port):  # another process on this machine handed it out moments ago
            continue
        return port
    raise ClusterError(f"no free port from {PORTS_FROM} outside the ephemeral range {low}-{high}")


PORT_RESERVATIONS = os.path.join(os.environ.get("TMPDIR", "/tmp"), "dfm-ports")
RESERVED_FOR_S = 120.0  # time enough for the task a port is meant for to bind it


def _reserve(port):
    """Claim `port` machine-wide for RESERVED_FOR_S: a free port is only free until its task binds it, and two
    processes' walks may meet (concurrent tests, a chief's worker tasks beside the launcher's). A file per port,
    created exclusively; one older than the reservation is taken over. Where the folder cannot be written the
    claim is granted (the walk's spread is then the only guard)."""
    try:
        os.makedirs(PORT_RESERVATIONS, exist_ok=True)
        path = os.path.join(PORT_RESERVATIONS, str(port))
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return True
        except FileExistsError:
            if time.time() - os.stat(path).st_mtime < RESERVED_FOR_S:
                return False
            os.utime(path)  # stale: a later claimant sees it fresh (two taking it over at once is left to bind)
            return True
    except OSError:
        return True


# ---- lifecycle ----


def port_open(address, timeout=1.0):
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as probe:
            # With nobody listening, a loopback socket in the ephemeral range can connect to itself.
            return probe.getsockname() != probe.getpeername()
    except OSError:
        return False


def wait_for_tasks(tasks, timeout=600.0, poll=0.5, probe=port_open):
    """Block until every task's port answers. A ParameterServerStrategy whose ps is missing blocks forever
    while connecting, so the chief checks first and names what never came up (ClusterError)."""
    pending = list(tasks)
    deadline = time.monotonic() + timeout
    while True:
        pending = [t for t in pending if not probe(t.address)]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"{'; '.join(t.describe() for t in pending)} never came up within {timeout:g} s: "
                "check that its host is in the job and its script started (its log says why not)"
            )
        time.sleep(poll)


def wait_until_gone(address, appear_timeout=1800.0, poll=1.0, probe=port_open):
    """Block until `address` has answered and then stopped answering (its process is done).
    -> True when it was seen going away; False when it never appeared within appear_timeout."""
    start, seen = time.monotonic(), False
    while True:
        if probe(address):
            seen = True
        elif seen:
            return True
        elif time.monotonic() - start > appear_timeout:
            return False
        time.sleep(poll)


def wait_until_chief_done(cluster, appear_timeout=1800.0, poll=1.0, probe=port_open):
    return wait_until_gone(cluster.chief.address, appear_timeout=appear_timeout, poll=poll, probe=probe)


def serve_until_chief_done(cluster, start_server, log=print, appear_timeout=1800.0, poll=1.0):
    """On a ps host: start a server for each of this host's ps tasks (`start_server(task)`, e.g. a
    tf.distribute.Server), wait for the chief to finish. -> exit code: 0 after the chief is done, 1 when
    it never appeared. The caller exits with it at once (a TF server's threads never end by themselves)."""
    mine = [t for t in cluster.local_tasks() if t.job == "ps"]
    if not mine:
        raise ClusterError(f"{cluster.current_host} runs no parameter server")
    servers = [start_server(task) for task in mine]
    log(
        f"serving {', '.join(t.name for t in mine)} on {cluster.current_host}; "
        f"waiting for the chief at {cluster.chief.address}"
    )
    seen = wait_until_chief_done(cluster, appear_timeout=appear_timeout, poll=poll)
    log(f"chief {'finished' if seen else 'never appeared'}: {', '.join(t.name for t in mine)} exiting")
    servers.clear()  # kept referenced while waiting: a collected Server stops serving
    return 0 if seen else 1


_DEVICE = re.compile(r"/job:(chief|worker|ps)/replica:\d+/task:(\d+)")


def failed_ps(error_text, cluster):
    """The ps tasks a TensorFlow error names, in order: ClusterCoordinator raises UnavailableError
    ("... remote target /job:ps/replica:0/task:1 ...") as soon as a closure touches a dead ps."""
    found = []
    for job, index in _DEVICE.findall(error_text):
        task = cluster.task_at(f"/job:{job}/replica:0/task:{index}") if job == "ps" else None
        if task is not None and task not in found:
            found.append(task)
    return found


def ps_failure_message(error, cluster):
    """One line naming the dead or unreachable parameter server(s) behind `error`, or None when the error
    names none (then it is not a ps failure and deserves its own traceback)."""
    tasks = failed_ps(str(error), cluster)
    if not tasks:
        return None
    kind = type(error).__name__ if isinstance(error, BaseException) else "error"
    return (
        f"{'; '.join(t.describe() for t in tasks)} is unreachable ({kind}): its process died or its host "
        "is gone; the embeddings it held are lost, so the job stops (resume from the last checkpoint)"
    )
