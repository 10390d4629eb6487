"""Runs that must never end "done": no row to train on, or a loss that stopped being a number. Each ends with
exit 1, one line naming the cause, and no exported model; a diverged run keeps its last good checkpoint."""

import pytest

import entry_support as es
from test_entry_ps import run_cluster, two_hosts_s3_sharded

HP = {
    "feature_size": 20000,
    "deep_layers": [16],
    "batch_size": 64,
    "log_steps": 5,
    "optimizer": "adagrad",
    "learning_rate": 0.1,
}
DIVERGING = {**HP, "learning_rate": 1e30, "checkpoint_steps": 5}


def one_host(tmp_path, rows):
    env = es.make_container(tmp_path, ["train"])
    train, _ = es.synth_split(max(rows, 1), 0, seed=3, feature_size=20000)
    if rows:
        es.write_tfrecords(tmp_path / "input/data/train", train.take(0, rows), 1)
    else:
        (tmp_path / "input/data/train/part-00000").write_bytes(b"")  # an object, but no record
    return env


def exported(model_dir):
    return [p for p in model_dir.iterdir() if p.is_dir()] if model_dir.exists() else []


@pytest.mark.slow
def test_a_train_channel_with_no_rows_fails_the_run_naming_channel_and_host(tmp_path):
    env = one_host(tmp_path, rows=0)
    proc = es.start_script(tmp_path, "train_ps.py", HP, env, tmp_path / "run.log")
    proc.wait(timeout=240)
    log = (tmp_path / "run.log").read_text()
    assert proc.returncode == 1, log[-2000:]
    assert "error: no step trained: the channel holds no rows (channel 'train' on algo-1" in log
    assert exported(tmp_path / "model") == [] and "checkpoint step=" not in log


@pytest.mark.slow
def test_a_diverged_run_fails_at_its_step_keeping_the_last_good_checkpoint(tmp_path):
    env = one_host(tmp_path, rows=3000)
    proc = es.start_script(tmp_path, "train_ps.py", DIVERGING, env, tmp_path / "run.log")
    proc.wait(timeout=240)
    log = (tmp_path / "run.log").read_text()
    assert proc.returncode == 1, log[-2000:]
    error = next(line for line in log.splitlines() if "error: training diverged at step" in line)
    assert "no model exported" in error and exported(tmp_path / "model") == []
    saved = [int(line.split("step=")[1].split()[0]) for line in log.splitlines() if "checkpoint step=" in line]
    if saved:  # every checkpoint written is one of finite weights, and the error names the last
        assert f"step {saved[-1]} in" in error
    else:
        assert "no checkpoint was saved before it" in error


@pytest.mark.slow
def test_the_parameter_server_chief_stops_a_diverged_run(tmp_path):
    bases, envs, parts, _ = two_hosts_s3_sharded(tmp_path, 2000, 0)
    for base, part in zip(bases, parts):
        es.write_tfrecords(base / "input/data/train", part, 1)
    codes, chief, worker, _ = run_cluster(tmp_path, bases, envs, {**DIVERGING, "eval_steps": 0})
    assert codes[0] == 1, chief[-3000:]
    assert "error: training diverged at step" in chief and "no model exported" in chief
    assert exported(bases[0] / "model") == []


def bad_data_host(tmp_path, field_size=39):
    """A host whose train channel holds a good file, then one of `field_size` fields (the run's is 39)."""
    from deepfm_container import load_env

    env = es.make_container(tmp_path, ["train"])
    train, _ = es.synth_split(40, 0, seed=3, feature_size=20000)
    es.write_tfrecords(tmp_path / "input/data/train/a", train, 1)
    other, _ = es.synth_split(40, 0, seed=3, feature_size=20000, field_size=field_size)
    es.write_tfrecords(tmp_path / "input/data/train/b", other, 1)
    for folder in ("a", "b"):  # the channel's files side by side, in key order
        (part,) = (tmp_path / "input/data/train" / folder).iterdir()
        part.rename(tmp_path / "input/data/train" / f"{folder}-{part.name}")
        (tmp_path / "input/data/train" / folder).rmdir()
    return env, load_env(env), sorted((tmp_path / "input/data/train").iterdir())


@pytest.mark.runtimes
def test_bad_records_are_located_by_file_and_record(tmp_path):
    import deepfm_data_errors as de
    import deepfm_hparams as H

    _, env, (good, other) = bad_data_host(tmp_path, field_size=10)
    read = de.record_reader(H.parse_hyperparameters([]), env)
    assert de.locate_bad_record(env, ["train"], read)[:2] == (str(other), 1)
    data = good.read_bytes()
    other.write_bytes(data[: len(data) - 20])  # the last record cut short
    path, number, why = de.locate_bad_record(env, ["train"], read)
    assert (path, number) == (str(other), 40)
    assert why.startswith("the file ends inside a record (truncated record at byte ") and why.endswith("cut short")
    other.write_bytes(data)
    assert de.locate_bad_record(env, ["train"], read) is None


@pytest.mark.slow
def test_a_run_on_records_of_another_field_size_names_the_file(tmp_path):
    env, _, (_, other) = bad_data_host(tmp_path, field_size=10)
    proc = es.start_script(tmp_path, "train_ps.py", HP, env, tmp_path / "run.log")
    proc.wait(timeout=240)
    log = (tmp_path / "run.log").read_text()
    assert proc.returncode == 1, log[-2000:]
    error = log.strip().splitlines()[-1]
    assert error.startswith(f"[dfm] error: bad input data in {other}: record 1: ") and "stack traces" not in error
