"""Several training steps per ClusterCoordinator closure (`steps_per_closure`) on a two-host parameter-server
cluster: epoch ends, bad-row counts, the log, checkpoint and evaluation steps and a resume stay exact."""

import json
import math
import re

import pytest

import entry_support as es
from test_entry_ps import HP, INSTANTIATIONS_LOGGED, group_gone, run_cluster
from test_entry_features import BAD_LINES, features_for, write_raw


def closure_sizes(todo, steps_per_closure, workers, local_steps=1):
    from deepfm_coordinator import closure_sizes as sizes

    return sizes(todo, steps_per_closure, workers, local_steps)


def test_a_window_is_split_into_an_even_share_for_each_worker_in_whole_groups_of_local_steps():
    assert closure_sizes(7, 5, 2) == [4, 3]  # short window: both workers busy, 7 steps exactly
    assert closure_sizes(100, 16, 2) == [16] * 6 + [2, 2]
    assert closure_sizes(1, 16, 3) == [1]
    assert closure_sizes(9, 1, 2) == [1] * 9  # steps_per_closure=1: one step per closure
    # the configs' 50-step windows: no worker runs 16 + 16 while the other runs 16 + 2
    assert closure_sizes(50, 16, 2, 8) == [16, 16, 9, 9]
    assert closure_sizes(40, 16, 2, 8) == [16, 16, 4, 4]  # 3 exchanges a worker, where 10 + 10 would take 4
    assert closure_sizes(40, 12, 2, 8) == [8, 8, 8, 8, 4, 4]  # a closure holds whole groups
    for todo in range(1, 60):
        for size in (1, 3, 16):
            for workers in (1, 2, 3):
                for local in (1, 8):
                    sizes = closure_sizes(todo, size, workers, local)
                    assert sum(sizes) == todo and max(sizes) <= size, (todo, size, workers, local)
                    # ClusterCoordinator hands each closure to the next free worker: none runs more than its share
                    load = [0] * workers
                    for closure in sizes:
                        load[load.index(min(load))] += closure
                    assert max(load) == -(-todo // workers), (todo, size, workers, local, sizes)


def test_an_executor_whose_task_is_gone_is_not_printed_at_its_deletion_and_anything_else_is():
    import types

    import tensorflow as tf
    from tensorflow.python.eager.executor import Executor
    from deepfm_closure_errors import quiet_lost_task_executors

    def unraisable(exc, obj):
        return types.SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=None, err_msg=None, object=obj)

    printed = []
    hook = quiet_lost_task_executors(printed.append)
    lost, other = tf.errors.UnavailableError(None, None, "Connection reset by peer"), ValueError("another")
    hook(unraisable(lost, Executor.__del__))
    hook(unraisable(other, Executor.__del__))
    hook(unraisable(lost, closure_sizes))
    assert [args.exc_value for args in printed] == [other, lost]


def test_the_chief_reads_the_step_again_when_its_next_train_line_is_due_within_bounds():
    from deepfm_coordinator import LOOK_SECONDS, SOONEST_LOOK_SECONDS, seconds_to_look

    assert seconds_to_look(10, 100.0) == 0.1  # 10 steps to the line at 100 steps/s
    assert seconds_to_look(10, 0.0) == LOOK_SECONDS  # no rate yet, or no step since the last read
    assert seconds_to_look(1000, 100.0) == LOOK_SECONDS  # closures to schedule meanwhile
    assert seconds_to_look(1, 1000.0) == SOONEST_LOOK_SECONDS


def raw_hosts(tmp_path, rows_per_host, batch_size):
    """Two hosts, each its own raw TSV file with the bad lines in it, and an eval file on the master.
    -> (bases, envs, features, training batches per host)."""
    hosts = ["algo-1", "algo-2"]
    columns, _, _ = write_raw(
        tmp_path / "raw", 2 * rows_per_host, eval_rows=300, seed=4, feature_size=600, vocabulary=100, max_length=4
    )
    lines = [line for path in sorted((tmp_path / "raw" / "train").iterdir()) for line in path.read_text().splitlines()]
    bases, envs, batches = [], [], []
    for i, host in enumerate(hosts):
        base = tmp_path / host
        envs.append(es.make_container(base, ["train", "eval"], hosts=hosts, current_host=host, s3_sharded=("train",)))
        part = lines[i * rows_per_host : (i + 1) * rows_per_host]
        part = part[:10] + BAD_LINES + part[10:]
        (base / "input/data/train/part-0.tsv").write_text("\n".join(part) + "\n")
        (base / "input/data/eval/part-0.tsv").write_text(
            (tmp_path / "raw/eval").joinpath(sorted(p.name for p in (tmp_path / "raw/eval").iterdir())[0]).read_text()
        )
        bases.append(base)
        batches.append(math.ceil(len(part) / batch_size))
    features = features_for(columns, buckets=500, bag_buckets=200, max_length=4, bad_rows="skip")
    return bases, envs, json.dumps(features), batches


def steps_of(log, kind):
    return [int(row["step"]) for row in es.metric_lines(log, kind)]


@pytest.mark.slow
def test_multi_step_closures_keep_epochs_bad_rows_windows_and_resume_exact(tmp_path):
    bases, envs, features, batches = raw_hosts(tmp_path, 1000, 64)
    epoch = sum(batches)  # every worker's batches, the bad lines' included (skipped rows, not batches)
    # best_of last: with eval:auc, when epoch 2 evaluates below epoch 1 (asynchronous updates: by chance) the chief
    # repeats epoch 1's eval line at the end for the exported model, and the eval steps read [e, 2e, e]
    hp = dict(
        HP,
        feature_size=600,
        batch_size=64,
        features=features,
        epochs=2,
        steps_per_closure=5,
        log_steps=7,
        checkpoint_steps=10,
        best_of="last",
        # HP's 0.1 overshoots on these raw rows (log1p numeric values): the first window's loss read 2 to 11 in
        # four runs, and above the divergence bound (6.93) the run stops; at 0.03 it read 0.52 to 0.59 in six
        learning_rate=0.03,
    )
    codes, chief, worker, procs = run_cluster(tmp_path, bases, envs, hp, chief_env=INSTANTIATIONS_LOGGED)
    assert codes == [0, 0, 0, 0], chief[-3000:] + worker[-2000:]
    assert all(group_gone(proc) for proc in procs)
    done = [int(s) for s in re.findall(r"epoch \d/2 done at step (\d+)", chief)]
    assert done == [epoch, 2 * epoch]
    # the train lines come while the closures run (deepfm_coordinator): each at the step the chief read once a
    # multiple of 7 was crossed since the last line, the last at the end
    steps = steps_of(chief, "train")
    assert steps[-1] == 2 * epoch and [s // 7 for s in steps] == sorted({s // 7 for s in steps}), steps
    assert [int(s) for s in re.findall(r"checkpoint step=(\d+)", chief)] == list(range(10, 2 * epoch, 10)) + [2 * epoch]
    assert steps_of(chief, "eval") == [epoch, 2 * epoch]
    counts = sorted(re.findall(r"bad rows skipped: (\d+) \(worker (\d)\)", chief))
    assert counts == [(str(2 * len(BAD_LINES)), "0"), (str(2 * len(BAD_LINES)), "1")], chief[-3000:]
    instantiated = [line for line in chief.splitlines() if "CFLR::Instantiate" in line]
    assert not [line for line in instantiated if " on /job:worker/" in line]

    # A restarted job with one more epoch continues at the end of the second, and the third ends exactly.
    codes, chief, worker, procs = run_cluster(tmp_path, bases, envs, dict(hp, epochs=3), tag="again")
    assert codes == [0, 0, 0, 0], chief[-3000:]
    assert f"continuing at step {2 * epoch}" in chief
    assert [int(s) for s in re.findall(r"epoch \d/3 done at step (\d+)", chief)] == [3 * epoch]
    assert steps_of(chief, "eval") == [3 * epoch]
