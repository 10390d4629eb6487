"""launcher/plans/hosts.py and tasks.py, the one cluster model: instance groups, host names, resource configs, what runs
where, cost per group, the embedding memory estimate; checked against the real sagemaker-training toolkit (how it
reads our resource configs) and the bundled script's own cluster builder and optimizer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from local_plans import toolkit_pythonpath

from launcher.facts import catalog
from launcher.plans import hosts
from launcher.plans import tasks
from launcher.plans.training_plan import build_plan
from launcher.spec import load_spec
from entry_support import entrypoint_module
from spec_helpers import write_spec

GROUPS = hosts.layout("ml.g5.2xlarge", 4, "ml.r5.4xlarge", 2)


# ---- groups, hosts, resource configs ----


def test_layout_puts_the_workers_first_and_numbers_hosts_across_groups():
    assert [g.request() for g in GROUPS] == [
        {"InstanceGroupName": "worker", "InstanceType": "ml.g5.2xlarge", "InstanceCount": 4},
        {"InstanceGroupName": "ps", "InstanceType": "ml.r5.4xlarge", "InstanceCount": 2},
    ]
    assert hosts.host_names(GROUPS) == {"worker": ["algo-1", "algo-2", "algo-3", "algo-4"], "ps": ["algo-5", "algo-6"]}


def test_resource_configs_have_sagemakers_heterogeneous_layout():
    configs = hosts.resource_configs(GROUPS)
    assert sorted(configs, key=lambda h: int(h.split("-")[1])) == [f"algo-{i}" for i in range(1, 7)]
    # the keys and nesting SageMaker writes (amazon-sagemaker-examples' heterogeneous hello-world job printed them)
    assert configs["algo-5"] == {
        "current_host": "algo-5",
        "current_instance_type": "ml.r5.4xlarge",
        "current_group_name": "ps",
        "hosts": ["algo-1", "algo-2", "algo-3", "algo-4", "algo-5", "algo-6"],
        "instance_groups": [
            {
                "instance_group_name": "worker",
                "instance_type": "ml.g5.2xlarge",
                "hosts": ["algo-1", "algo-2", "algo-3", "algo-4"],
            },
            {"instance_group_name": "ps", "instance_type": "ml.r5.4xlarge", "hosts": ["algo-5", "algo-6"]},
        ],
        "network_interface_name": "eth0",
    }
    configs["algo-1"]["hosts"].append("mutated")  # each host's dict is its own
    assert "mutated" not in configs["algo-2"]["hosts"]


def test_the_dry_run_shows_the_cluster_the_bundled_script_builds_on_every_host(tmp_path):
    hc = entrypoint_module("hetero_cluster")
    spec = write_spec(
        tmp_path,
        {
            "instance": {"type": "ml.g5.2xlarge", "count": 4},
            "distribution": {"parameter_server": {"ps": {"type": "ml.r5.4xlarge", "count": 2, "per_host": 2}}},
        },
    )
    plan = build_plan(load_spec(spec), job_name="j")
    roles = {}
    for host, config in hosts.resource_configs(plan.instance_groups).items():
        cluster = hc.build_cluster(
            json.loads(json.dumps(config)),
            plan.hyperparameters["ps_group"],
            ps_per_host=plan.hyperparameters["ps_per_host"],
        )
        roles[host] = [t.name for t in cluster.local_tasks()]
        assert cluster.cluster_spec()["chief"] == ["algo-1:2222"]
    assert roles == {
        "algo-1": ["chief:0", "worker:0"],
        "algo-2": ["worker:1"],
        "algo-3": ["worker:2"],
        "algo-4": ["worker:3"],
        "algo-5": ["ps:0", "ps:1"],
        "algo-6": ["ps:2", "ps:3"],
    }
    assert tasks.tasks_by_host(plan) == roles
    # `--local` maps exactly the addresses the script dials
    assert tasks.container_addresses(plan) == [t.address for t in cluster.tasks]


@pytest.mark.parametrize(
    "changes, expected",
    [
        # the toolkit's ps on each host; the master also runs its own host's worker task, after the other hosts'
        (
            {"distribution": "parameter_server", "instance": {"count": 2}},
            {"algo-1": ["ps", "master", "worker:1"], "algo-2": ["ps", "worker:0"]},
        ),
        (
            {"distribution": "parameter_server", "instance": {"type": "ml.p3.8xlarge", "count": 2}},  # one task per GPU
            {
                "algo-1": ["ps", "master", "worker:4", "worker:5", "worker:6", "worker:7"],
                "algo-2": ["ps", "worker:0", "worker:1", "worker:2", "worker:3"],
            },
        ),
        (
            {
                "entry_point": "deepfm-horovod",
                "framework": {"version": "2.12"},
                "instance": {"type": "ml.p3.8xlarge", "count": 2},
                "distribution": {"horovod": {"processes_per_host": 2}},
            },
            {"algo-1": ["rank:0", "rank:1"], "algo-2": ["rank:2", "rank:3"]},
        ),
        (
            {"entry_point": "deepfm-mirrored", "distribution": "multi_worker_mirrored", "instance": {"count": 2}},
            {"algo-1": ["worker:0"], "algo-2": ["worker:1"]},
        ),
        ({}, {"algo-1": ["script"]}),
    ],
)
def test_what_runs_on_each_host_of_a_toolkit_layout(tmp_path, changes, expected):
    assert tasks.tasks_by_host(build_plan(load_spec(write_spec(tmp_path, changes)), job_name="j")) == expected


def test_one_group_of_identical_hosts_is_sagemakers_homogeneous_cluster():
    configs = hosts.resource_configs(hosts.one_group("ml.c5.xlarge", 2))
    assert configs["algo-2"] == {
        "current_host": "algo-2",
        "current_instance_type": "ml.c5.xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-2"],
        "network_interface_name": "eth0",
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "ml.c5.xlarge",
                "hosts": ["algo-1", "algo-2"],
            }
        ],
    }


TOOLKIT_READS = """
import json, os, sys
import sagemaker_training.environment as environment
out = {}
for host, config in json.loads(sys.argv[1]).items():
    # empty hyperparameters would be read from disk
    env = environment.Environment(resource_config=config, hyperparameters={"epochs": 1},
                                  input_data_config={"train": {"TrainingInputMode": "File"}})
    out[host] = {"group": env.current_instance_group, "type": env.current_instance_type,
                 "group_hosts": env.current_instance_group_hosts, "groups": env.instance_groups,
                 "hetero": env.is_hetero, "distribution_groups": env.distribution_instance_groups,
                 "master": env.master_hostname, "hosts": env.hosts}
print(json.dumps(out))
"""


@pytest.mark.skipif(toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)")
def test_the_real_toolkit_reads_our_resource_configs_as_a_heterogeneous_cluster(tmp_path):
    configs = hosts.resource_configs(GROUPS)
    result = subprocess.run(
        [sys.executable, "-c", TOOLKIT_READS, json.dumps(configs)],
        capture_output=True,
        text=True,
        env={
            "PYTHONPATH": toolkit_pythonpath(),
            "SAGEMAKER_BASE_DIR": str(tmp_path),
            "AWS_DEFAULT_REGION": "us-east-1",
        },
        check=True,
    )
    seen = json.loads(result.stdout)
    assert seen["algo-6"] == {
        "group": "ps",
        "type": "ml.r5.4xlarge",
        "group_hosts": ["algo-5", "algo-6"],
        "groups": ["worker", "ps"],
        "hetero": True,
        "distribution_groups": [],  # no toolkit distribution: it runs the script on every host
        "master": "algo-1",
        "hosts": [f"algo-{i}" for i in range(1, 7)],
    }
    assert seen["algo-2"]["group"] == "worker" and seen["algo-2"]["type"] == "ml.g5.2xlarge"


def test_group_problems_are_what_sagemaker_would_refuse():
    assert hosts.group_problems(GROUPS) == []
    six = [hosts.InstanceGroup(f"g{i}", "ml.c5.xlarge", 1, "worker") for i in range(6)]
    assert hosts.group_problems(six) == ["6 instance groups, SageMaker allows at most 5"]
    bad = [
        hosts.InstanceGroup("ps", "ml.r5.large", 1, "ps"),
        hosts.InstanceGroup("ps", "ml.r5.large", 0, "ps"),
        hosts.InstanceGroup("x" * 65, "ml.c5.xlarge", 1, "worker"),
        hosts.InstanceGroup("", "ml.c5.xlarge", 1, "worker"),
    ]
    problems = hosts.group_problems(bad)
    assert "instance group name 'ps' is used twice: names must be unique" in problems
    assert "instance group 'ps' has 0 instances: it needs at least 1" in problems
    assert f"instance group name {'x' * 65!r}: 65 characters, SageMaker allows at most 64" in problems
    assert any(p.startswith("instance group name '': 0 characters, SageMaker needs at least 1") for p in problems)


def test_cost_per_group_and_in_all():
    cost = hosts.costs(GROUPS, max_run_s=7200)
    worker, ps = cost["groups"]
    assert worker["max_usd"] == round(catalog.instance("ml.g5.2xlarge").usd_per_hour * 4 * 2, 2)
    assert ps["max_usd"] == round(catalog.instance("ml.r5.4xlarge").usd_per_hour * 2 * 2, 2)
    assert cost["max_usd"] == round(worker["max_usd"] + ps["max_usd"], 2) and cost["max_hours"] == 2
    unknown = hosts.costs([GROUPS[0], hosts.InstanceGroup("ps", "ml.x9.huge", 1, "ps")], 3600)
    assert unknown["max_usd"] is None and "not in dfm's price table" in unknown["groups"][1]["note"]


def test_warm_pool_hours_are_counted_once():
    one = hosts.one_group("ml.c5.xlarge", 2)
    cost = hosts.costs(one, max_run_s=3600, warm_pool_s=1800)
    price = catalog.instance("ml.c5.xlarge").usd_per_hour
    assert cost["max_usd"] == round(price * 2 * 1.5, 2)
    assert (cost["max_hours"], cost["warm_pool_hours"]) == (1, 0.5)
    from launcher.cli.render import _cost_line

    assert _cost_line(cost).startswith(
        f"at most ${cost['max_usd']:,.2f} = (${price}/h x 2 (homogeneousCluster)) x 1.5 h"
    )


# ---- embedding memory ----


@pytest.mark.parametrize("optimizer", ["adam", "adagrad", "ftrl", "sgd"])
def test_optimizer_slots_match_the_bundled_optimizer(optimizer):
    tf = pytest.importorskip("tensorflow")
    model = entrypoint_module("deepfm_training")
    table = tf.Variable(tf.zeros([10, 3]))
    sparse = model.SparseOptimizer(optimizer, 0.01)
    sparse.build([table])
    assert len(sparse.slots[0]) == hosts.OPTIMIZER_SLOTS[optimizer]
    assert all(slot.shape == table.shape for slot in sparse.slots[0].values())  # one slot element per table element


def test_embedding_bytes_follow_the_formula():
    assert hosts.embedding_bytes(1000, 8, "adagrad") == 1000 * 9 * 4 * 2
    assert hosts.embedding_bytes(1000, 8, "sgd") == 1000 * 9 * 4
    assert hosts.embedding_bytes(1000, 8, "adam") == 1000 * 9 * 4 * 3
    assert hosts.embedding_bytes(1000, 8, "adam", baseline=True) == 1000 * (9 * 3 + 3) * 4  # its weight, m and v


def test_tables_over_the_ps_memory_are_an_error_with_the_numbers():
    ps = GROUPS[1]  # 2 x ml.r5.4xlarge = 256 GiB
    # 2e9 x 17 x 4 x 3 (adam) = 408e9 bytes = 380 GiB; a ps at its peak holds 1.6x its share, and a working set
    findings = hosts.embedding_memory_findings(2_000_000_000, 16, "adam", ps)
    assert len(findings) == 1 and findings[0][0] == "error"
    message = findings[0][1]
    assert message.startswith(
        "the embedding tables need 609.2 GiB (feature_size 2,000,000,000 x "
        "(1 + embedding_size 16) x 4 bytes x (1 + 2 adam slots) = 380.0 GiB, x 1.6 at the ps processes' peak + "
        "0.6 GiB each), more than the ps group's 2 x ml.r5.4xlarge (128 GiB each) = 256.0 GiB"
    )
    assert "count 7" in message  # 1.6 x 380 GiB / (128 GiB x 70% - 0.6 GiB) -> 7 instances


def test_tables_near_the_ps_memory_are_a_warning_and_small_ones_pass():
    ps = GROUPS[1]
    # 1.3e9 x 9 x 4 x 2 (adagrad, the default) = 87 GiB, x 1.6 + 1.2 GiB: 55% -> fine; 2e9: 216 GiB, 84% -> warning
    assert hosts.embedding_memory_findings(1_300_000_000, 8, "adagrad", ps) == []
    findings = hosts.embedding_memory_findings(2_000_000_000, 8, "adagrad", ps)
    assert [f[0] for f in findings] == ["warning"] and "84% of the ps group's" in findings[0][1]
    assert hosts.embedding_memory_findings(10**12, 8, "adagrad", hosts.InstanceGroup("ps", "ml.x9.huge", 2, "ps")) == []


# ---- the request the real SDK v2 builds offline ----
