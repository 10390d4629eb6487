"""Spec -> Plan for every example config, the request the real SDK builds from it (offline), and the
contract with the bundled entry points (names, hyperparameters, argv, metric lines, source dir)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.facts import contract
from launcher.facts import conventions
from launcher.compile import compile_spec
from launcher.plans.training_plan import Plan, job_timestamp
from launcher.sagemaker_backend.estimator_arguments import estimator_kwargs
from entry_support import entrypoint_module
from spec_helpers import CONFIGS, REPO, write_spec

JOB = "deepfm-test-2026-11-21-20-00-00-000"
BUCKET = "s3://dfm-example-bucket/deepfm"  # the configs' default output when DFM_BUCKET is unset


def config_plan(name: str, job_name: str = JOB, env: dict | None = None):
    """The plan `dfm launch` builds, with the warnings the rules find for the spec."""
    return compiled_plan(REPO / "configs" / name, job_name, env=env or {})


def compiled_plan(path, job_name: str | None = JOB, env: dict | None = None):
    compiled = compile_spec(path, job_name=job_name, env=env if env is not None else {})
    assert compiled.ok, compiled.errors
    return compiled.plan


# --- plans of the example configs ------------------------------------------------------------------


def test_ps_plan():
    plan = config_plan("ps.yaml")
    kw = estimator_kwargs(plan)
    assert kw["distribution"] == {"parameter_server": {"enabled": True}}
    assert (kw["instance_type"], kw["instance_count"], kw["volume_size"]) == ("ml.c5.18xlarge", 2, 100)
    assert (kw["framework_version"], kw["py_version"], kw["input_mode"]) == ("2.21.0", "py312", "File")
    assert kw["image_uri"].endswith(":2.21.0-cpu-py312-amzn2023-sagemaker")  # SDK v2 lacks 2.21: dfm names it
    assert kw["entry_point"] == "train_ps.py" and Path(kw["source_dir"], "train_ps.py").is_file()
    assert kw["output_path"] == kw["code_location"] == BUCKET
    assert (
        kw["model_dir"] == plan.hyperparameters["model_dir"] == "/opt/ml/model"
    )  # bundled: no S3 call by the toolkit at start
    assert kw["checkpoint_s3_uri"] == plan.checkpoint_s3_uri == f"{BUCKET}/{JOB}/checkpoints"
    assert kw["checkpoint_local_path"] == "/opt/ml/checkpoints"
    assert kw["tags"] == [{"Key": "project", "Value": "dfm"}, {"Key": "team", "Value": "ads"}]
    assert {"train:loss", "train:auc", "eval:loss", "eval:auc"} <= {
        m["Name"] for m in kw["metric_definitions"]
    }  # bundled: scraped
    assert "model_dir" not in kw["hyperparameters"] and plan.hyperparameters["model_dir"] == kw["model_dir"]
    assert kw["hyperparameters"]["checkpoint_steps"] == 500 and kw["hyperparameters"]["log_steps"] == 50  # child + base
    assert not {"use_spot_instances", "subnets", "keep_alive_period_in_seconds"} & set(kw)

    train, evaluation = plan.channels
    assert (train.name, train.distribution, train.input_mode) == ("train", "ShardedByS3Key", "File")
    assert (evaluation.name, evaluation.distribution) == ("eval", "FullyReplicated")
    assert train.local_path == os.path.abspath("data/sample/train") and (
        plan.local.timeout_s,
        plan.local.master_grace_s,
    ) == (900, 60)
    assert plan.distribution.kind == "parameter_server" and plan.instance_count == 2
    assert plan.cost["max_usd"] == round(3.672 * 2 * 1.0, 2) and plan.cost["spot"] is False
    assert plan.sharded_hosts() == {"train": 2}
    assert not any("data.s3_shard" in w for w in plan.warnings)  # the offline commands' (compile.shard_warnings)
    json.dumps(dataclasses.asdict(plan))


def test_horovod_plan():
    plan = config_plan("horovod.yaml")
    kw = estimator_kwargs(plan)
    assert kw["distribution"] == {
        "mpi": {
            "enabled": True,
            "processes_per_host": 4,
            "custom_mpi_options": "-x NCCL_DEBUG=WARN -x OMPI_MCA_btl_vader_single_copy_mechanism=none",
        }
    }
    assert kw["input_mode"] == plan.input_mode == "Pipe" and kw["entry_point"] == "train_horovod.py"
    assert kw["model_dir"] == "/opt/ml/model"  # what the SDK passes to MPI jobs
    assert [c.name for c in plan.channels] == ["train", "train-1", "train-2", "train-3", "eval"]
    assert all(c.input_mode == "Pipe" for c in plan.channels)
    assert [c.distribution for c in plan.channels if c.name != "eval"] == ["ShardedByS3Key"] * 4
    assert plan.channels[3].uri == "s3://dfm-example-bucket/deepfm/split/train-3/"
    assert (plan.distribution.kind, plan.distribution.processes_per_host) == ("horovod", 4)


def test_fastfile_spot_plan():
    plan = config_plan("fastfile-spot.yaml", env={"DFM_BUCKET": "my-bucket"})
    kw = estimator_kwargs(plan)
    assert kw["use_spot_instances"] is True and (kw["max_wait"], kw["max_run"]) == (10800, 7200)
    assert kw["checkpoint_s3_uri"] == "s3://my-bucket/deepfm/checkpoints/spot/"  # as given: resubmits resume
    assert kw["input_mode"] == "FastFile" and "distribution" not in kw
    assert (kw["framework_version"], kw["py_version"]) == ("2.21.0", "py312")
    assert kw["output_path"] == "s3://my-bucket/deepfm" and plan.cost["spot"] is True
    assert plan.cost["max_usd"] == round(1.836 * 1 * 2.0, 2)


def test_efs_ps_plan():
    plan = config_plan("efs-ps.yaml", env={"DFM_EFS_ID": "fs-0abc1234"})
    kw = estimator_kwargs(plan)
    (checkpoints,) = [c for c in plan.channels if c.name == "checkpoints"]
    assert (checkpoints.kind, checkpoints.file_system_id, checkpoints.uri, checkpoints.access_mode) == (
        "efs",
        "fs-0abc1234",
        "/dfm/checkpoints",
        "rw",
    )
    assert kw["input_mode"] == "File" and "checkpoint_s3_uri" not in kw and plan.checkpoint_s3_uri is None
    assert (
        kw["hyperparameters"]["checkpoint_dir"]
        == plan.hyperparameters["checkpoint_dir"]
        == f"/opt/ml/input/data/checkpoints/{JOB}"
    )
    assert kw["subnets"] == ["subnet-0123456789abcdef0"] and kw["security_group_ids"] == ["sg-0123456789abcdef0"]
    assert kw["keep_alive_period_in_seconds"] == 600
    assert plan.cost["max_usd"] == round(0.922 * 3 * (1 + 600 / 3600), 2)


def test_default_job_name_is_timestamped_and_valid(tmp_path):
    plan = compiled_plan(write_spec(tmp_path, {"name": "d" * 49}), job_name=None)  # the longest base name
    assert len(plan.job_name) == 63 and re.fullmatch(r"d{49}-\d{6}-\d{6}", plan.job_name)
    assert re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", plan.job_name)
    assert job_timestamp(0.25) == "700101-000000"


def test_user_script_plan_resolves_paths_from_the_spec_file(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("")
    path = write_spec(tmp_path, {"entry_point": "train.py", "source_dir": "src", "hyperparameters": {"flag": False}})
    monkeypatch.chdir("/")
    plan = compiled_plan(path)
    assert (plan.entry_point, plan.source_dir) == ("train.py", str(tmp_path / "src"))
    kwargs = estimator_kwargs(plan)
    assert kwargs["hyperparameters"] == {"flag": False} and "metric_definitions" not in kwargs and not plan.bundled
    assert "--flag" in plan.argv and plan.argv[plan.argv.index("--flag") + 1] == "False"

    single = write_spec(tmp_path, {"entry_point": "src/train.py"}, name="single.yaml")
    plan = compiled_plan(single)
    assert (plan.entry_point, plan.source_dir) == ("train.py", str(tmp_path / "src"))


@pytest.mark.parametrize("distribution", [None, "parameter_server"])
def test_bundled_scripts_get_a_local_model_dir_and_user_scripts_the_sdks_default(
    tmp_path, no_aws_env, no_network, distribution
):
    # The toolkit calls S3 GetBucketLocation on an s3:// model_dir before the script starts (non-MPI jobs).
    from launcher import sagemaker_backend

    (tmp_path / "train.py").write_text("")
    changes = {"distribution": distribution} if distribution else {}
    bundled = compiled_plan(write_spec(tmp_path, changes, name="bundled.yaml"))
    own = compiled_plan(write_spec(tmp_path, {**changes, "entry_point": "train.py"}, name="own.yaml"))
    sent = {
        name: json.loads(sagemaker_backend.dry_run(plan)["request"]["HyperParameters"]["model_dir"])
        for name, plan in (("bundled", bundled), ("own", own))
    }
    assert sent["bundled"] == bundled.hyperparameters["model_dir"] == "/opt/ml/model"
    assert "model_dir" not in estimator_kwargs(own)  # the SDK picks it, as it would without dfm
    assert sent["own"] == own.hyperparameters["model_dir"] == "s3://dfm-bucket/out/" + JOB + "/model"
    assert own.argv[own.argv.index("--model_dir") + 1] == sent["own"]


def test_file_system_training_channel_makes_the_job_file_mode(tmp_path):
    efs = {"file_system_id": "fs-0123456789abcdef0", "directory_path": "/data", "type": "FSxLustre"}
    vpc = {"subnets": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]}
    path = write_spec(tmp_path, {"data": {"mode": "FastFile", "train": efs, "eval": "s3://dfm-bucket/e/"}, "vpc": vpc})
    plan = compiled_plan(path)
    train, evaluation = plan.channels
    assert (train.kind, train.access_mode, plan.input_mode) == ("fsx", "ro", "File")
    assert evaluation.input_mode == "FastFile"  # S3 channels keep their own mode


# --- a plan as plain data ----------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_configs_plan_round_trips_through_plain_json(config):
    plan = compiled_plan(config)
    data = json.loads(json.dumps(plan.to_dict()))  # plain JSON: no default= needed
    assert Plan.from_dict(data) == plan
    assert data["instance_groups"][0]["instance_type"] == plan.instance_type  # typed values as plain fields


def test_a_value_holding_a_plan_round_trips_too():
    """The tuning plan (a search over a training Plan), as `dfm tune --local` can store it for --resume."""
    from launcher.plans.training_plan import from_data, to_data
    from launcher.plans.tuning_plan import TuningPlan, build_tuning_plan
    from launcher.rules.tuning_objective import objective_schedule

    compiled = compile_spec(REPO / "configs" / "tune-ps.yaml", job_name=JOB, env={})
    tplan = build_tuning_plan(
        compiled.spec, compiled.plan, schedule=objective_schedule(compiled.spec), name="tune-ps-261125-000000"
    )
    assert from_data(TuningPlan, json.loads(json.dumps(to_data(tplan)))) == tplan


def test_a_stored_plan_that_does_not_fit_is_named():
    data = compiled_plan(REPO / "configs" / "ps.yaml").to_dict()
    data["instance_groups"][0]["count"] = "two"
    with pytest.raises(ValueError, match=r"instance_groups\.0\.count"):
        Plan.from_dict(data)


def test_a_local_run_stores_the_plan_it_ran(tmp_path):
    from local_plans import local_run, standin_plan

    from launcher.local.local_request import PLAN_FILE, stored_plan

    run = local_run(standin_plan(tmp_path, hosts=2), tmp_path)
    run.prepare()
    job_dir = Path(run.request.job_dir)
    ran = stored_plan(job_dir)
    assert ran.job_name == "standin-job" and ran.local.run_dir == str(tmp_path / "runs")
    assert ran.to_dict() == json.loads((job_dir / PLAN_FILE).read_text())
    assert ran == Plan.from_dict(run.request.files[str(job_dir / PLAN_FILE)])


# --- the request the SDK builds from each plan (offline) --------------------------------------------


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_request_for_each_config(config, no_aws_env, no_network):
    from launcher import sagemaker_backend

    plan = compiled_plan(config)
    request = sagemaker_backend.dry_run(plan)["request"]
    assert no_network == []
    assert request["TrainingJobName"] == JOB and request["RoleArn"] == plan.role
    assert request["AlgorithmSpecification"]["TrainingInputMode"] == plan.input_mode
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    assert list(channels) == [c.name for c in plan.channels]
    for channel in plan.channels:
        source = channels[channel.name]["DataSource"]
        if channel.kind == "s3":
            assert source["S3DataSource"]["S3DataDistributionType"] == channel.distribution
            assert source["S3DataSource"].get("InstanceGroupNames") == (list(channel.instance_groups or []) or None)
            assert channels[channel.name]["InputMode"] == channel.input_mode
        else:
            assert source["FileSystemDataSource"]["FileSystemAccessMode"] == channel.access_mode
    sent = {k: json.loads(v) for k, v in request["HyperParameters"].items()}
    assert {k: v for k, v in sent.items() if not k.startswith("sagemaker_")} == json.loads(
        json.dumps(plan.hyperparameters)
    )
    resources = request["ResourceConfig"]
    if len(plan.instance_groups) > 1:
        assert resources["InstanceGroups"] == [g.request() for g in plan.instance_groups]
    else:
        assert (resources["InstanceType"], resources["InstanceCount"]) == (plan.instance_type, plan.instance_count)
    assert request.get("CheckpointConfig", {}).get("S3Uri") == plan.checkpoint_s3_uri
    assert request.get("EnableManagedSpotTraining", False) == (plan.spot_max_wait is not None)
    assert request["StoppingCondition"].get("MaxWaitTimeInSeconds") == plan.spot_max_wait
    assert ("VpcConfig" in request) == (plan.vpc is not None)
    assert resources.get("KeepAlivePeriodInSeconds") == (plan.warm_pool_seconds or None)
    assert [m["Name"] for m in request["AlgorithmSpecification"]["MetricDefinitions"]] == [
        m["Name"] for m in conventions.METRIC_DEFINITIONS
    ]


# --- the contract with the bundled entry points ----------------------------------------------------


def test_render_argv_follows_the_container_toolkit():
    argv = conventions.render_argv(
        {
            "model_dir": "/opt/ml/model",
            "batch_size": 25,
            "b": True,
            "layers": [400, 400],
            "opts": {"y": 2, "x": 1},
            "none": None,
            "lr": 1e-05,
            "sagemaker_program": "train.py",
        }
    )
    assert argv == [
        "-b",
        "True",
        "--batch_size",
        "25",
        "--layers",
        "[400, 400]",
        "--lr",
        "1e-05",
        "--model_dir",
        "/opt/ml/model",
        "--none",
        "",
        "--opts",
        "x=1,y=2",
    ]


def test_argv_parses_back_in_the_bundled_scripts():
    hparams = entrypoint_module("deepfm_hparams")
    values = {
        "batch_norm": False,
        "scale_lr": True,
        "deep_layers": [200, 100],
        "l2_reg": 1e-05,
        "optimizer": "adam",
        "s3_shard": False,
        "epochs": 3,
        "kmp_affinity": "granularity=fine,compact,1,0",
        "model_dir": "s3://b/j/model",
    }
    parsed = vars(hparams.parse_hyperparameters(conventions.render_argv(values)))
    expected = {**values, "s3_shard": "false"}
    assert {k: parsed[k] for k in values} == expected


def test_rules_read_the_hyperparameters_of_the_shipped_scripts():
    hparams = contract.bundled_hparams()
    assert Path(hparams.__file__).parent == Path(contract.bundled_source_dir())
    assert "embedding_size" in hparams.DEFAULTS and "optimizer" in hparams.CHOICES
    for script in (e.script for e in contract.BUNDLED_ENTRY_POINTS.values()):
        assert (REPO / "entrypoints" / script).is_file()


def test_metric_definitions_match_the_entry_points_lines():
    runtime = entrypoint_module("deepfm_log")
    train = runtime.format_metric("train", 1200, 0.45125, 0.7891, 15234.5)
    evaluation = runtime.format_metric("eval", 1200, 0.46, 0.78)
    found = {}
    for definition in conventions.METRIC_DEFINITIONS:
        for line in (train, evaluation):
            match = re.search(definition["Regex"], line)
            if match:
                found.setdefault(definition["Name"], float(match.group(1)))
    assert found == {
        "train:loss": 0.45125,
        "train:auc": 0.7891,
        "train:examples_per_sec": 15234.5,
        "train:step": 1200,
        "eval:loss": 0.46,
        "eval:auc": 0.78,
    }
    assert all(len(d["Regex"]) <= 500 and re.compile(d["Regex"]).groups == 1 for d in conventions.METRIC_DEFINITIONS)


def test_bundled_source_dir_in_a_checkout():
    assert Path(contract.bundled_source_dir()) == REPO / "entrypoints"


def test_bundled_source_dir_in_an_installed_layout(tmp_path):
    """As a wheel installs it: launcher/_bundled/ holds the scripts and no entrypoints/ exists."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "launcher", site / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "entrypoints", site / "launcher" / "_bundled", ignore=shutil.ignore_patterns("__pycache__"))
    code = "import launcher.facts.contract as c; print(c.bundled_source_dir())"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={"PYTHONPATH": str(site)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(site / "launcher" / "_bundled")


def test_the_entry_points_copies_of_the_conventions_agree():
    """The entry points never import the launcher: their own channel names and container paths must equal
    launcher.facts.conventions' (the metric line format is pinned by the test above)."""
    from types import SimpleNamespace

    inputs = entrypoint_module("deepfm_input")
    container_env = entrypoint_module("deepfm_container")
    checkpoints = entrypoint_module("deepfm_checkpoint")
    assert inputs.EVAL_CHANNEL == conventions.EVAL_CHANNEL
    names = conventions.training_channel_names(12)
    assert [inputs.train_channel_index(name) for name in names] == list(range(12))
    assert inputs.train_channel_index(conventions.EVAL_CHANNEL) is None
    assert inputs.train_channel_index(conventions.CHECKPOINT_CHANNEL) is None
    config = inputs.InputConfig(field_size=1, batch_size=1)
    assert (config.data_dir, config.config_dir, config.pipe_state_dir) == (
        conventions.CONTAINER_DATA_DIR,
        conventions.CONTAINER_CONFIG_DIR,
        conventions.CONTAINER_PIPE_STATE_DIR,
    )
    container = container_env.load_env({})
    assert (container.base_dir, container.model_dir) == (
        conventions.CONTAINER_BASE_DIR,
        conventions.CONTAINER_MODEL_DIR,
    )
    no_dirs = SimpleNamespace(checkpoint_dir=None, model_dir=None)
    assert checkpoints.checkpoint_dir(no_dirs, container) == conventions.CONTAINER_CHECKPOINT_DIR
    assert (
        entrypoint_module("deepfm_log")
        .format_metric("train", 1, 0.5, 0.5, 1.0)
        .startswith(conventions.METRIC_LINE_PREFIX + " train ")
    )


def criteo_raw_with_counts(tmp_path, counts: dict):
    """criteo-raw.yaml with every count column's entry replaced by `counts` -> (spec path, features section).
    The whole document is written: extending criteo-raw.yaml would merge its boundaries into the entries."""
    import copy

    import yaml

    document = yaml.safe_load((REPO / "configs" / "criteo-raw.yaml").read_text())
    section = document["features"]
    # a copy per column: a shared object would be dumped as a YAML alias, which specs refuse
    section["numeric"] = {name: copy.deepcopy(counts) for name in section["numeric"]}
    path = tmp_path / "criteo-raw-variant.yaml"
    path.write_text(yaml.safe_dump({**document, "extends": str(REPO / "configs" / document["extends"])}))
    return path, section


def short_features_spec(tmp_path):
    """The counts as log1p values: a section short enough for a hyperparameter."""
    return criteo_raw_with_counts(tmp_path, {"transform": "log1p"})


def test_criteo_raw_plan_passes_features_to_the_scripts_as_they_parse_it(tmp_path):
    """A short `features:` reaches the bundled scripts as one compact-JSON hyperparameter, which
    their own parser turns into the layout's sizes."""
    path, section = short_features_spec(tmp_path)
    compiled = compile_spec(path, job_name=JOB, env={})
    assert not compiled.errors, compiled.errors
    plan = compiled.plan
    kw = estimator_kwargs(plan)
    assert json.loads(kw["hyperparameters"]["features"]) == section
    argv = list(plan.argv)
    hparams = entrypoint_module("deepfm_hparams")
    sys.path.insert(0, str(REPO / "entrypoints"))
    try:
        hp = hparams.parse_hyperparameters([a for a in argv])
    finally:
        sys.path.remove(str(REPO / "entrypoints"))
    assert hp.field_size == 13 + 26 + 1  # one embedding per field, the bag's 20 slots pooled
    assert hp.feature_size == 13 * 2 + 26 * (1 + 10000) + (1 + 2000)
    assert [f.name for f in hp.feature_spec.multi_hot] == ["recent_cats"]


def big_features_spec(tmp_path):
    """The counts bucketized at 60 boundaries each: over 2500 characters of JSON."""
    return criteo_raw_with_counts(
        tmp_path, {"transform": "bucketize", "boundaries": [round(1.25**k, 3) for k in range(60)]}
    )


def test_a_features_section_too_long_for_a_hyperparameter_ships_as_a_file(tmp_path, monkeypatch):
    path, section = big_features_spec(tmp_path)
    compiled = compile_spec(path, job_name=JOB, env={})
    assert not compiled.errors, compiled.errors
    plan = compiled.plan
    assert len(json.dumps(contract.features_hyperparameter(section))) > 2500
    assert plan.hyperparameters["features"] == "@" + contract.FEATURES_FILE
    assert json.loads(plan.source_files[contract.FEATURES_FILE]) == section
    # the bundled parser reads it beside itself, as in the container's code dir
    code = tmp_path / "code"
    shutil.copytree(REPO / "entrypoints", code, ignore=shutil.ignore_patterns("__pycache__"))
    (code / contract.FEATURES_FILE).write_text(plan.source_files[contract.FEATURES_FILE])
    probe = (
        "import json, sys\nfrom deepfm_hparams import parse_hyperparameters\n"
        "hp = parse_hyperparameters(sys.argv[1:])\nprint(json.dumps([hp.field_size, hp.feature_size]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *plan.argv],
        cwd=tmp_path,
        env={"PYTHONPATH": str(code)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == [13 + 26 + 1, 13 * 62 + 26 * (1 + 10000) + (1 + 2000)]
    (code / contract.FEATURES_FILE).unlink()
    missing = subprocess.run(
        [sys.executable, "-c", probe, *plan.argv],
        cwd=tmp_path,
        env={"PYTHONPATH": str(code)},
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0
    assert (
        f"argument --features: cannot read {code / contract.FEATURES_FILE}: No such file or directory" in missing.stderr
    )


def test_a_short_features_section_stays_a_hyperparameter(tmp_path):
    plan = compile_spec(short_features_spec(tmp_path)[0], job_name=JOB, env={}).plan
    assert plan.source_files == {} and plan.hyperparameters["features"].startswith("{")


def test_criteo_raw_ships_its_bucketized_section_as_a_file():
    plan = config_plan("criteo-raw.yaml")
    assert plan.hyperparameters["features"] == "@" + contract.FEATURES_FILE
    assert json.loads(plan.source_files[contract.FEATURES_FILE])["numeric"]["i1"]["transform"] == "bucketize"


def test_an_error_line_names_what_went_wrong_not_the_graph_trace():
    error_line = entrypoint_module("deepfm_log").error_line
    graph = (
        "Graph execution error:\n\nDetected at node 'x' defined at (most recent call last):\n  File \"a.py\"\n"
        "assertion failed: [bad row (tsv, 3 columns expected): ] [0\\ttoo\\tfew]\n\t [[{{node assert}}]]"
    )
    assert error_line(graph) == "[bad row (tsv, 3 columns expected): ] [0\\ttoo\\tfew]"
    assert error_line("{{function_node f}} assertion failed: [bad row] [x]") == "[bad row] [x]"
    assert error_line("Graph execution error:\n\nsome op failed: reason") == "some op failed: reason"
    assert error_line("plain eager message\nmore") == "plain eager message"


def test_every_job_kind_names_its_jobs_with_the_same_timestamp():
    import datetime as dt
    from types import SimpleNamespace

    from launcher.plans.tuning_plan import MAX_TUNING_JOB_NAME, tuning_job_name
    from launcher.plans import prepare_plan

    now = dt.datetime(2026, 11, 27, 1, 2, 3, tzinfo=dt.timezone.utc)
    spec = SimpleNamespace(name="deepfm", tune=SimpleNamespace(name="t" * 18))
    stamp = job_timestamp(now.timestamp())
    assert stamp == "261127-010203"
    assert tuning_job_name(spec, now.timestamp()) == f"{'t' * 18}-{stamp}"
    assert len(tuning_job_name(spec, now.timestamp())) == MAX_TUNING_JOB_NAME
    assert prepare_plan.job_name(spec, now.timestamp()) == f"deepfm-prep-{stamp}"
