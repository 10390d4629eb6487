"""A local run as data (launcher/local/local_request.py): hosts, channels, and every process's command, environment,
working directory and log file, checked without starting anything. The e2e and supervision tests check that
the processes really get what the request says."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from local_plans import in_run_dir, local_run, make_channel_data, standin_plan

from launcher.errors import DfmError
from launcher.local import mpi
from launcher.local.local_processes import PS_SERVER
from launcher.local.local_request import build_request
from launcher.local.runner import write_host_tree
from launcher.local.runtime import Runtime

FAKE_RUNTIME = Runtime("/opt/runtimes/tf-2.12/bin/python", "2.12.0", "tf-2.12", False, "TF 2.12.0 (runtime tf-2.12)")


def request_for(tmp_path, cpus=tuple(range(8)), **options):
    """(plan, request) for standin_plan(**options) on FAKE_RUNTIME, on a machine of `cpus` (default 8 cores);
    the PATH has an `mpirun` (never run)."""
    plan = standin_plan(tmp_path, **options)
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    (tools / "mpirun").write_text("#!/bin/sh\nexit 1\n")
    (tools / "mpirun").chmod(0o755)
    return plan, build_request(
        in_run_dir(plan, str(tmp_path / "runs")), environ={"PATH": str(tools)}, runtime=FAKE_RUNTIME, cpus=cpus
    )


def by_label(request):
    return {p.label: p for p in request.processes}


def test_two_host_ps_job_gets_the_container_layout(tmp_path):
    plan, request = request_for(tmp_path, hosts=2)
    job = tmp_path / "runs" / "standin-job"
    processes = by_label(request)
    assert list(processes) == ["algo-1/ps", "algo-2/ps", "algo-1/master", "algo-2/worker"]
    assert [p.label for p in request.started()] == list(processes) and request.master == "algo-1/master"
    master, worker = (json.loads(processes[k].env["TF_CONFIG"]) for k in ("algo-1/master", "algo-2/worker"))
    assert master["task"] == {"type": "master", "index": 0} and worker["task"] == {"type": "worker", "index": 0}
    assert master["cluster"] == worker["cluster"] and len(master["cluster"]["ps"]) == 2
    for host, role in (("algo-1", "master"), ("algo-2", "worker")):
        script = processes[f"{host}/{role}"]
        assert script.argv == (FAKE_RUNTIME.python, "standin.py", *plan.argv)  # exactly the plan's argv
        assert script.cwd == str(job / "hosts" / host / "code") and script.role == role
        assert script.env["SAGEMAKER_BASE_DIR"] == str(job / "hosts" / host)
        assert script.log_file == str(job / "logs" / f"{host}-{role}.log")
        ps = processes[f"{host}/ps"]
        assert ps.argv == (FAKE_RUNTIME.python, str(PS_SERVER)) and ps.supervision == "ps"
        assert ps.cwd == str(job / "hosts" / host) and ps.log_file == str(job / "logs" / f"{host}-ps.log")
        ps_config = json.loads(ps.env["TF_CONFIG"])
        assert ps_config["task"] == {"type": "ps", "index": int(host[-1]) - 1}
        assert ps_config["cluster"] == master["cluster"]
        assert not any(name.startswith("SM_") for name in ps.env)  # the toolkit's ps has no script environment
        assert ps.env["DFM_FROM_PLAN"] == "yes"  # but the job's own, as the toolkit's process has it
    hosts = {h.name: {c.name: c for c in h.channels} for h in request.hosts}
    assert (
        [key for key, _ in hosts["algo-1"]["eval"].files]
        == ["part-000.tfrecord"]
        == [key for key, _ in hosts["algo-2"]["eval"].files]
    )
    train = [key for host in hosts.values() for key, _ in host["train"].files]
    assert sorted(train) == [f"part-{i:03d}.tfrecord" for i in range(5)] and len(set(train)) == 5


def test_every_process_runs_on_the_runtime_with_the_host_code_first(tmp_path):
    _, request = request_for(tmp_path, hosts=2)
    for process in request.processes:
        assert process.argv[0] == FAKE_RUNTIME.python
        assert process.env["PATH"] == f"/opt/runtimes/tf-2.12/bin:{tmp_path}/bin"  # `python` is the runtime's
        assert process.env["PYTHONUNBUFFERED"] == "1"
        if process.role != "ps":
            assert process.env["PYTHONPATH"].split(":")[0] == str(
                Path(request.job_dir) / "hosts" / process.host / "code"
            )


def test_the_launchers_pythonpath_follows_the_code_dir(tmp_path):
    plan = standin_plan(tmp_path, kind="none", hosts=1)
    request = build_request(plan, environ={"PATH": "/bin", "PYTHONPATH": "/mine"}, runtime=FAKE_RUNTIME)
    assert request.processes[0].env["PYTHONPATH"] == f"{request.hosts[0].root}/code:/mine"
    assert request.job_dir == str(tmp_path / "runs" / "standin-job")  # the spec's local.run_dir


def test_multi_worker_mirrored_every_host_a_worker(tmp_path):
    _, request = request_for(tmp_path, kind="multi_worker_mirrored", hosts=3)
    assert [p.label for p in request.processes] == ["algo-1/worker", "algo-2/worker", "algo-3/worker"]
    configs = [json.loads(p.env["TF_CONFIG"]) for p in request.processes]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert len({json.dumps(c["cluster"]) for c in configs}) == 1 and request.master == "algo-1/worker"


def test_no_distribution_runs_the_script_on_every_host_without_tf_config(tmp_path):
    _, request = request_for(tmp_path, kind="none", hosts=2, local={"master_grace_s": 7, "timeout_s": 30})
    assert [p.label for p in request.processes] == ["algo-1/train", "algo-2/train"]
    assert not any("TF_CONFIG" in p.env for p in request.processes) and request.master == "algo-1/train"
    assert (request.master_grace_s, request.timeout_s) == (7, 30)
    # one host of a parameter_server job: the toolkit runs the script alone, no ps
    _, single = request_for(tmp_path / "one", hosts=1)
    assert [p.label for p in single.processes] == ["algo-1/train"]


def test_ps_on_its_own_group_every_host_runs_the_script_and_only_workers_get_data(tmp_path):
    # the stand-in is a script of yours: it gets the ps_per_host its hyperparameters give (dfm tells only its own)
    plan, request = request_for(tmp_path, hosts=2, ps_hosts=2, train_files=5, hyperparameters={"ps_per_host": 2})
    processes = by_label(request)
    assert list(processes) == [f"algo-{i}/train" for i in range(1, 5)] and request.master == "algo-1/train"
    assert not any("TF_CONFIG" in p.env or p.role == "ps" for p in request.processes)  # the script builds it
    addresses = json.loads(processes["algo-3/train"].env["DFM_CLUSTER_ADDRESSES"])
    assert list(addresses) == [
        "algo-1:2222",
        "algo-1:2223",
        "algo-2:2223",
        "algo-3:2224",
        "algo-3:2225",
        "algo-4:2224",
        "algo-4:2225",
    ]
    assert len(set(addresses.values())) == 7 and all(a.startswith("127.0.0.1:") for a in addresses.values())
    assert {p.env["DFM_CLUSTER_ADDRESSES"] for p in request.processes} == {json.dumps(addresses)}
    hosts = {h.name: h for h in request.hosts}
    resources = hosts["algo-4"].config_files["resourceconfig.json"]
    assert (resources["current_group_name"], resources["current_instance_type"]) == ("ps", "ml.r5.large")
    assert [(g["instance_group_name"], g["hosts"]) for g in resources["instance_groups"]] == [
        ("worker", ["algo-1", "algo-2"]),
        ("ps", ["algo-3", "algo-4"]),
    ]
    # S3 channels reach the worker group only; ShardedByS3Key splits train between its two hosts
    assert hosts["algo-3"].channels == () == hosts["algo-4"].channels
    assert hosts["algo-3"].config_files["inputdataconfig.json"] == {}
    train = [
        [key for key, _ in next(c for c in hosts[h].channels if c.name == "train").files] for h in ("algo-1", "algo-2")
    ]
    assert sorted(train[0] + train[1]) == [f"part-{i:03d}.tfrecord" for i in range(5)] and all(train)
    hyperparameters = hosts["algo-1"].config_files["hyperparameters.json"]
    assert not [k for k in hyperparameters if k.endswith("_enabled")]  # no toolkit distribution


def test_mpi_ranks_land_on_their_hosts_with_the_first_hosts_environment(tmp_path):
    plan, request = request_for(tmp_path, kind="horovod", hosts=2, per_host=2, mpi_options="--NCCL_DEBUG WARN")
    processes = by_label(request)
    assert [p.label for p in request.started()] == ["mpirun"] and request.master == "mpirun"
    ranks = [p for p in request.processes if p.supervision == "rank"]
    assert processes["mpirun"].argv[0] == str(tmp_path / "bin" / "mpirun")
    assert [(p.label, p.rank) for p in ranks] == [
        ("algo-1/rank0", 0),
        ("algo-1/rank1", 1),
        ("algo-2/rank2", 2),
        ("algo-2/rank3", 3),
    ]
    program = mpi.script_command(FAKE_RUNTIME, "standin.py", list(plan.argv))
    rank_hosts = str(Path(request.job_dir) / "rank_hosts.json")
    assert processes["mpirun"].argv[-len(program) - 3 :] == (
        FAKE_RUNTIME.python,
        str(mpi.RANK_EXEC),
        rank_hosts,
        *program,
    )
    layout = request.files[rank_hosts]
    assert layout["processes_per_host"] == 2 and [h["base"] for h in layout["hosts"]] == [h.root for h in request.hosts]
    for rank in ranks:
        base = Path(request.job_dir) / "hosts" / rank.host
        assert rank.env["SAGEMAKER_BASE_DIR"] == str(base) and rank.cwd == str(base / "code")
        assert rank.env["SM_CURRENT_HOST"] == "algo-1"  # mpirun -x exports the first host's value
        assert rank.argv[rank.argv.index("--model_dir") + 1] == str(base / "model")  # rank_exec maps /opt/ml
        assert layout["hosts"][rank.rank // 2]["env"]["SAGEMAKER_BASE_DIR"] == str(base)
    # the files are each host's own: its resourceconfig names it, whatever SM_CURRENT_HOST says
    assert [h.config_files["resourceconfig.json"]["current_host"] for h in request.hosts] == ["algo-1", "algo-2"]
    # ShardedByS3Key is per host: both ranks of a host read the host's files, the hosts disjoint ones
    train = {h.name: {key for key, _ in next(c for c in h.channels if c.name == "train").files} for h in request.hosts}
    assert train["algo-1"] and not train["algo-1"] & train["algo-2"]


def horovod_runtime():
    from launcher.local import runtime

    chosen = runtime.choose_runtime(
        "2.12", root=runtime.runtimes_root(), own_python=sys.executable, own_tf=runtime.tf_version_in()
    )
    return chosen if runtime.major_minor(chosen.tf_version) == "2.12" and chosen.has_module("mpi4py") else None


@pytest.mark.skipif(
    horovod_runtime() is None, reason="runtime tf-2.12 with mpi4py not built (scripts/runtime.sh tf-2.12)"
)
def test_horovod_ranks_run_mpi4py_with_the_tf_2_12_runtimes_python(tmp_path):
    from launcher.plans.training_plan import build_plan
    from launcher.spec import load_spec
    from spec_helpers import REPO

    spec = load_spec(
        REPO / "configs" / "horovod.yaml", ["instance.count=1", "distribution.horovod.processes_per_host=2"]
    )
    request = build_request(in_run_dir(build_plan(spec, job_name="hvd"), str(tmp_path)))
    python = horovod_runtime().python
    ranks = [p for p in request.processes if p.role == "rank"]
    assert len(ranks) == 2 and all(p.argv[:4] == (python, "-m", "mpi4py", "train_horovod.py") for p in ranks)
    assert request.runtime.note == "TF 2.12.0 (runtime tf-2.12)"


def test_pipe_mode_feeds_each_host_its_share_in_key_order(tmp_path):
    _, request = request_for(tmp_path, kind="none", hosts=2, mode="Pipe")
    train = sorted((tmp_path / "data" / "train").iterdir())
    for index, host in enumerate(request.hosts):
        feeds = {c.name: c for c in host.channels}
        assert feeds["train"].feed == "pipe" and feeds["train"].mode == "Pipe"
        assert [path for _, path in feeds["train"].files] == [str(p) for p in train[index::2]]
        assert feeds["eval"].files == request.hosts[0].channels[1].files  # FullyReplicated
        assert feeds["train"].target == f"{host.root}/input/data/train"


def test_fastfile_is_linked_like_file_and_efs_is_one_shared_folder(tmp_path):
    shared = tmp_path / "efs"
    shared.mkdir()
    _, request = request_for(tmp_path, kind="none", hosts=2, mode="FastFile", efs=shared)
    for host in request.hosts:
        feeds = {c.name: c for c in host.channels}
        assert (feeds["train"].feed, feeds["train"].mode) == ("link", "FastFile")
        assert (feeds["checkpoints"].feed, feeds["checkpoints"].source) == ("mount", str(shared))
        assert host.config_files["inputdataconfig.json"]["train"]["TrainingInputMode"] == "FastFile"


def test_checkpoints_sync_per_uri_into_each_hosts_folder(tmp_path):
    _, request = request_for(tmp_path, checkpoint_s3_uri="s3://bucket/ckpt/run/", checkpoint_local_path="/opt/ml/ck")
    assert request.checkpoint_store == str(tmp_path / "runs" / "checkpoints" / "bucket_ckpt_run")
    assert [h.checkpoint_dir for h in request.hosts] == [f"{h.root}/ck" for h in request.hosts]
    _, without = request_for(tmp_path / "none")
    assert without.checkpoint_store is None and {h.checkpoint_dir for h in without.hosts} == {None}


def test_checkpoint_path_outside_opt_ml_is_refused(tmp_path):
    with pytest.raises(DfmError, match="checkpoint_local_path"):
        request_for(tmp_path, checkpoint_s3_uri="s3://bucket/ckpt/", checkpoint_local_path="/tmp/elsewhere")


def test_options_the_toolkit_cannot_read_are_refused(tmp_path):
    with pytest.raises(DfmError, match="mpi_options: .*--NCCL_DEBUG"):
        request_for(tmp_path, kind="horovod", mpi_options="-x A=1 --NCCL_DEBUG")


def test_a_channel_without_local_data_is_a_problem_the_runner_refuses(tmp_path):
    plan = standin_plan(tmp_path)
    plan = replace(
        plan,
        channels=tuple(replace(c, local_path=str(tmp_path / "gone")) if c.name == "eval" else c for c in plan.channels),
    )
    request = build_request(in_run_dir(plan, str(tmp_path / "runs")), runtime=FAKE_RUNTIME)
    assert request.problems == (f"channel 'eval': local data {tmp_path / 'gone'} does not exist",)
    assert len(request.processes) == 4  # the rest of the run is still described
    run = local_run(plan, tmp_path)
    with pytest.raises(DfmError, match="does not exist"):
        run.run()
    assert run.supervisor is None and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("content", [None, "subfolder"])
def test_an_s3_channel_with_no_files_is_refused_as_sagemaker_refuses_an_empty_prefix(tmp_path, content):
    empty = tmp_path / "empty"
    empty.mkdir()
    if content:
        (empty / content).mkdir()  # folders are no S3 objects
    plan = standin_plan(tmp_path)
    plan = replace(
        plan, channels=tuple(replace(c, local_path=str(empty)) if c.name == "train" else c for c in plan.channels)
    )
    request = build_request(in_run_dir(plan, str(tmp_path / "runs")), runtime=FAKE_RUNTIME)
    assert len(request.problems) == 1
    assert request.problems[0].startswith(f"channel 'train': {empty} holds no files")
    with pytest.raises(DfmError, match="holds no files"):
        local_run(plan, tmp_path).run()


@pytest.mark.parametrize("names", [[".keep"], [".hidden/part-0.tfrecord", "_SUCCESS"]])
def test_a_channel_of_only_files_the_bundled_scripts_skip_is_refused_like_an_empty_one(tmp_path, names):
    folder = tmp_path / "hidden"
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")
    plan = standin_plan(tmp_path)
    plan = replace(
        plan, channels=tuple(replace(c, local_path=str(folder)) if c.name == "train" else c for c in plan.channels)
    )
    assert build_request(in_run_dir(plan, str(tmp_path / "runs")), runtime=FAKE_RUNTIME).problems == ()  # own script
    bundled = replace(plan, bundled=True)
    request = build_request(in_run_dir(bundled, str(tmp_path / "runs")), runtime=FAKE_RUNTIME)
    assert request.problems == (
        f"channel 'train': {folder} holds only hidden or `_` files ({sorted(names)[0]}), which the bundled scripts "
        "skip, so it holds no data for them; point the channel at data",
    )
    with pytest.raises(DfmError, match="holds only hidden") as err:
        local_run(bundled, tmp_path).run()
    assert err.value.exit_code == 2


def test_warnings_name_idle_hosts(tmp_path):
    _, request = request_for(tmp_path, kind="none", hosts=3, train_files=2)
    assert request.warnings == ("algo-3: channel 'train' has no files on this host",)


def test_the_request_is_json_and_the_launchers_container_variables_stay_out(tmp_path):
    plan, _ = request_for(tmp_path, kind="horovod", hosts=2)
    environ = {"PATH": str(tmp_path / "bin"), "SM_HOSTS": "leak", "TF_CONFIG": "leak", "SAGEMAKER_BASE_DIR": "leak"}
    request = build_request(in_run_dir(plan, str(tmp_path / "runs")), environ=environ, runtime=FAKE_RUNTIME)
    document = json.loads(json.dumps(request.to_dict()))
    assert [p["label"] for p in document["processes"]][0] == "mpirun" and len(document["hosts"]) == 2
    assert document["runtime"]["python"] == FAKE_RUNTIME.python and "without SM_*" in document["inherits"]
    assert "leak" not in json.dumps(document)


def test_the_runner_writes_each_host_tree_as_the_request_says(tmp_path):
    _, request = request_for(tmp_path, hosts=3)
    host = request.hosts[1]
    write_host_tree(host, request.source_dir)
    root = Path(host.root)
    for folder in ("input/config", "input/data", "model", "output/data", "checkpoints"):
        assert (root / folder).is_dir()
    assert (root / "code" / "standin.py").read_text() == (tmp_path / "src" / "standin.py").read_text()
    for name, content in host.config_files.items():
        assert json.loads((root / "input" / "config" / name).read_text()) == content


def test_config_files_as_the_container_gets_them(tmp_path):
    _, request = request_for(tmp_path, hosts=3)
    config = request.hosts[1].config_files
    hps = config["hyperparameters.json"]
    assert all(isinstance(v, str) for v in hps.values())  # the SDK sends every value JSON-encoded
    assert json.loads(hps["deep_layers"]) == [8, 4] and hps["batch_norm"] == "false" and hps["behave"] == '"ok"'
    assert json.loads(hps["sagemaker_program"]) == "standin.py"
    assert json.loads(hps["sagemaker_parameter_server_enabled"]) is True
    resources = config["resourceconfig.json"]
    assert resources["current_host"] == "algo-2" and resources["hosts"] == ["algo-1", "algo-2", "algo-3"]
    channels = config["inputdataconfig.json"]
    assert channels["train"] == {
        "TrainingInputMode": "File",
        "S3DistributionType": "ShardedByS3Key",
        "RecordWrapperType": "None",
    }
    assert channels["eval"]["S3DistributionType"] == "FullyReplicated"


def test_horovod_hyperparameters_carry_the_mpi_settings(tmp_path):
    _, request = request_for(tmp_path, kind="horovod", per_host=3, mpi_options="-x FOO=1")
    hps = {k: json.loads(v) for k, v in request.hosts[0].config_files["hyperparameters.json"].items()}
    assert hps["sagemaker_mpi_enabled"] is True and hps["sagemaker_mpi_num_of_processes_per_host"] == 3
    assert hps["sagemaker_mpi_custom_mpi_options"] == "-x FOO=1"
    assert "sagemaker_parameter_server_enabled" not in hps


def test_channel_files_are_the_folders_files(tmp_path):
    more = make_channel_data(tmp_path / "more", "train-1", 3)
    _, request = request_for(tmp_path, kind="none", hosts=1, second_train=more)
    feeds = {c.name: c for c in request.hosts[0].channels}
    assert [key for key, _ in feeds["train-1"].files] == [f"part-{i:03d}.tfrecord" for i in range(3)]
    assert feeds["train-1"].source == str(more)


@pytest.mark.parametrize("flags, refused", [("fpu avx512f avx512_vnni", True), ("fpu avx512f avx512_bf16", False)])
def test_bfloat16_runs_here_only_on_a_cpu_with_bfloat16_instructions(tmp_path, flags, refused):
    """ml.c7i passes `dfm validate`; --local then checks this machine's own CPU (its /proc/cpuinfo flags)."""
    from launcher.compile import compile_spec

    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    compiled = compile_spec(
        str(Path(__file__).parents[1] / "configs" / "ps.yaml"),
        ("hyperparameters.mixed_precision=bfloat16", "instance.type=ml.c7i.4xlarge"),
    )
    assert compiled.ok, compiled.errors
    request = build_request(
        in_run_dir(compiled.plan, str(tmp_path / "runs")),
        environ={"DFM_CPUINFO": str(tmp_path / "cpuinfo")},
        runtime=FAKE_RUNTIME,
    )
    bf16 = [p for p in request.problems if "mixed_precision" in p]
    assert bf16 == (
        [
            "hyperparameters.mixed_precision: bfloat16, but this machine's CPU has no bfloat16 instructions "
            "(avx512_bf16 or amx_bf16 in /proc/cpuinfo): use auto or false for --local runs here"
        ]
        if refused
        else []
    )


def test_an_unwritable_run_dir_is_one_line_before_any_work(tmp_path):
    plan = standin_plan(tmp_path)
    (tmp_path / "runs").write_text("a file where the run folder would go")
    with pytest.raises(DfmError, match=r"cannot create the run directory .*: Not a directory; give a writable folder"):
        local_run(plan, tmp_path).run()


# ---- each simulated host owns its cores ----
def host_cpus(request):
    return {h.name: h.cpus for h in request.hosts}


def sm_num_cpus(request):
    return {p.label: p.env["SM_NUM_CPUS"] for p in request.processes if "SM_NUM_CPUS" in p.env}


def test_by_default_the_machines_cores_are_divided_among_the_hosts(tmp_path):
    _, request = request_for(tmp_path, hosts=2, cpus=(0, 1, 2, 3, 4, 5, 6, 7))
    assert host_cpus(request) == {"algo-1": (0, 1, 2, 3), "algo-2": (4, 5, 6, 7)}
    assert request.cores_per_host == 4 and not request.warnings
    assert sm_num_cpus(request) == {"algo-1/master": "4", "algo-2/worker": "4"}
    assert json.loads(by_label(request)["algo-2/worker"].env["SM_TRAINING_ENV"])["num_cpus"] == 4


def test_cores_per_host_gives_each_host_that_many_cores_of_its_own(tmp_path):
    _, request = request_for(tmp_path, hosts=3, cpus=(2, 3, 5, 7), local={"cores_per_host": 1})
    assert host_cpus(request) == {"algo-1": (2,), "algo-2": (3,), "algo-3": (5,)}  # the launcher's own cores only
    assert set(sm_num_cpus(request).values()) == {"1"} and not request.warnings
    assert json.loads(json.dumps(request.to_dict()))["hosts"][1]["cpus"] == [3]  # the request carries them


def test_hosts_needing_more_cores_than_the_machine_has_time_share_them_with_a_warning(tmp_path):
    _, request = request_for(tmp_path, hosts=3, cpus=(0, 1, 2, 3), local={"cores_per_host": 2})
    # round-robin: every host still gets as many cores as its SM_NUM_CPUS says; algo-3 shares algo-1's
    assert host_cpus(request) == {"algo-1": (0, 1), "algo-2": (2, 3), "algo-3": (0, 1)}
    assert set(sm_num_cpus(request).values()) == {"2"}
    assert (
        len(request.warnings) == 1 and "need 6 cores, this machine has 4: the hosts time-share" in request.warnings[0]
    )
    _, request = request_for(tmp_path / "big", hosts=2, cpus=(0, 1), local={"cores_per_host": 4})
    assert host_cpus(request) == {"algo-1": (0, 1), "algo-2": (0, 1)} and set(sm_num_cpus(request).values()) == {"4"}
    assert "need 8 cores, this machine has 2" in request.warnings[0]
    _, request = request_for(tmp_path / "many", kind="none", hosts=3, cpus=(0, 1))  # the default, 3 hosts on 2 cores
    assert host_cpus(request) == {"algo-1": (0,), "algo-2": (1,), "algo-3": (0,)} and request.cores_per_host == 1
    assert any("time-share" in w for w in request.warnings)


def test_without_cpu_affinity_the_hosts_are_not_confined(tmp_path):
    _, request = request_for(tmp_path, hosts=2, cpus=())
    assert host_cpus(request) == {"algo-1": (), "algo-2": ()} and "not confined" in request.warnings[0]


def test_mpi_ranks_move_onto_their_own_hosts_cores(tmp_path):
    _, request = request_for(tmp_path, kind="horovod", hosts=2, per_host=2, cpus=(0, 1, 2, 3))
    layout = request.files[str(Path(request.job_dir) / "rank_hosts.json")]
    assert [h["cpus"] for h in layout["hosts"]] == [[0, 1], [2, 3]]
    assert {p.host for p in request.started()} == {"algo-1"}  # mpirun starts on the first host's cores


def test_cores_per_host_must_be_a_positive_count(tmp_path):
    with pytest.raises(DfmError, match="cores_per_host"):
        standin_plan(tmp_path, local={"cores_per_host": 0})
