"""train_ps.py in a heterogeneous job: the parameter servers in their own instance group, no TF_CONFIG.

One process per simulated host, each in its own /opt/ml tree with the resourceconfig.json SageMaker
writes for instance groups (worker group algo-1, algo-2 first, then the ps group's algo-3) and every
container address mapped to a free loopback port through DFM_CLUSTER_ADDRESSES, as `dfm --local` does.
The worker hosts hold the training data; the ps host has no channel at all.
"""

import json
import os
import signal
import time

import psutil
import pytest
from test_entry_hetero import resource_config, write_config
from test_entry_ps import HP, predict_saved_model, stop_all

import entry_support as es
import hetero_cluster as hc
from tf_records import script_lines

GROUPS = [("worker", "ml.g5.2xlarge", ["algo-1", "algo-2"]), ("ps", "ml.r5.4xlarge", ["algo-3"])]
HOSTS = [host for _, _, hosts in GROUPS for host in hosts]
BATCHES = {"a": 40, "b": 24}  # train files of unequal length: file a is shard 0 of 2, file b shard 1


def write_data(base, batch_size, evaluate):
    from launcher.data import synth, synth_files

    rows = sum(BATCHES.values()) * batch_size
    data = synth.generate(rows + 1024, seed=9, field_size=39, feature_size=HP["feature_size"])
    start = 0
    for prefix, batches in BATCHES.items():
        synth_files.write_tfrecords(
            base / "input/data/train", data.take(start, start + batches * batch_size), 1, prefix=prefix
        )
        start += batches * batch_size
    if evaluate:
        synth_files.write_tfrecords(base / "input/data/eval", data.take(rows, rows + 1024), 1)


class HeteroJob:
    def __init__(self, root, hyperparameters):
        self.root, self.hp = root, hyperparameters
        ports = (
            [(h, hc.CHIEF_PORT) for h in HOSTS[:1]]
            + [(h, hc.WORKER_PORT) for h in HOSTS[:2]]
            + [(HOSTS[2], hc.PS_PORT + k) for k in range(hyperparameters.get("ps_per_host", 1))]
        )
        self.addresses = {f"{h}:{p}": f"127.0.0.1:{es.free_port()}" for h, p in ports}
        self.envs, self.procs = {}, {}
        for host in HOSTS:
            channels = ["train", "eval"] if host == "algo-1" else ["train"] if host == "algo-2" else []
            env = es.make_container(root / host, channels, hosts=HOSTS, current_host=host)
            write_config(root / host, resource_config(GROUPS, host))
            env[hc.ADDRESSES_ENV] = json.dumps(self.addresses)
            self.envs[host] = env
            if "train" in channels:
                write_data(root / host, hyperparameters["batch_size"], evaluate="eval" in channels)

    def start(self):
        for host in reversed(HOSTS):  # the ps first, the chief last: as on SageMaker, the order is not fixed
            self.procs[host] = es.start_script(
                self.root / host,
                "train_ps.py",
                self.hp,
                self.envs[host],
                self.log_path(host),
                stderr_path=self.root / f"{host}.err",
            )

    def log_path(self, host):
        return self.root / f"{host}.log"

    def log(self, host):
        return self.log_path(host).read_text()

    def stderr(self, host):
        return (self.root / f"{host}.err").read_text()

    def wait_for_line(self, host, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.procs[host].poll() is None:
            if text in self.log(host):
                return
            time.sleep(0.2)
        pytest.fail(f"{host} never printed {text!r}:\n{self.log(host)[-3000:]}{self.stderr(host)[-3000:]}")

    def leftovers(self, grace_s=15.0):
        """Processes still running in this job's container trees (the chief's worker children included) once
        `grace_s` has passed: a child that is ending as its host script returns is given that long."""
        deadline = time.monotonic() + grace_s
        while True:
            left = [
                proc
                for proc in psutil.process_iter(["cwd", "status"])
                if (proc.info["cwd"] or "").startswith(str(self.root)) and proc.info["status"] != psutil.STATUS_ZOMBIE
            ]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def stop(self):
        stop_all(self.procs.values())


@pytest.mark.slow
def test_heterogeneous_job_trains_each_workers_shard_on_the_ps_group_and_every_host_exits(tmp_path):
    hp = dict(HP, epochs=2, log_steps=16, checkpoint_steps=64, ps_group="ps", ps_per_host=2)
    job = HeteroJob(tmp_path, hp)
    try:
        job.start()
        codes = {host: proc.wait(timeout=300) for host, proc in job.procs.items()}
    finally:
        job.stop()
    logs = {host: job.log(host) + job.stderr(host) for host in HOSTS}
    assert codes == {"algo-1": 0, "algo-2": 0, "algo-3": 0}, {h: text[-3000:] for h, text in logs.items()}
    assert job.leftovers() == []
    chief, worker, ps = (job.log(host) for host in HOSTS)
    # the embedding table split over both ps tasks of the ps host
    (placed,) = [
        line
        for line in chief.splitlines()
        if line.startswith("[dfm] chief: 2 workers, 2 ps, replicas_in_sync=1 per worker task; embeddings")
    ]
    assert "in 2 shard(s) on" in placed
    assert sorted(placed.split(" on ")[1].split()) == [
        "/job:ps/replica:0/task:0/device:CPU:0",
        "/job:ps/replica:0/task:1/device:CPU:0",
    ]
    # worker 0 is the chief host's own child; each worker reads its host's position in the worker group
    assert "worker 0 on algo-1: channels=['train'] mode=File shard=0/2" in chief
    assert "worker 1 on algo-2: channels=['train'] mode=File shard=1/2" in worker
    # every batch of both shards trained exactly once per epoch: 2 x (40 + 24), not 2 x 2 x 40 or 2 x 2 x 24
    assert "training data exhausted on every worker" in chief
    train = es.metric_lines(chief, "train")
    # lines while the closures run (deepfm_coordinator), one per multiple of 16 crossed; windows end at 64 and 128
    steps = [row["step"] for row in train]
    assert steps[-1] == 128 and 64 in steps and [s // 16 for s in steps] == sorted({s // 16 for s in steps}), steps
    assert train[-1]["loss"] < train[0]["loss"]
    evaluated = es.metric_lines(chief, "eval")  # after each epoch (then the best one's line again)
    assert [row["step"] for row in evaluated][:2] == [64, 128] and evaluated[1]["auc"] > 0.55
    # evaluated on the workers: only worker 0's host (algo-1) holds `eval`, so it reads all of it, once
    assert "task(s) 0 of 2 hold `eval`" in chief and chief.count("evaluated 1024 rows on 1 worker(s)") == 2
    assert (tmp_path / "algo-1/checkpoints/ckpt-128.index").exists()
    (exported,) = [line.split()[-1] for line in chief.splitlines() if line.startswith("[dfm] exported ")]
    assert exported.startswith(str(tmp_path / "algo-1/model"))
    probs = predict_saved_model(exported)
    assert ((probs > 0) & (probs < 1)).all()
    assert "chief finished; exiting" in worker
    assert "serving ps:0, ps:1 on algo-3" in ps and "chief finished: ps:0, ps:1 exiting" in ps
    assert not list((tmp_path / "algo-3/model").iterdir())  # the ps host exports nothing


@pytest.mark.slow
def test_a_killed_ps_host_ends_the_chief_at_once_with_one_line_naming_it(tmp_path):
    hp = dict(HP, epochs=1000, max_steps=1_000_000, log_steps=10, checkpoint_steps=1_000_000, ps_group="ps")
    job = HeteroJob(tmp_path, hp)
    try:
        job.start()
        job.wait_for_line("algo-1", "[dfm] train step=", timeout=180)
        os.killpg(job.procs["algo-3"].pid, signal.SIGKILL)
        killed = time.monotonic()
        chief_code = job.procs["algo-1"].wait(timeout=90)
        failed_after = time.monotonic() - killed
        worker_code = job.procs["algo-2"].wait(timeout=60)  # sees the chief go, ends by itself
    finally:
        job.stop()
    errors = job.stderr("algo-1")
    assert chief_code == 1, job.log("algo-1")[-3000:] + errors[-3000:]
    assert failed_after < 30, failed_after
    # one line naming the ps, last, and not the coordinator's pages of gRPC detail nor a traceback before it
    # (TF 2.21 prints its start-up banner to stderr before absl's logging is set up: that may stay)
    lines = errors.strip().splitlines()
    assert lines[-1].startswith(
        f"[dfm] error: parameter server ps:0 on algo-3 ({job.addresses['algo-3:2224']}) "
        "is unreachable (UnavailableError)"
    ), errors[-3000:]
    assert [line for line in lines if line.startswith("[dfm]")] == lines[-1:]
    # TensorFlow's C++ runtime may log (at E, with its gRPC detail) a remote call the chief made as the ps went:
    # the chief reads the step while its closures run; those records are TensorFlow's, not the coordinator's pages
    python_lines = script_lines(lines)
    assert not [line for line in python_lines if "Traceback" in line or "/job:" in line or "ERROR" in line], errors[
        -3000:
    ]
    assert worker_code == 0, job.log("algo-2")[-3000:]
    assert job.leftovers() == []
