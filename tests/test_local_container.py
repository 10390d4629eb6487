"""The simulated host: /opt/ml-like tree, config files, SM_* environment and argv, for a Plan."""

import json

import pytest

from local_plans import standin_plan, toolkit_pythonpath, toolkit_versions_off_pin

from launcher.local.container import build_host_tree, container_env, host_names


def test_tree_and_config_files_as_the_container_writes_them(tmp_path):
    plan = standin_plan(tmp_path, hosts=3)
    tree = build_host_tree(plan, tmp_path / "hosts" / "algo-2", "algo-2")
    for folder in (tree.config, tree.data, tree.model, tree.output_data, tree.checkpoints):
        assert folder.is_dir()
    assert (tree.code / "standin.py").read_text() == (tmp_path / "src" / "standin.py").read_text()

    hps = json.loads((tree.config / "hyperparameters.json").read_text())
    assert all(isinstance(v, str) for v in hps.values())  # the SDK sends every value JSON-encoded
    assert json.loads(hps["deep_layers"]) == [8, 4] and hps["batch_norm"] == "false" and hps["behave"] == '"ok"'
    assert json.loads(hps["sagemaker_program"]) == "standin.py"
    assert json.loads(hps["sagemaker_parameter_server_enabled"]) is True

    resources = json.loads((tree.config / "resourceconfig.json").read_text())
    assert resources["current_host"] == "algo-2" and resources["hosts"] == ["algo-1", "algo-2", "algo-3"]
    channels = json.loads((tree.config / "inputdataconfig.json").read_text())
    assert channels["train"] == {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key",
                                 "RecordWrapperType": "None"}
    assert channels["eval"]["S3DistributionType"] == "FullyReplicated"


def test_horovod_hyperparameters_carry_the_mpi_settings(tmp_path):
    plan = standin_plan(tmp_path, kind="horovod", per_host=3, mpi_options="-x FOO=1")
    tree = build_host_tree(plan, tmp_path / "h", "algo-1")
    hps = {k: json.loads(v) for k, v in json.loads((tree.config / "hyperparameters.json").read_text()).items()}
    assert hps["sagemaker_mpi_enabled"] is True and hps["sagemaker_mpi_num_of_processes_per_host"] == 3
    assert hps["sagemaker_mpi_custom_mpi_options"] == "-x FOO=1"
    assert "sagemaker_parameter_server_enabled" not in hps


def test_environment_points_into_the_host_tree(tmp_path):
    plan = standin_plan(tmp_path, hosts=2, mode="Pipe")
    tree = build_host_tree(plan, tmp_path / "algo-2", "algo-2")
    env = container_env(plan, tree)
    assert env["SAGEMAKER_BASE_DIR"] == str(tree.base)
    assert json.loads(env["SM_HOSTS"]) == host_names(2) and env["SM_CURRENT_HOST"] == "algo-2"
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
    from dataclasses import replace

    from launcher.plan import Channel

    plan = standin_plan(tmp_path)
    plan = replace(plan, channels=plan.channels + (Channel("train-1", "s3://b/t1/", local_path=str(tmp_path)),))
    env = container_env(plan, build_host_tree(plan, tmp_path / "a1", "algo-1"))
    # sagemaker_training.mapping.to_env_vars upper-cases "channel_train-1" and nothing else
    assert "SM_CHANNEL_TRAIN-1" in env and "SM_CHANNEL_TRAIN_1" not in env
    assert json.loads(env["SM_CHANNELS"]) == ["eval", "train", "train-1"]


def test_under_mpi_every_rank_sees_the_first_hosts_name(tmp_path):
    plan = standin_plan(tmp_path, kind="horovod")
    tree = build_host_tree(plan, tmp_path / "algo-2", "algo-2")
    env = container_env(plan, tree, current_host="algo-1")
    assert env["SM_CURRENT_HOST"] == "algo-1"  # exported by mpirun -x from the first host
    assert env["SM_MODEL_DIR"] == str(tree.model)  # but the files are the rank's own host's
    assert json.loads((tree.config / "resourceconfig.json").read_text())["current_host"] == "algo-2"


TOOLKIT_ENV = """
import json, sys
from sagemaker_training import environment  # reads SAGEMAKER_BASE_DIR's tree when imported
print(json.dumps(environment.Environment().to_env_vars()))
"""


def _with_efs_channel(plan, folder):
    from dataclasses import replace

    from launcher.plan import Channel

    return replace(plan, channels=plan.channels + (Channel("checkpoints", "/efs/ckpt", kind="efs",
                                                           file_system_id="fs-1", local_path=str(folder)),))


PLANS = {  # name -> (plan for tmp_path, host whose environment is compared)
    "ps-file": (lambda tmp: standin_plan(tmp, hosts=2), "algo-2"),
    "horovod-pipe": (lambda tmp: standin_plan(tmp, kind="horovod", hosts=2, per_host=2, mode="Pipe",
                                              mpi_options="--NCCL_DEBUG WARN"), "algo-1"),
    "mwms-fastfile": (lambda tmp: standin_plan(tmp, kind="multi_worker_mirrored", hosts=3, mode="FastFile"), "algo-3"),
    "single-pipe": (lambda tmp: standin_plan(tmp, kind="none", hosts=1, mode="Pipe"), "algo-1"),
    "ps-efs": (lambda tmp: _with_efs_channel(standin_plan(tmp, hosts=2), tmp), "algo-1"),
}


@pytest.mark.skipif(toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)")
@pytest.mark.parametrize("name", sorted(PLANS))
def test_environment_matches_what_the_toolkit_derives_from_the_same_tree(tmp_path, name):
    import os
    import subprocess
    import sys

    make_plan, host = PLANS[name]
    plan = make_plan(tmp_path)
    tree = build_host_tree(plan, tmp_path / host, host)
    ours = container_env(plan, tree)
    env = {"PYTHONPATH": toolkit_pythonpath(), "SAGEMAKER_BASE_DIR": str(tree.base), "PATH": os.environ["PATH"],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           # set by the TF image and by the platform
           "SAGEMAKER_TRAINING_MODULE": ours["SAGEMAKER_TRAINING_MODULE"], "TRAINING_JOB_NAME": plan.job_name}
    result = subprocess.run([sys.executable, "-c", TOOLKIT_ENV], capture_output=True, text=True, env=env,
                            cwd=tmp_path, check=True)
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    # The toolkit counts the whole machine's CPUs; --local gives each simulated host its share.
    differ = {"SM_NUM_CPUS"}
    names = (set(theirs) | {n for n in ours if n.startswith("SM_")}) - differ - {"SM_TRAINING_ENV"}
    mismatched = [name for name in sorted(names) if ours.get(name) != theirs.get(name)]
    mine, toolkit = json.loads(ours["SM_TRAINING_ENV"]), json.loads(theirs["SM_TRAINING_ENV"])
    mismatched += [f"SM_TRAINING_ENV.{key}" for key in sorted((set(toolkit) | set(mine)) - {"num_cpus"})
                   if mine.get(key) != toolkit.get(key)]
    assert mismatched == []


@pytest.mark.skipif(toolkit_pythonpath() is None, reason="SageMaker toolkits not installed (DFM_SAGEMAKER_TOOLKIT)")
def test_the_toolkits_compared_against_are_the_versions_the_images_pin():
    assert toolkit_versions_off_pin(toolkit_pythonpath()) == []
