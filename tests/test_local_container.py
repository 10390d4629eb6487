"""The simulated host's environment (SM_* and the rest) for a Plan, and against the toolkit's own derivation.
(Config files and the tree: test_local_request.)"""

import json

import pytest

from local_plans import make_channel_data, standin_plan, toolkit_pythonpath, toolkit_versions_off_pin

from launcher.local.container import HostTree, container_env
from launcher.local.local_request import build_request
from launcher.local.runner import write_host_tree


def test_environment_points_into_the_host_tree(tmp_path):
    plan = standin_plan(tmp_path, hosts=2, mode="Pipe")
    tree = HostTree("algo-2", tmp_path / "algo-2")
    env = container_env(plan, tree)
    assert env["SAGEMAKER_BASE_DIR"] == str(tree.base)
    assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"] and env["SM_CURRENT_HOST"] == "algo-2"
    assert json.loads(env["SM_CHANNELS"]) == ["eval", "train"]  # sorted, as the toolkit sorts them
    assert env["SM_CHANNEL_TRAIN"] == str(tree.channel_dir("train"))
    assert env["SM_MODEL_DIR"] == str(tree.model) and env["SM_OUTPUT_DATA_DIR"] == str(tree.output_data)
    assert env["SM_INPUT_CONFIG_DIR"] == str(tree.config) and env["SM_NUM_GPUS"] == "0"
    assert int(env["SM_NUM_CPUS"]) >= 1
    hps = json.loads(env["SM_HPS"])  # decoded values, sagemaker_* left out
    assert hps["deep_layers"] == [8, 4] and hps["batch_norm"] is False
    assert not any(k.startswith("sagemaker_") for k in hps)
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {"sagemaker_parameter_server_enabled": True}
    assert json.loads(env["SM_USER_ARGS"]) == list(plan.argv)
    assert env["SM_HP_BEHAVE"] == "ok" and env["SM_HP_DEEP_LAYERS"] == "[8,4]"
    assert json.loads(env["SM_TRAINING_ENV"])["channel_input_dirs"]["train"] == str(tree.channel_dir("train"))
    assert env["DFM_FROM_PLAN"] == "yes"  # the plan's own environment


def test_multi_path_channel_variable_keeps_the_hyphen_like_the_toolkit(tmp_path):
    plan = standin_plan(tmp_path, second_train=make_channel_data(tmp_path, "train-1", 1))
    env = container_env(plan, HostTree("algo-1", tmp_path / "a1"))
    # sagemaker_training.mapping.to_env_vars upper-cases "channel_train-1" and nothing else
    assert "SM_CHANNEL_TRAIN-1" in env and "SM_CHANNEL_TRAIN_1" not in env
    assert json.loads(env["SM_CHANNELS"]) == ["eval", "train", "train-1"]


def test_under_mpi_every_rank_sees_the_first_hosts_name(tmp_path):
    plan = standin_plan(tmp_path, kind="horovod")
    tree = HostTree("algo-2", tmp_path / "algo-2")
    env = container_env(plan, tree, current_host="algo-1")
    assert env["SM_CURRENT_HOST"] == "algo-1"  # exported by mpirun -x from the first host
    assert env["SM_MODEL_DIR"] == str(tree.model)  # but the files are the rank's own host's


TOOLKIT_ENV = """
import json, sys
from sagemaker_training import environment  # reads SAGEMAKER_BASE_DIR's tree when imported
print(json.dumps(environment.Environment().to_env_vars()))
"""


PLANS = {  # name -> (plan for tmp_path, host whose environment is compared)
    "ps-file": (lambda tmp: standin_plan(tmp, hosts=2), "algo-2"),
    "horovod-pipe": (
        lambda tmp: standin_plan(
            tmp, kind="horovod", hosts=2, per_host=2, mode="Pipe", mpi_options="--NCCL_DEBUG WARN"
        ),
        "algo-1",
    ),
    "mwms-fastfile": (lambda tmp: standin_plan(tmp, kind="multi_worker_mirrored", hosts=3, mode="FastFile"), "algo-3"),
    "single-pipe": (lambda tmp: standin_plan(tmp, kind="none", hosts=1, mode="Pipe"), "algo-1"),
    "ps-efs": (lambda tmp: standin_plan(tmp, hosts=2, efs=tmp), "algo-1"),
    "hetero-worker": (lambda tmp: standin_plan(tmp, hosts=2, ps_hosts=2), "algo-2"),
    "hetero-ps": (lambda tmp: standin_plan(tmp, hosts=2, ps_hosts=2, per_host=2), "algo-4"),
}


@pytest.mark.skipif(toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)")
@pytest.mark.parametrize("name", sorted(PLANS))
def test_environment_matches_what_the_toolkit_derives_from_the_same_tree(tmp_path, name):
    import os
    import subprocess
    import sys

    make_plan, host = PLANS[name]
    plan = make_plan(tmp_path)
    request = build_request(plan)
    tree = next(h for h in request.hosts if h.name == host)
    write_host_tree(tree, request.source_dir)
    # the environment of the host's script process (for MPI: the rank on that host) in the request
    ours = next(p for p in request.processes if p.host == host and p.role not in ("ps", "mpirun")).env
    env = {
        "PYTHONPATH": toolkit_pythonpath(),
        "SAGEMAKER_BASE_DIR": tree.root,
        "PATH": os.environ["PATH"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        # set by the TF image and by the platform
        "SAGEMAKER_TRAINING_MODULE": ours["SAGEMAKER_TRAINING_MODULE"],
        "TRAINING_JOB_NAME": plan.job_name,
    }
    result = subprocess.run(
        [sys.executable, "-c", TOOLKIT_ENV], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    # The toolkit counts the whole machine's CPUs; --local gives each simulated host its share.
    differ = {"SM_NUM_CPUS"}
    names = (set(theirs) | {n for n in ours if n.startswith("SM_")}) - differ - {"SM_TRAINING_ENV"}
    mismatched = [name for name in sorted(names) if ours.get(name) != theirs.get(name)]
    mine, toolkit = json.loads(ours["SM_TRAINING_ENV"]), json.loads(theirs["SM_TRAINING_ENV"])
    mismatched += [
        f"SM_TRAINING_ENV.{key}"
        for key in sorted((set(toolkit) | set(mine)) - {"num_cpus"})
        if mine.get(key) != toolkit.get(key)
    ]
    assert mismatched == []


@pytest.mark.skipif(toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)")
def test_the_toolkits_compared_against_are_the_versions_the_images_pin():
    assert toolkit_versions_off_pin(toolkit_pythonpath()) == []
