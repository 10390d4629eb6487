"""`dfm data prepare` without Spark: the prepare: section and its rules, the layout against the bundled scripts'
shard table, the CreateProcessingJob request the real PySparkProcessor builds (botocore-validated, offline), and
the processing-job commands against moto."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from prepare_support import write_spec

from launcher.compile import compile_spec
from launcher.plans.prepare_plan import build_prepare_plan
from launcher.data import prepare_job
from launcher.spec import load_spec

PREPARE = {
    "input": {"uri": "s3://dfm-test-bucket/clicks/", "format": "libsvm"},
    "eval_fraction": 0.05,
    "balance": {"negative_rate": 0.25},
    "instance": {"type": "ml.m5.4xlarge", "count": 3},
}
RAW = {"format": "tfrecord", "label": "y", "numeric": {"n": {}}, "categorical": {"c": {"hash_buckets": 16}}}


def errors_of(tmp_path, prepare=PREPARE, **changes) -> list[str]:
    return list(compile_spec(str(write_spec(tmp_path, prepare, **changes))).errors)


def test_a_prepare_section_compiles_and_sets_the_export_calibration(tmp_path):
    compiled = compile_spec(str(write_spec(tmp_path, PREPARE)))
    assert compiled.ok, compiled.errors
    assert compiled.plan.hyperparameters["negative_rate"] == 0.25
    assert compile_spec("configs/prepare-ps.yaml").ok


@pytest.mark.parametrize(
    "prepare, changes, words",
    [
        ({**PREPARE, "eval": {"uri": "s3://dfm-test-bucket/e/"}}, {}, "either eval_fraction or eval"),
        ({**PREPARE, "balance": {"negative_rate": 0}}, {}, "greater than 0"),
        ({**PREPARE, "instance": {"type": "ml.m5.4xlarge", "count": 101}}, {}, "less than or equal to 100"),
        ({**PREPARE, "spark": {"version": "4.0"}}, {}, "3.5"),
        (PREPARE, {"features": RAW}, "drop features:"),
        ({**PREPARE, "input": {"uri": "s3://dfm-test-bucket/c/", "format": "tsv"}}, {"features": RAW}, "needs columns"),
        (
            {**PREPARE, "input": {"uri": "s3://dfm-test-bucket/c/", "format": "csv", "columns": ["y", "n"]}},
            {"features": RAW},
            "c not among the columns",
        ),
        (
            {**PREPARE, "input": {"uri": "s3://dfm-test-bucket/c/", "format": "parquet"}},
            {},
            "features.format: tfrecord",
        ),
        (PREPARE, {"hyperparameters": {"negative_rate": 0.5}}, "set by prepare.balance"),
    ],
)
def test_prepare_mistakes_are_refused_with_the_field(tmp_path, prepare, changes, words):
    found = errors_of(tmp_path, prepare, **changes)
    assert any(words in line for line in found), found
    assert all(":" in line.split(" ")[0] for line in found)  # file:line: first


def test_eval_needs_a_destination(tmp_path):
    path = write_spec(tmp_path, PREPARE)
    found = list(compile_spec(str(path), ["data.eval=null"]).errors)
    assert any("give data.eval" in line for line in found), found


def shard_for():
    import entry_support  # noqa: F401  (entrypoints/ on sys.path)

    tf = pytest.importorskip("tensorflow")
    del tf
    import deepfm_input

    return deepfm_input.shard_for


@pytest.mark.parametrize(
    "count, processes, multi, s3_shard",
    [
        (1, 1, 1, False),
        (2, 1, 1, True),
        (2, 4, 1, True),
        (3, 2, 1, False),
        (2, 2, 4, True),
        (2, 2, 2, False),
        (4, 8, 8, True),
    ],
)
def test_layout_gives_every_worker_files_by_the_scripts_own_shard_table(tmp_path, count, processes, multi, s3_shard):
    train = [f"s3://dfm-test-bucket/t{k}/" for k in range(multi)] if multi > 1 else None
    spec = load_spec(write_spec(tmp_path, PREPARE, count=count, processes=processes, train=train, s3_shard=s3_shard))
    layout = prepare_job.prepared_layout(spec)
    fit = prepare_job.fit(layout, s3_shard, shard_for())
    assert fit.min_files_per_worker == fit.max_files_per_worker >= 1  # nobody idle, nobody with more
    assert prepare_job.shard_table()(count, count - 1, processes, processes - 1, multi > 1, s3_shard) == shard_for()(
        count, count - 1, processes, processes - 1, multi > 1, s3_shard
    )
    job = prepare_job.job_description(spec, local=False)
    assert len(job["train_paths"]) == len(set(job["train_paths"])) == layout.channel_count * fit.files_per_channel
    assert len(job["eval_paths"]) == count * processes * layout.files_per_worker
    assert len(job["train_paths"]) >= prepare_job.cluster_vcpus(spec)  # files_per_worker auto: a write task per vCPU
    assert not compile_spec(str(tmp_path / "prep.yaml")).errors


def test_a_layout_that_would_idle_workers_is_caught_offline(tmp_path):
    train = [f"s3://dfm-test-bucket/t{k}/" for k in range(3)]  # 3 channels for 2 ranks per host
    found = errors_of(tmp_path, count=2, processes=2, train=train)
    assert any("prepare.files_per_worker" in line and "multiple of workers" in line for line in found), found


def test_prepared_data_settles_the_launch_time_file_count_warning(tmp_path):
    from launcher.compile import shard_warnings

    prepared = compile_spec(str(write_spec(tmp_path / "a", PREPARE, count=2, processes=2)))
    assert prepared.ok and not shard_warnings(prepared.spec, prepared.plan)
    path = write_spec(tmp_path / "b", PREPARE, count=2, processes=2)
    plain = compile_spec(str(path), ["prepare=null", "hyperparameters.negative_rate=0.5"])
    assert any("ShardedByS3Key" in w for w in shard_warnings(plain.spec, plain.plan))
    assert plain.plan.hyperparameters["negative_rate"] == 0.5


# ---------------------------------------------------------------------------------------------- SageMaker
def test_dry_run_is_the_pyspark_processors_request_validated_offline(tmp_path, no_aws_env, no_network):
    from launcher.sagemaker_backend import processing

    spec = load_spec(write_spec(tmp_path, PREPARE, count=2, processes=2))
    result = processing.build(build_prepare_plan(spec, "prep-20261124-000000")).document()
    request = result["request"]
    assert request["ProcessingResources"]["ClusterConfig"] == {
        "InstanceType": "ml.m5.4xlarge",
        "InstanceCount": 3,
        "VolumeSizeInGB": 30,
    }
    assert request["AppSpecification"]["ImageUri"].endswith("/sagemaker-spark-processing:3.5-cpu-py312-v1.3")
    entry = request["AppSpecification"]["ContainerEntrypoint"]
    assert entry[0] == "smspark-submit" and entry[-1].endswith("/dfm_prepare.py") and "--py-files" in entry
    job_uri = request["AppSpecification"]["ContainerArguments"][1]
    outputs = {o["OutputName"]: o["S3Output"] for o in request["ProcessingOutputConfig"]["Outputs"]}
    assert outputs["train"] == {
        "S3Uri": "s3://dfm-test-bucket/prepared/train/",
        "LocalPath": "/opt/ml/processing/output/train",
        "S3UploadMode": "EndOfJob",
    }
    assert set(outputs) == {"train", "eval", "report"}
    inputs = {i["InputName"]: i["S3Input"]["S3Uri"] for i in request["ProcessingInputs"]}
    assert set(inputs) == {"code", "conf", "py-files"}
    assert set(result["uploads"]) >= {job_uri, inputs["code"]} and any(
        "google_crc32c.zip" in u for u in result["uploads"]
    )
    built = processing.build(build_prepare_plan(spec, "prep-20261124-000000"))
    job = json.loads(built.uploads[job_uri])
    assert job["train_paths"][0] == "/opt/ml/processing/output/train/part-00000.tfrecord"
    # files_per_worker auto: 3 x 16 vCPUs, 2 hosts x 2 workers -> 12 files per worker, a write task per vCPU
    assert len(job["train_paths"]) == len(job["eval_paths"]) == 48
    assert result["write"] == {"train_files": 48, "eval_files": 48, "files_per_worker": 12, "cluster_vcpus": 48}
    conf = json.loads(next(body for uri, body in built.uploads.items() if uri.endswith("configuration.json")))
    assert conf[0]["Classification"] == "spark-defaults"
    assert not no_network


def test_the_validator_refuses_what_the_service_would(tmp_path, no_aws_env):
    import boto3

    from launcher.errors import DfmError
    from launcher.sagemaker_backend import processing

    spec = load_spec(write_spec(tmp_path, PREPARE))
    request = processing.build(build_prepare_plan(spec, "prep-1")).request
    client = boto3.client("sagemaker", region_name="us-east-1")
    with pytest.raises(DfmError, match="InstanceCount"):
        processing.validate(
            client,
            {
                **request,
                "ProcessingResources": {
                    "ClusterConfig": {**request["ProcessingResources"]["ClusterConfig"], "InstanceCount": 0}
                },
            },
        )
    with pytest.raises(DfmError, match="ProcessingJobName"):
        processing.validate(client, {**request, "ProcessingJobName": "no_underscores_allowed"})


def test_submit_uploads_then_sends_the_dry_runs_request_and_the_job_commands_know_it(
    tmp_path, aws, monkeypatch, capsys
):
    import boto3

    from launcher.errors import DfmError
    from launcher.sagemaker_backend import aws as sm_aws, logs as sm_logs, processing

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="dfm-test-bucket")
    spec = load_spec(write_spec(tmp_path, PREPARE))
    plan = processing.build(build_prepare_plan(spec, "prep-2"))
    expected = plan.document()  # the dry run's JSON
    sent: list[dict] = []
    real = sm_aws.boto_session

    def hooked(region):
        session = real(region)
        session.events.register(
            "provide-client-params.sagemaker.CreateProcessingJob",
            lambda params, **kwargs: sent.append(json.loads(json.dumps(params))),
        )
        return session

    monkeypatch.setattr(sm_aws, "boto_session", hooked)
    lines: list[str] = []
    assert processing.submit(plan, wait=False, echo=lines.append) == "prep-2"
    assert sent == [expected["request"]]  # exactly what the dry run printed
    with pytest.raises(TypeError):
        plan.request["ProcessingJobName"] = "another"  # the plan is a value: built once, sent as built
    s3 = boto3.client("s3", region_name="us-east-1")
    for uri in expected["uploads"]:
        bucket, key = uri[len("s3://") :].split("/", 1)
        assert s3.get_object(Bucket=bucket, Key=key)["ContentLength"] > 0
    summary = processing.describe("prep-2", "us-east-1")  # (moto's answer omits resources and outputs)
    assert summary["job_name"] == "prep-2" and summary["status"] == "Completed"
    assert summary["image"] == expected["request"]["AppSpecification"]["ImageUri"]
    assert [job["job_name"] for job in processing.list_jobs("us-east-1", name_contains="prep")] == ["prep-2"]
    assert processing.stop("prep-2", "us-east-1")["status"] == "Stopping"
    assert processing.stream_logs("prep-2", "us-east-1", echo=lines.append) in sm_logs.TERMINAL_STATUSES + (
        "InProgress",
        "Stopping",
    )
    with pytest.raises(DfmError) as refused:
        processing.describe("no-such-job", "us-east-1")
    assert refused.value.exit_code == 1
    from launcher.cli import main  # the job commands find it by kind

    assert main(["status", "prep-2", "--region", "us-east-1", "--output", "json"]) == 1  # stopped above
    assert json.loads(capsys.readouterr().out)["kind"] == "processing"


def test_processing_logs_read_their_own_log_group(tmp_path, aws):
    import boto3

    from launcher.sagemaker_backend import processing

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="dfm-test-bucket")
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_group(logGroupName=processing.LOG_GROUP)
    logs.create_log_stream(logGroupName=processing.LOG_GROUP, logStreamName="prep-3/algo-1-1763755200")
    logs.put_log_events(
        logGroupName=processing.LOG_GROUP,
        logStreamName="prep-3/algo-1-1763755200",
        logEvents=[{"timestamp": int(time.time() * 1000), "message": "[dfm-prepare] read 1.0s: 10 good rows"}],
    )
    processing.submit(
        processing.build(build_prepare_plan(load_spec(write_spec(tmp_path, PREPARE)), "prep-3")),
        wait=False,
        echo=lambda line: None,
    )
    lines: list[str] = []
    processing.stream_logs("prep-3", "us-east-1", echo=lines.append)
    assert lines == ["[dfm-prepare] read 1.0s: 10 good rows"]  # one instance: no host prefix, as for training


def test_cli_dry_run_prints_json_or_text_and_a_missing_section_is_exit_2(tmp_path, no_aws_env, capsys):
    from launcher.cli import main

    path = write_spec(tmp_path, PREPARE)
    assert main(["data", "prepare", str(path), "--dry-run", "--job-name", "prep-4", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["request"]["ProcessingJobName"] == "prep-4"
    assert main(["data", "prepare", str(path), "--dry-run", "--job-name", "prep-4"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Dry run prep-4 (nothing was sent)") and "CreateProcessingJob request" in text
    bare = Path(tmp_path / "bare.yaml")
    data = __import__("yaml").safe_load(path.read_text())
    del data["prepare"]
    bare.write_text(__import__("yaml").safe_dump(data))
    assert main(["data", "prepare", str(bare), "--dry-run"]) == 2


def test_prepare_imports_neither_pyspark_nor_the_sdk_until_used():
    import subprocess

    code = (
        "import sys; from launcher.cli import main; main(['data', 'prepare', '--help']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'sagemaker', 'tensorflow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("[]"), out.stdout + out.stderr


def test_the_shipped_crc32c_runs_without_its_c_extension(tmp_path):
    """The Spark image has no CRC32C: the zip of google-crc32c's Python files falls back to pure Python there."""
    import subprocess

    from launcher.sagemaker_backend import processing

    archive = processing._crc32c_package(tmp_path)
    code = (
        "import sys, warnings; sys.path.insert(0, sys.argv[1]); warnings.simplefilter('ignore'); "
        "import google_crc32c; print(google_crc32c.__file__, google_crc32c.implementation, "
        "hex(google_crc32c.value(b'123456789')))"
    )
    out = subprocess.run([sys.executable, "-c", code, archive], capture_output=True, text=True, timeout=60)
    where, implementation, check = out.stdout.split()
    assert where.startswith(archive) and implementation == "python"
    assert check == "0xe3069283"  # CRC32C's standard check value


def test_the_shipped_wheel_gives_the_app_the_c_extension_on_the_images_python(tmp_path):
    """On Python 3.12 (the Spark image's), with the zips as --py-files puts them on sys.path, the app loads
    google-crc32c's C extension from the unpacked wheel."""
    import os
    import subprocess

    from launcher.data import prepare_job
    from launcher.sagemaker_backend import processing

    python = Path(os.environ.get("DFM_RUNTIMES", Path.home() / ".cache/dfm/runtimes")) / "tf-2.21/bin/python"
    wheels = processing._crc32c_wheel(tmp_path)
    if not python.exists() or not wheels:
        pytest.skip("needs the Python 3.12 runtime and the cached cp312 wheel (make setup makes both)")
    code = (
        "import sys, importlib.util; sys.path[:0] = sys.argv[2:]; "
        "spec = importlib.util.spec_from_file_location('dfm_prepare', sys.argv[1]); "
        "app = importlib.util.module_from_spec(spec); spec.loader.exec_module(app); value = app.crc32c_function(); "
        "import google_crc32c; print(google_crc32c.implementation, hex(value(b'123456789')))"
    )
    archive = processing._crc32c_package(tmp_path)
    out = subprocess.run(
        [
            str(python),
            "-c",
            code,
            str(next(p for p in prepare_job.APP_MODULES if p.stem == "prepare_encode")),
            archive,
            *wheels,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert out.stdout.split() == ["c", "0xe3069283"], out.stdout + out.stderr


def test_local_outputs_never_replace_the_input(tmp_path):
    from launcher.data import prepare_local
    from launcher.errors import DfmError

    (tmp_path / "data/train").mkdir(parents=True)
    (tmp_path / "data/train/part-0.libsvm").write_text("1 0:1 1:1 2:1\n")
    section = {
        **PREPARE,
        "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(tmp_path / "data/train")},
    }
    spec = load_spec(
        write_spec(
            tmp_path, section, local={"train": str(tmp_path / "data/train"), "eval": str(tmp_path / "data/eval")}
        )
    )
    with pytest.raises(DfmError, match="holds the input"):
        prepare_local.output_folders(prepare_job.job_description(spec, local=True))
    assert (tmp_path / "data/train/part-0.libsvm").exists()


def test_the_example_configs_write_stage_has_a_task_per_vcpu_and_its_layout_fits():
    """configs/prepare-ps.yaml: 4 x ml.m5.4xlarge (64 vCPUs) preparing for 2 hosts x 1 worker. One task writes one
    file; with one file per worker the write stage had 2 tasks."""
    from launcher.compile import compile_spec

    compiled = compile_spec(str(Path(__file__).parent.parent / "configs/prepare-ps.yaml"))
    assert compiled.ok, compiled.errors
    tasks = prepare_job.write_tasks(compiled.spec)
    assert tasks["train_files"] >= tasks["cluster_vcpus"] == 64 and tasks["eval_files"] >= 64
    fit = prepare_job.fit(
        prepare_job.prepared_layout(compiled.spec), compiled.spec.data.s3_shard, prepare_job.shard_table()
    )
    assert fit.min_files_per_worker == fit.max_files_per_worker == 32
    pinned = compile_spec(str(Path(__file__).parent.parent / "configs/prepare-ps.yaml"), ["prepare.files_per_worker=1"])
    assert prepare_job.write_tasks(pinned.spec)["train_files"] == 2
    refused = compile_spec(
        str(Path(__file__).parent.parent / "configs/prepare-ps.yaml"), ["prepare.files_per_worker=0"]
    )
    assert any("files_per_worker" in line for line in refused.errors), refused.errors


def test_the_spec_vpc_reaches_the_job_and_every_upload_stays_under_the_output_prefix(tmp_path, no_aws_env):
    """A role scoped to the job's output prefix must be able to read the app, its modules and its configuration;
    a VPC job's processing instances run in the spec's subnets; Spark's event logs are kept when asked."""
    from launcher.sagemaker_backend import processing

    vpc = {"subnets": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]}
    path = write_spec(tmp_path, {**PREPARE, "event_logs": "s3://dfm-test-bucket/out/spark-events/"})
    spec = load_spec(path, ["vpc=" + json.dumps(vpc)])
    result = processing.build(build_prepare_plan(spec, "prep-20261124-000000")).document()
    request = result["request"]
    assert request["NetworkConfig"]["VpcConfig"] == {
        "Subnets": vpc["subnets"],
        "SecurityGroupIds": vpc["security_group_ids"],
    }
    prefix = spec.output.rstrip("/") + "/"
    assert result["uploads"] and all(uri.startswith(prefix) for uri in result["uploads"]), result["uploads"]
    assert all(i["S3Input"]["S3Uri"].startswith(prefix) for i in request["ProcessingInputs"])
    events = [
        o for o in request["ProcessingOutputConfig"]["Outputs"] if o["S3Output"]["S3Uri"].endswith("spark-events/")
    ]
    assert events and events[0]["S3Output"]["S3UploadMode"] == "Continuous"
    assert (
        "NetworkConfig"
        not in processing.build(build_prepare_plan(load_spec(path), "prep-20261124-000000")).document()["request"]
    )


def test_a_sagemaker_jobs_statistics_propose_the_features_section(tmp_path, aws, capsys):
    """--stats-only on SageMaker: --wait writes features.yaml beside the job's stats.json (and prints it);
    --features-from proposes it later from any stats.json, a path or an s3:// URI."""
    import boto3

    from launcher.cli import main
    from launcher.spec import load_spec

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="dfm-test-bucket")
    stats = {
        "rows": 1000,
        "positive_rate": 0.25,
        "feature_size": 120,
        "columns": {f"field{k}": {"kind": "indexed", "distinct": 40, "max_id": 119} for k in range(3)},
    }
    path = write_spec(tmp_path, PREPARE)
    report = prepare_job.report_uri(load_spec(path), "prep-6")
    bucket, key = report[len("s3://") :].split("/", 1)
    s3.put_object(Bucket=bucket, Key=key + "stats.json", Body=json.dumps(stats).encode())  # as the job leaves it
    assert main(["data", "prepare", str(path), "--stats-only", "--wait", "--job-name", "prep-6"]) == 0
    printed = capsys.readouterr().out
    assert "field_size: 3" in printed and "feature_size: 120" in printed
    stored = s3.get_object(Bucket=bucket, Key=key + "features.yaml")["Body"].read().decode()
    assert stored.startswith("# proposed by `dfm data prepare` from all 1000 good rows") and stored in printed
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    for source in (str(tmp_path / "stats.json"), report + "stats.json"):
        assert main(["data", "prepare", str(path), "--features-from", source]) == 0
        assert capsys.readouterr().out == stored
    assert main(["data", "prepare", str(path), "--features-from", str(tmp_path / "none.json")]) == 2
