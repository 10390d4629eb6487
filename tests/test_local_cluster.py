"""TF_CONFIG as sagemaker-tensorflow-training lays it out, on loopback ports."""

import json
import subprocess
import sys

import pytest
from entry_support import assert_free_and_not_ephemeral
from local_plans import toolkit_pythonpath

from launcher.local.cluster import LOOPBACK, Layout, mwms_tf_config, ps_tf_config

HOSTS = ["algo-1", "algo-2", "algo-3"]


def test_ps_layout_master_first_ps_everywhere_workers_the_rest():
    layout = Layout.allocate(HOSTS, with_ps=True)
    addresses = list(layout.script.values()) + list(layout.ps.values())
    assert all(a.startswith(f"{LOOPBACK}:") for a in addresses) and len(set(addresses)) == 6
    master = ps_tf_config(layout, "algo-1")
    assert master["cluster"] == {
        "master": [layout.script["algo-1"]],
        "ps": [layout.ps[h] for h in HOSTS],
        "worker": [layout.script["algo-2"], layout.script["algo-3"]],
    }
    assert master["task"] == {"index": 0, "type": "master"} and master["environment"] == "cloud"
    assert ps_tf_config(layout, "algo-3")["task"] == {"index": 1, "type": "worker"}
    assert ps_tf_config(layout, "algo-2", ps_task=True)["task"] == {"index": 1, "type": "ps"}


def test_one_host_has_no_ps_and_no_workers():
    layout = Layout.allocate(["algo-1"], with_ps=True)
    assert ps_tf_config(layout, "algo-1")["cluster"] == {"master": [layout.script["algo-1"]]}


def test_ports_are_free_outside_the_ephemeral_range_and_never_handed_out_twice():
    # a bind(0) port is ephemeral: any outgoing connection may take it before its task binds it
    layouts = [Layout.allocate(HOSTS, with_ps=True) for _ in range(2)]
    addresses = [a for layout in layouts for a in [*layout.script.values(), *layout.ps.values()]]
    assert_free_and_not_ephemeral([int(a.rsplit(":", 1)[1]) for a in addresses])


TOOLKIT_LAYOUT = """
import ast, json, sys
from pathlib import Path
import sagemaker_training  # only to locate the installed toolkits
root = Path(sagemaker_training.__file__).parent.parent / "sagemaker_tensorflow_container" / "training.py"
tree = ast.parse(root.read_text())
wanted = {"_is_host_master", "_build_tf_config_for_ps", "_build_tf_config_for_mwms"}
module = ast.Module([n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted], [])
namespace = {}
exec(compile(module, str(root), "exec"), namespace)  # the toolkit's own functions, without its imports
hosts = json.loads(sys.argv[1])
out = {h: {"script": namespace["_build_tf_config_for_ps"](hosts, h),
           "ps": namespace["_build_tf_config_for_ps"](hosts, h, ps_task=True),
           "mwms": namespace["_build_tf_config_for_mwms"](hosts, h)} for h in hosts}
print(json.dumps(out))
"""


@pytest.mark.skipif(toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)")
@pytest.mark.parametrize("hosts", [HOSTS[:2], HOSTS])
def test_layout_matches_the_toolkits_own_functions(hosts):
    result = subprocess.run(
        [sys.executable, "-c", TOOLKIT_LAYOUT, json.dumps(hosts)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": toolkit_pythonpath()},
        check=True,
    )
    theirs = json.loads(result.stdout)
    layout = Layout.allocate(hosts, with_ps=True)
    # the container's fixed ports become this run's loopback ports
    to_container = {
        **{a: f"{h}:2222" for h, a in layout.script.items()},
        **{a: f"{h}:2223" for h, a in layout.ps.items()},
    }

    to_mwms_container = {a: f"{h}:8890" for h, a in layout.script.items()}  # MWMS uses port 8890 in the container

    def containerized(config, ports=to_container):
        cluster = {job: [ports[a] for a in addrs] for job, addrs in config["cluster"].items()}
        return {**config, "cluster": cluster}

    for host in hosts:
        assert containerized(ps_tf_config(layout, host)) == theirs[host]["script"]
        assert containerized(ps_tf_config(layout, host, ps_task=True)) == theirs[host]["ps"]
        assert containerized(mwms_tf_config(layout, host), to_mwms_container) == theirs[host]["mwms"]


def test_mwms_layout_every_host_a_worker_in_host_order():
    layout = Layout.allocate(HOSTS, with_ps=False)
    assert layout.ps == {}
    for index, host in enumerate(HOSTS):
        config = mwms_tf_config(layout, host)
        assert config["cluster"] == {"worker": [layout.script[h] for h in HOSTS]}
        assert config["task"] == {"index": index, "type": "worker"}
