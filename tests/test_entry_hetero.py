"""entrypoints/hetero_cluster.py: the ps cluster of a heterogeneous job, from SageMaker's resourceconfig.json.

The resource configs below have the layout SageMaker writes on heterogeneous clusters (as printed by
amazon-sagemaker-examples' heterogeneous-clusters hello-world job: `current_group_name`,
`current_instance_type`, `hosts` across all groups, `instance_groups` with each group's hosts). The
lifecycle tests run real TensorFlow servers on loopback, one process per simulated host.
"""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from entry_support import PYTHON, free_port

import hetero_cluster as hc

TESTS = Path(__file__).resolve().parent
TASK_SCRIPT = TESTS / "hetero_task.py"
ENTRYPOINTS = TESTS.parent / "entrypoints"


def resource_config(groups, current_host):
    """groups: [(name, instance type, hosts)] -> resourceconfig.json of `current_host`."""
    group_of = {h: (name, itype) for name, itype, hosts in groups for h in hosts}
    return {
        "current_host": current_host,
        "current_instance_type": group_of[current_host][1],
        "current_group_name": group_of[current_host][0],
        "hosts": [h for _, _, hosts in groups for h in hosts],
        "instance_groups": [
            {"instance_group_name": name, "instance_type": itype, "hosts": list(hosts)} for name, itype, hosts in groups
        ],
        "network_interface_name": "eth0",
    }


SIX_HOSTS = [
    ("worker", "ml.g5.2xlarge", ["algo-1", "algo-2", "algo-3", "algo-4"]),
    ("ps", "ml.r5.4xlarge", ["algo-5", "algo-6"]),
]


def write_config(base, config):
    folder = Path(base) / "input" / "config"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hc.RESOURCE_CONFIG).write_text(json.dumps(config, indent=4, sort_keys=True))
    return folder


def test_cluster_from_a_written_resourceconfig_chief_workers_and_ps(tmp_path):
    write_config(tmp_path, resource_config(SIX_HOSTS, "algo-5"))
    cluster = hc.build_cluster(hc.read_resource_config(environ={"SAGEMAKER_BASE_DIR": str(tmp_path)}), "ps")
    assert cluster.worker_group == "worker" and cluster.ps_group == "ps"
    assert cluster.cluster_spec() == {
        "chief": ["algo-1:2222"],
        "worker": ["algo-1:2223", "algo-2:2223", "algo-3:2223", "algo-4:2223"],
        "ps": ["algo-5:2224", "algo-6:2224"],
    }
    assert [t.name for t in cluster.local_tasks()] == ["ps:0"]
    assert cluster.tf_config(cluster.local_tasks()[0])["task"] == {"type": "ps", "index": 0}


@pytest.mark.parametrize(
    "host, tasks, shard",
    [
        ("algo-1", ["chief:0", "worker:0"], (4, 0)),  # the chief's host trains too, as worker 0
        ("algo-3", ["worker:2"], (4, 2)),
        ("algo-6", ["ps:2", "ps:3"], None),  # two ps per host
    ],
)
def test_each_host_finds_its_own_tasks(tmp_path, host, tasks, shard):
    config_dir = write_config(tmp_path, resource_config(SIX_HOSTS, host))
    cluster = hc.build_cluster(hc.read_resource_config(str(config_dir / hc.RESOURCE_CONFIG)), "ps", ps_per_host=2)
    assert [t.name for t in cluster.local_tasks()] == tasks
    assert cluster.cluster_spec()["ps"] == ["algo-5:2224", "algo-5:2225", "algo-6:2224", "algo-6:2225"]
    if shard:
        assert cluster.data_shard() == shard
    else:
        with pytest.raises(hc.ClusterError, match="reads no data"):
            cluster.data_shard()


def test_sm_input_config_dir_wins_over_the_base_dir(tmp_path):
    elsewhere = write_config(tmp_path / "elsewhere", resource_config(SIX_HOSTS, "algo-2"))
    path = hc.resource_config_path(
        {"SAGEMAKER_BASE_DIR": str(tmp_path / "base"), "SM_INPUT_CONFIG_DIR": str(elsewhere)}
    )
    assert hc.build_cluster(hc.read_resource_config(path), "ps").current_host == "algo-2"


def test_the_homogeneous_layout_has_no_ps_group():
    homogeneous = resource_config([("homogeneousCluster", "ml.c5.xlarge", ["algo-1", "algo-2"])], "algo-1")
    with pytest.raises(hc.ClusterError, match="no instance group 'ps'.*homogeneousCluster"):
        hc.build_cluster(homogeneous, "ps")


@pytest.mark.parametrize(
    "groups, kwargs, message",
    [
        ([*SIX_HOSTS, ("data", "ml.c5.xlarge", ["algo-7"])], {}, "cannot tell the worker group.*worker, data"),
        (SIX_HOSTS, {"worker_group": "gpu"}, "no instance group 'gpu' for the workers"),
        (SIX_HOSTS, {"worker_group": "ps"}, "must differ"),
        (SIX_HOSTS, {"ps_per_host": 0}, "at least 1"),
    ],
)
def test_unusable_layouts_are_refused_with_the_reason(groups, kwargs, message):
    with pytest.raises(hc.ClusterError, match=message):
        hc.build_cluster(resource_config(groups, "algo-1"), "ps", **kwargs)


def test_three_groups_work_when_the_worker_group_is_named():
    groups = [*SIX_HOSTS, ("data", "ml.c5.xlarge", ["algo-7"])]
    cluster = hc.build_cluster(resource_config(groups, "algo-2"), "ps", worker_group="worker")
    assert cluster.worker_hosts == ("algo-1", "algo-2", "algo-3", "algo-4")
    with pytest.raises(hc.ClusterError, match="algo-7.*neither"):
        hc.build_cluster(resource_config(groups, "algo-7"), "ps", worker_group="worker")


def test_addresses_map_container_ports_to_loopback():
    addresses = {"algo-1:2222": "127.0.0.1:40001", "algo-5:2224": "127.0.0.1:40002"}
    environ = {hc.ADDRESSES_ENV: json.dumps(addresses)}
    cluster = hc.build_cluster(resource_config(SIX_HOSTS, "algo-1"), "ps", addresses=hc.addresses_from_env(environ))
    assert cluster.chief.address == "127.0.0.1:40001" and cluster.chief.host == "algo-1"
    assert cluster.cluster_spec()["ps"] == ["127.0.0.1:40002", "algo-6:2224"]
    with pytest.raises(hc.ClusterError, match="not JSON"):
        hc.addresses_from_env({hc.ADDRESSES_ENV: "algo-1:2222=x"})


def test_a_tensorflow_error_naming_a_ps_device_becomes_one_line_naming_its_host():
    cluster = hc.build_cluster(resource_config(SIX_HOSTS, "algo-1"), "ps", ps_per_host=2)
    # the shape of ClusterCoordinator's UnavailableError on TF 2.14 and 2.21 (measured; trimmed)
    text = (
        "Graph execution error:\n\nfailed to connect to all addresses\nAdditional GRPC error information from "
        "remote target /job:ps/replica:0/task:3/device:CPU:0 while calling "
        "/tensorflow.eager.EagerService/RunComponentFunction:\n...\nAdditional GRPC error information from "
        "remote target /job:worker/replica:0/task:0 while calling /tensorflow.eager.EagerService/Enqueue:"
    )

    class UnavailableError(Exception):
        pass

    message = hc.ps_failure_message(UnavailableError(text), cluster)
    assert message.startswith("parameter server ps:3 on algo-6 (algo-6:2225) is unreachable (UnavailableError)")
    assert "\n" not in message
    assert hc.ps_failure_message(ValueError("/job:worker/replica:0/task:1 failed"), cluster) is None
    assert hc.failed_ps("/job:ps/replica:0/task:1 and /job:ps/replica:0/task:1/device:CPU:0", cluster) == [
        cluster.task_at("/job:ps/replica:0/task:1")
    ]


def listen(port):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_waiting_for_tasks_names_the_ones_that_never_answer():
    ports = [free_port() for _ in range(3)]
    addresses = {
        "algo-1:2223": f"127.0.0.1:{ports[0]}",
        "algo-5:2224": f"127.0.0.1:{ports[1]}",
        "algo-6:2224": f"127.0.0.1:{ports[2]}",
    }
    groups = [("worker", "ml.g5.2xlarge", ["algo-1"]), ("ps", "ml.r5.4xlarge", ["algo-5", "algo-6"])]
    cluster = hc.build_cluster(resource_config(groups, "algo-1"), "ps", addresses=addresses)
    up = [listen(ports[0]), listen(ports[1])]
    probed: list[str] = []

    def probe(address):
        probed.append(address)
        assert len(probed) < 100, "the wait went on past its timeout"
        return hc.port_open(address)

    try:
        with pytest.raises(hc.ClusterError) as refused:
            hc.wait_for_tasks(cluster.job("worker") + cluster.job("ps"), timeout=1.0, poll=0.2, probe=probe)
        # it gave up after its 1 s: at least 0.2 s between two probes of the silent task, however slow the machine
        assert 1 <= probed.count(f"127.0.0.1:{ports[2]}") <= 1.0 / 0.2 + 1
        assert str(refused.value).startswith(f"parameter server ps:1 on algo-6 (127.0.0.1:{ports[2]}) never came up")
        up.append(listen(ports[2]))
        hc.wait_for_tasks(cluster.job("worker") + cluster.job("ps"), timeout=1.0, poll=0.2)
    finally:
        for sock in up:
            sock.close()


def test_waiting_for_the_chief_ends_once_it_has_come_and_gone():
    port = free_port()
    cluster = hc.build_cluster(
        resource_config(SIX_HOSTS, "algo-5"), "ps", addresses={"algo-1:2222": f"127.0.0.1:{port}"}
    )
    assert hc.wait_until_chief_done(cluster, appear_timeout=0.5, poll=0.1) is False  # never came up
    chief = listen(port)
    answers: list[bool] = []

    def probe(address):  # the chief finishes right after the first probe that saw it up
        answers.append(hc.port_open(address))
        if answers[-1]:
            chief.close()
        return answers[-1]

    try:
        assert hc.wait_until_chief_done(cluster, appear_timeout=30, poll=0.1, probe=probe) is True
    finally:
        chief.close()
    assert answers[-2:] == [True, False]  # it ended at the first probe after the chief had gone


@pytest.mark.parametrize(
    "kernel_range, expected",
    [
        ("10000\t25000\n", range(25001, 65536)),  # ports above it
        ("1024\t65535\n", range(hc.PORTS_FROM, 65536)),
    ],
)  # all ephemeral
def test_free_ports_keep_out_of_a_lower_ephemeral_range_and_are_still_found_when_it_covers_all(
    tmp_path, monkeypatch, kernel_range, expected
):
    (tmp_path / "range").write_text(kernel_range)
    monkeypatch.setattr(hc, "EPHEMERAL_RANGE", str(tmp_path / "range"))
    assert hc.free_port() in expected


def test_a_port_another_process_just_handed_out_is_skipped_until_its_reservation_is_old(tmp_path, monkeypatch):
    import itertools

    monkeypatch.setattr(hc, "PORT_RESERVATIONS", str(tmp_path / "ports"))
    monkeypatch.setattr(hc, "_handed_out", itertools.count())
    first = hc.free_port()
    monkeypatch.setattr(hc, "_handed_out", itertools.count())  # a walk that meets the first one's
    second = hc.free_port()
    assert second != first and {p.name for p in (tmp_path / "ports").iterdir()} == {str(first), str(second)}
    old = time.time() - hc.RESERVED_FOR_S - 1
    os.utime(tmp_path / "ports" / str(first), (old, old))
    monkeypatch.setattr(hc, "_handed_out", itertools.count())
    assert hc.free_port() == first


# ---- real TensorFlow servers on loopback, one process per simulated host ----


class Job:
    """Hosts of one heterogeneous job, each a process running tests/hetero_task.py in its own /opt/ml."""

    def __init__(self, root, groups):
        self.root, self.groups = Path(root), groups
        hosts = [h for _, _, hs in groups for h in hs]
        ports = {f"{h}:{p}" for h in hosts for p in (hc.CHIEF_PORT, hc.WORKER_PORT, hc.PS_PORT, hc.PS_PORT + 1)}
        self.addresses = {container: f"127.0.0.1:{free_port()}" for container in sorted(ports)}
        self.procs = {}

    def start(self, host, *args, label=None):
        base = self.root / host
        write_config(base, resource_config(self.groups, host))
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        env.update(
            SAGEMAKER_BASE_DIR=str(base),
            TF_CPP_MIN_LOG_LEVEL="2",
            CUDA_VISIBLE_DEVICES="",
            PYTHONPATH=str(ENTRYPOINTS),
            **{hc.ADDRESSES_ENV: json.dumps(self.addresses)},
        )
        label = label or host
        log = open(self.root / f"{label}.log", "w")
        self.procs[label] = subprocess.Popen(
            [PYTHON, str(TASK_SCRIPT), *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self.procs[label]

    def log(self, label):
        return (self.root / f"{label}.log").read_text()

    def wait_for_line(self, label, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log(label):
                return
            if self.procs[label].poll() is not None:
                break
            time.sleep(0.3)
        pytest.fail(f"{label} never printed {text!r}:\n{self.log(label)[-3000:]}")

    def codes(self, timeout):
        return {label: proc.wait(timeout=timeout) for label, proc in self.procs.items()}

    def kill_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.slow
def test_cluster_trains_with_two_ps_on_one_ps_host_and_every_host_exits_zero(tmp_path):
    job = Job(tmp_path, [("worker", "ml.g5.2xlarge", ["algo-1"]), ("ps", "ml.r5.4xlarge", ["algo-2"])])
    try:
        job.start("algo-2", "--ps-per-host", "2")
        job.start("algo-1", "--ps-per-host", "2", "--worker", label="algo-1-worker")
        job.start("algo-1", "--ps-per-host", "2", "--rounds", "3")
        codes = job.codes(timeout=240)
    finally:
        job.kill_all()
    assert codes == {"algo-2": 0, "algo-1-worker": 0, "algo-1": 0}, {k: job.log(k)[-2000:] for k in codes}
    chief = job.log("algo-1")
    assert "shards /job:ps/replica:0/task:0/device:CPU:0 /job:ps/replica:0/task:1/device:CPU:0" in chief
    assert "round 3 sum=3072" in chief  # 3 rounds x 4 steps x 64 x 4 ones: every step applied once
    assert "chief finished: ps:0, ps:1 exiting" in job.log("algo-2")


@pytest.mark.slow
def test_a_killed_ps_host_fails_the_chief_fast_naming_it_and_nothing_is_left(tmp_path):
    job = Job(tmp_path, [("worker", "ml.g5.2xlarge", ["algo-1"]), ("ps", "ml.r5.4xlarge", ["algo-2", "algo-3"])])
    try:
        job.start("algo-2")
        job.start("algo-3")
        job.start("algo-1", "--worker", label="algo-1-worker")
        job.start("algo-1", "--rounds", "1000", "--stop-file", str(tmp_path / "stop"))
        job.wait_for_line("algo-1", "round 2 ", timeout=180)
        os.killpg(job.procs["algo-3"].pid, signal.SIGKILL)
        killed = time.monotonic()
        chief_code = job.procs["algo-1"].wait(timeout=60)
        failed_after = time.monotonic() - killed
        codes = job.codes(timeout=60)  # the other hosts see the chief go and end by themselves
    finally:
        (tmp_path / "stop").touch()
        job.kill_all()
    chief = job.log("algo-1")
    assert chief_code == 3, chief[-3000:]
    assert f"[dfm] error: parameter server ps:1 on algo-3 ({job.addresses['algo-3:2224']}) is unreachable" in chief
    assert failed_after < 30, failed_after
    assert codes["algo-2"] == 0 and codes["algo-1-worker"] == 0, {k: job.log(k)[-2000:] for k in codes}
