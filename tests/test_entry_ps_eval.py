"""Evaluation on the parameter-server workers (deepfm_coordinator.WorkerEvaluation): each worker evaluates
its share of `eval`, every row counted once, with the same loss and AUC as the chief evaluating the
whole channel alone (DFM_PS_EVAL=chief) on the same model."""

import re

import pytest

import entry_support as es
from test_entry_ps import HP, group_gone, run_cluster


def eval_summary(log):
    """-> ([(step, loss, auc)] of the eval lines, [rows, workers] of each worker evaluation)."""
    lines = [(int(row["step"]), row["loss"], row["auc"]) for row in es.metric_lines(log, "eval")]
    return lines, [(int(r), int(w)) for r, w in re.findall(r"evaluated (\d+) rows on (\d+) worker", log)]


@pytest.mark.slow
def test_workers_evaluate_each_eval_row_once_as_the_chief_would(tmp_path):
    hosts = ["algo-1", "algo-2"]
    train, evaluation = es.synth_split(4000, 1101, seed=6, feature_size=20000)
    bases = [tmp_path / host for host in hosts]
    envs = [
        es.make_container(base, ["train", "eval"], hosts=hosts, current_host=host, s3_sharded=("train",))
        for base, host in zip(bases, hosts)
    ]
    for base, part in zip(bases, [train.take(0, 2000), train.take(2000, 4000)]):
        es.write_tfrecords(base / "input/data/train", part, 2)
        es.write_tfrecords(base / "input/data/eval", evaluation, 3)  # replicated: 2 files to one worker, 1 to the other
    # best_of last: the exported and evaluated model is the last one, whatever the asynchronous updates did
    hp = dict(HP, epochs=50, max_steps=24, eval_steps=10, checkpoint_steps=1000, best_of="last")
    codes, chief, worker, procs = run_cluster(tmp_path, bases, envs, hp)
    assert codes == [0, 0, 0, 0], chief[-3000:] + worker[-2000:]
    assert all(group_gone(proc) for proc in procs)
    lines, counts = eval_summary(chief)
    assert [step for step, _, _ in lines] == [10, 20, 24]
    assert counts == [(1101, 2)] * 3, chief[-3000:]  # both workers, every row once

    # The same checkpoint (step 24) evaluated by the chief alone, then by the workers again: same rows, same numbers.
    for tag, where in (("chief", "chief"), ("workers", "workers")):
        codes, again, worker, procs = run_cluster(tmp_path, bases, envs, hp, tag=tag, chief_env={"DFM_PS_EVAL": where})
        assert codes == [0, 0, 0, 0], again[-3000:]
        assert "continuing at step 24" in again
        (line,), counts = eval_summary(again)
        assert counts == ([] if where == "chief" else [(1101, 2)])
        assert ("evaluated on the chief" in again) == (where == "chief")
        assert (
            line[0] == 24
            and line[1] == pytest.approx(lines[-1][1], abs=1e-6)
            and line[2] == pytest.approx(lines[-1][2], abs=1e-5)
        ), (line, lines[-1])


@pytest.mark.slow
def test_an_s3_sharded_eval_is_read_by_every_hosts_workers_each_object_once(tmp_path):
    hosts = ["algo-1", "algo-2"]
    train, evaluation = es.synth_split(2000, 900, seed=7, feature_size=20000)
    bases = [tmp_path / host for host in hosts]
    envs = [
        es.make_container(base, ["train", "eval"], hosts=hosts, current_host=host, s3_sharded=("train", "eval"))
        for base, host in zip(bases, hosts)
    ]
    # S3 dealt the eval objects unevenly: 2 files (600 rows) to algo-1, 1 file (300 rows) to algo-2
    for base, part, (start, end, files) in zip(
        bases, [train.take(0, 1000), train.take(1000, 2000)], [(0, 600, 2), (600, 900, 1)]
    ):
        es.write_tfrecords(base / "input/data/train", part, 2)
        es.write_tfrecords(base / "input/data/eval", evaluation.take(start, end), files)
    hp = dict(HP, epochs=1, max_steps=6, checkpoint_steps=1000, best_of="last")
    codes, chief, worker, procs = run_cluster(tmp_path, bases, envs, hp)
    assert codes == [0, 0, 0, 0], chief[-3000:] + worker[-2000:]
    assert "S3-sharded: each its host" in chief
    assert eval_summary(chief)[1] == [(900, 2)]  # the chief alone read its host's 600
