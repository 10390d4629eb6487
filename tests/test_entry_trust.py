"""Runs of the real scripts that must not end "done" having learned nothing, or with a traceback: a new job on a
finished run's checkpoints that trains no step, a checkpoint of another optimizer or shapes, and a run that
diverged while its loss stayed a finite number. Each ends with exit 1 and one line saying what to do."""

import shutil

import pytest

import entry_support as es
from tf_records import script_lines

HP = {
    "feature_size": 20000,
    "deep_layers": [16],
    "batch_size": 64,
    "log_steps": 10,
    "optimizer": "adagrad",
    "learning_rate": 0.1,
    "checkpoint_steps": 20,
}
STEPS = -(-3000 // 64)  # one epoch of 3000 rows, its last batch short


def host(base, rows=3000):
    env = es.make_container(base, ["train", "eval"])
    train, evaluation = es.synth_split(rows, 500, seed=3, feature_size=20000)
    es.write_tfrecords(base / "input/data/train", train, 1)
    es.write_tfrecords(base / "input/data/eval", evaluation, 1)
    return env


def run(base, env, job, hp=None, name="run"):
    """One run of train_ps.py on one host as job `job`. -> (exit code, its lines)."""
    log = base / f"{name}.log"
    proc = es.start_script(base, "train_ps.py", hp or HP, env, log, extra_env={"TRAINING_JOB_NAME": job})
    proc.wait(timeout=300)
    return proc.returncode, log.read_text().splitlines()


def exports(base):
    return sorted(p.name for p in (base / "model").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A host tree whose checkpoints hold the end of job day-1's finished run (one epoch, exported)."""
    base = tmp_path_factory.mktemp("finished")
    env = host(base)
    code, lines = run(base, env, "day-1")
    assert code == 0, lines[-30:]
    assert f"[dfm] trained steps 0..{STEPS} on 1 workers" in lines and len(exports(base)) == 1, [
        line for line in lines if line.startswith("[dfm]")
    ]
    return base


def copy_of(finished, tmp_path):
    base = tmp_path / "host"
    shutil.copytree(finished, base)
    return base, host_env(base)


def host_env(base):
    return es.make_container(base, ["train", "eval"])


def errors(lines):
    return [line for line in script_lines(lines) if "error" in line.lower() or "Traceback" in line]


@pytest.mark.slow
def test_a_new_job_on_a_finished_runs_checkpoints_fails_and_a_run_stopped_before_its_export_completes(
    finished, tmp_path
):
    base, env = copy_of(finished, tmp_path)
    code, lines = run(base, env, "day-2")
    assert code == 1, lines[-30:]
    (line,) = errors(lines)
    assert line == lines[-1] and line.startswith(f"[dfm] error: nothing left to train: ckpt-{STEPS} in ")
    assert "job day-1 finished" in line and "new checkpoint location" in line and "raise epochs or max_steps" in line
    assert exports(base) == exports(finished) and "done" not in "\n".join(lines)

    # The same job again (a spot restart after its export) completes, and so does a new job on the final
    # checkpoint of a run stopped between that checkpoint and its export (no finished record).
    code, lines = run(base, env, "day-1", name="restart")
    assert code == 0, lines[-30:]
    (base / "checkpoints" / "dfm-finished.json").unlink()
    code, lines = run(base, env, "day-2", name="unexported")
    assert code == 0, lines[-30:]
    assert f"[dfm] trained steps {STEPS}..{STEPS} on 1 workers" in lines and len(exports(base)) == 3
    assert any(line.startswith(f"[dfm] eval step={STEPS} ") for line in lines)

    # More epochs go on from the finished model.
    code, lines = run(base, env, "day-3", dict(HP, epochs=2), name="more")
    assert code == 0, lines[-30:]
    assert f"[dfm] trained steps {STEPS}..{2 * STEPS} on 1 workers" in lines


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, words",
    [
        ({"optimizer": "adam"}, "was written with optimizer adagrad (slots: accum), this run uses adam (slots: m, v)"),
        ({"feature_size": 30000}, "holds model/embeddings in shape [20000, 8], this run's is [30000, 8]"),
        ({"deep_layers": [32]}, "holds model/kernels/0 in shape [312, 16], this run's is [312, 32]"),
    ],
)
def test_a_checkpoint_that_does_not_fit_the_run_is_one_line_naming_the_difference(finished, tmp_path, change, words):
    base, env = copy_of(finished, tmp_path)
    code, lines = run(base, env, "day-2", dict(HP, epochs=2, **change))
    assert code == 1, lines[-30:]
    (line,) = errors(lines)
    assert line == f"[dfm] error: checkpoint ckpt-{STEPS} in {base}/checkpoints {words}; " + (
        "train with the settings it was written with, or from a new checkpoint location"
    )
    assert exports(base) == exports(finished)


@pytest.mark.slow
def test_a_run_whose_loss_explodes_but_stays_finite_fails_without_a_model(tmp_path):
    env = host(tmp_path)
    code, lines = run(tmp_path, env, "lr-1e4", dict(HP, optimizer="adam", learning_rate=1e4, checkpoint_steps=1000))
    assert code == 1, lines[-30:]
    (line,) = errors(lines)
    assert line.startswith("[dfm] error: training diverged at step 10: train loss=") and "is above 6.93" in line
    assert "nan" not in line and "inf" not in line.split("train loss=")[1].split()[0]
    assert exports(tmp_path) == [] and not any(line.startswith("[dfm] trained steps") for line in lines)


def mirrored_pair(tmp_path, job, hp, name):
    """Two MultiWorkerMirroredStrategy workers (one host each, on loopback) as job `job`. -> (codes, logs)."""
    import json
    import os
    import signal
    import subprocess

    hosts = ["algo-1", "algo-2"]
    cluster = {"worker": [f"localhost:{es.free_port()}" for _ in hosts]}
    procs, logs = [], []
    for index, name_of_host in enumerate(hosts):
        base = tmp_path / name_of_host
        env = es.make_container(
            base, ["train", "eval"], hosts=hosts, current_host=name_of_host, s3_sharded=("train",), num_cpus=1
        )
        if not any((base / "input/data/train").iterdir()):
            train, evaluation = es.synth_split(1024, 256, seed=4, feature_size=HP["feature_size"])
            es.write_tfrecords(base / "input/data/train", train.take(512 * index, 512 * (index + 1)), 1)
            es.write_tfrecords(base / "input/data/eval", evaluation, 1)
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}, "environment": "cloud"}
        extra = {"TF_CONFIG": json.dumps(tf_config), "TRAINING_JOB_NAME": job}
        logs.append(base / f"{name}.log")
        procs.append(es.start_script(base, "train_mirrored.py", hp, env, logs[-1], extra))
    try:
        codes = [proc.wait(240) for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("workers did not finish: " + "".join(log.read_text()[-2000:] for log in logs))
    return codes, [log.read_text().splitlines() for log in logs]


@pytest.mark.slow
def test_synchronous_workers_stop_together_on_a_finished_runs_checkpoints(tmp_path):
    hp = dict(HP, max_steps=4, log_steps=2)
    codes, logs = mirrored_pair(tmp_path, "day-1", hp, "first")
    assert codes == [0, 0], logs[0][-30:] + logs[1][-30:]
    codes, logs = mirrored_pair(tmp_path, "day-2", hp, "second")
    assert codes == [1, 1], logs[0][-30:] + logs[1][-30:]
    (line,) = errors(logs[0])  # rank 0 keeps the checkpoints and says why; its worker follows the vote
    assert line.startswith("[dfm] error: nothing left to train: ckpt-4 in ") and errors(logs[1]) == []
