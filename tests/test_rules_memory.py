"""The embedding tables against the hosts' memory, per layout: one host, parameter servers on every host, and a
copy per process under Horovod and MultiWorkerMirrored on CPU hosts."""

from __future__ import annotations

import re

from spec_helpers import CONFIGS, REPO, run, write_spec

BIG = ["--set", "hyperparameters.feature_size=1000000000", "--set", "hyperparameters.embedding_size=64"]
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
    # 1e9 x 65 x 4 bytes x (1 + 1 adagrad slot) = 484.3 GiB, split over the 2 hosts' ps
    assert "242.1 GiB on each ml.c5.18xlarge" in found and "split over the 2 hosts' parameter servers" in found
    assert "144 GiB" in found and "instance.count 5" in found


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
    assert code == 2 and found.startswith("error: ") and "484.3 GiB on each ml.c5.xlarge (all on one process" in found
    assert "ml.c5.xlarge's 8 GiB" in found and "distribution: parameter_server" in found


def test_a_table_over_70_percent_of_one_host_is_a_warning_with_the_numbers(tmp_path, capsys):
    # 30e6 x 9 x 4 bytes x (1 + 2 adam slots) = 3.0 GiB of ml.c5.xlarge's 8: 38%; 50e6: 5.0 GiB, 63%; 60e6: 75%
    spec = write_spec(tmp_path, {"hyperparameters": {"feature_size": 60_000_000}})
    code, _, err = run(capsys, "validate", str(spec))
    [found] = _memory_findings(err)
    assert code == 0 and found.startswith("warning: ") and "6.0 GiB" in found and "75% of ml.c5.xlarge's 8 GiB" in found
    code, _, err = run(capsys, "validate", str(write_spec(tmp_path, {"hyperparameters": {"feature_size": 50_000_000}})))
    assert code == 0 and _memory_findings(err) == []


def test_parameter_servers_split_the_tables_over_the_hosts(tmp_path, capsys):
    tables = {"hyperparameters": {"feature_size": 80_000_000}}  # 8.0 GiB: too much for one 8 GiB host, 4.0 on two
    one = write_spec(tmp_path, {**tables, "distribution": "none"}, name="one.yaml")
    two = write_spec(
        tmp_path, {**tables, "distribution": "parameter_server", "instance": {"count": 2}}, name="two.yaml"
    )
    assert run(capsys, "validate", str(one))[0] == 2
    code, _, err = run(capsys, "validate", str(two))
    assert code == 0 and _memory_findings(err) == []


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
