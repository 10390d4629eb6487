"""The embedding tables and the training processes against the hosts' memory, per layout: one host, parameter
servers on every host (the chief's host: its ps share, the chief, its worker; the whole state once more where the
chief writes the checkpoints), a ps group's worker hosts, and a copy per process under Horovod and MultiWorkerMirrored
on CPU hosts; and the instance types suggested."""

from __future__ import annotations

import re

import pytest

from launcher.plans import hosts
from launcher.rules import memory
from launcher.spec import load_spec
from spec_helpers import CONFIGS, REPO, run, write_spec

BIG = ["--set", "hyperparameters.feature_size=1000000000", "--set", "hyperparameters.embedding_size=64"]
EFS = {  # checkpoints on a file system every host mounts: each ps writes its own shards
    "checkpoints": {"file_system": {"file_system_id": "fs-0123456789abcdef0", "type": "EFS", "directory_path": "/c"}},
    "vpc": {"subnets": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]},
}
HOROVOD = {
    "entry_point": "deepfm-horovod",
    "framework": {"version": "2.12"},
    "instance": {"type": "ml.c5.18xlarge", "count": 2},
}


def _memory_findings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "the embedding tables need" in line]


def test_the_ps_config_with_a_260gb_table_is_refused_on_its_two_hosts(capsys):
    code, _, err = run(capsys, "validate", str(REPO / "configs" / "ps.yaml"), *BIG)
    [found] = _memory_findings(err)
    assert code == 2 and found.startswith("error: --set: hyperparameters.feature_size: ")
    # 1e9 x (65 x 4 bytes x (1 + 1 adagrad slot) + the baseline's 3 floats x 4 bytes) = 495.5 GiB, split over the 2
    # hosts' ps: 247.7 GiB each, a ps that restores its checkpoints at its peak 2.1 x that + its working set; the
    # chief writes the checkpoints to its own disk, receiving every ps's variables: 2.3 x 495.5 GiB + its working set
    assert "1,661.7 GiB on each ml.c5.18xlarge" in found and "split over the 2 hosts' parameter servers" in found
    assert "ps 520.9 GiB + chief 1,140.2 GiB + worker 0.6 GiB" in found
    assert "+ 3 floats per id for the baseline" in found  # configs/ps.yaml trains it
    assert "144 GiB" in found and "checkpoints on a file system every host mounts" in found
    assert "instance.count 11" in found  # 2.1 x 495.5 / (100.8 - 3 x 0.6) GiB once the chief holds no table


def test_the_same_table_on_one_small_host_without_distribution_is_refused(capsys):
    code, _, err = run(
        capsys,
        "validate",
        str(REPO / "configs" / "ps.yaml"),
        *BIG,
        "--set",
        "distribution=none",
        "--set",
        "instance={type: ml.c5.xlarge, count: 1}",
    )
    [found] = _memory_findings(err)
    assert code == 2 and found.startswith("error: ") and "496.1 GiB on each ml.c5.xlarge (all on one process" in found
    assert "ml.c5.xlarge's 8 GiB" in found and "distribution: parameter_server" in found
    # the cheapest memory-optimized CPU type that holds it: never a GPU type, never one without a price
    assert "an instance type with more memory (ml.r5.24xlarge (768 GiB))" in found


def test_a_table_over_70_percent_of_one_host_is_a_warning_with_the_numbers(tmp_path, capsys):
    # 60e6 x 9 x 4 bytes x (1 + 2 adam slots) = 6.0 GiB + the process's 0.6 GiB = 83% of ml.c5.xlarge's 8 GiB
    spec = write_spec(tmp_path, {"hyperparameters": {"feature_size": 60_000_000}})
    code, _, err = run(capsys, "validate", str(spec))
    [found] = _memory_findings(err)
    assert code == 0 and found.startswith("warning: ") and "6.7 GiB" in found and "83% of ml.c5.xlarge's 8 GiB" in found
    assert "(ml.r5.large (16 GiB))" in found
    code, _, err = run(capsys, "validate", str(write_spec(tmp_path, {"hyperparameters": {"feature_size": 45_000_000}})))
    assert code == 0 and _memory_findings(err) == []


def test_parameter_servers_split_the_tables_over_the_hosts_once_the_chief_holds_none(tmp_path, capsys):
    tables = {"hyperparameters": {"feature_size": 80_000_000}}  # 8.0 GiB: too much for one 8 GiB host, 4.0 on two
    one = write_spec(tmp_path, {**tables, "distribution": "none"}, name="one.yaml")
    two = {**tables, "distribution": "parameter_server", "instance": {"count": 8}}
    assert run(capsys, "validate", str(one))[0] == 2
    code, _, err = run(capsys, "validate", str(write_spec(tmp_path, two, name="two.yaml")))
    [found] = _memory_findings(err)  # the chief writes the checkpoints: it reads all 8.0 GiB
    assert code == 2 and "ps 2.7 GiB + chief 19.1 GiB + worker 0.6 GiB" in found
    code, _, err = run(capsys, "validate", str(write_spec(tmp_path, {**two, **EFS}, name="efs.yaml")))
    assert code == 0 and _memory_findings(err) == [], err


@pytest.mark.parametrize(
    "checkpoints, expected",
    [
        ({}, "error: --set: hyperparameters.feature_size: the embedding tables need 510.5 GiB on each ml.c5.9xlarge"),
        # a ps's 45.0 GiB share at 2.1x as it restores a checkpoint + the three processes' working sets
        (EFS, "error: --set: hyperparameters.feature_size: the embedding tables need 96.4 GiB on each ml.c5.9xlarge"),
        # no checkpoint to restore: the share at 1.6x (the chief still writes the export itself)
        (
            {"checkpoints": False},
            "error: --set: hyperparameters.feature_size: the embedding tables need 488.0 GiB on each ml.c5.9xlarge",
        ),
    ],
    ids=["chief-writes", "tasks-write", "no-checkpoints"],
)
def test_a_1_79e9_id_table_on_four_c5_9xlarge_hosts(tmp_path, capsys, checkpoints, expected):
    spec = write_spec(
        tmp_path, {"distribution": "parameter_server", "instance": {"type": "ml.c5.9xlarge", "count": 4}, **checkpoints}
    )
    code, _, err = run(capsys, "validate", str(spec), "--set", "hyperparameters.feature_size=1790000000")
    [found] = _memory_findings(err)
    assert found.startswith(expected), found
    if checkpoints == {"checkpoints": False}:
        assert code == 2 and "ps 72.6 GiB + chief 414.7 GiB" in found
    elif checkpoints:
        assert code == 2 and "ps 95.1 GiB + chief 0.6 GiB + worker 0.6 GiB" in found and "instance.count 8" in found
        need = memory.plan_host_memory(load_spec(spec, ["hyperparameters.feature_size=1790000000"]))
        assert [p.role for p in need.processes] == ["ps", "chief", "worker"]
        assert hosts.gib(need.needed) == "96.4 GiB"
    else:
        assert code == 2 and "ps 95.1 GiB + chief 414.7 GiB" in found


def test_a_ps_groups_chief_host_holds_the_whole_state_only_where_it_writes_the_checkpoints(tmp_path, capsys):
    code, _, err = run(capsys, "validate", str(REPO / "configs" / "hetero-ps.yaml"), "--set", "checkpoints=auto")
    [found] = _memory_findings(err)
    assert (
        code == 2 and "232.6 GiB on each ml.g5.2xlarge (the chief's host of the worker group: chief 232.0 GiB" in found
    )
    code, _, err = run(capsys, "validate", str(REPO / "configs" / "hetero-ps.yaml"))  # checkpoints on EFS
    assert code == 0 and _memory_findings(err) == [], err


def test_each_horovod_rank_on_a_cpu_host_holds_a_whole_copy(tmp_path, capsys):
    tables = {"hyperparameters": {"feature_size": 200_000_000}}
    one = write_spec(
        tmp_path, {**HOROVOD, **tables, "distribution": {"horovod": {"processes_per_host": 1}}}, "one.yaml"
    )
    code, _, err = run(capsys, "validate", str(one))
    assert code == 0 and _memory_findings(err) == [], err
    four = write_spec(
        tmp_path, {**HOROVOD, **tables, "distribution": {"horovod": {"processes_per_host": 4}}}, "four.yaml"
    )
    code, _, err = run(capsys, "validate", str(four))
    [found] = _memory_findings(err)
    per_rank = float(re.search(r"need ([\d.,]+) GiB", found).group(1).replace(",", "")) / 4
    assert "4 whole copies, one per rank" in found and per_rank * 4 > 144 * 0.7
    assert f"processes_per_host {int(144 * 0.7 // per_rank)}" in found


def test_a_multi_worker_mirrored_replica_on_a_cpu_host_holds_the_tables(tmp_path, capsys):
    spec = write_spec(
        tmp_path,
        {
            "entry_point": "deepfm-mirrored",
            "distribution": "multi_worker_mirrored",
            "instance": {"count": 2},
            "hyperparameters": {"feature_size": 60_000_000},
        },
    )
    code, _, err = run(capsys, "validate", str(spec))
    [found] = _memory_findings(err)
    assert code == 2 and "1 whole copy, one per replica" in found and "8 GiB" in found


def test_every_shipped_config_still_validates(capsys):
    code, _, err = run(capsys, "validate", *map(str, CONFIGS))
    assert code == 0 and _memory_findings(err) == [], err
