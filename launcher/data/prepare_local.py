"""`dfm data prepare SPEC --local`: the Spark application of the SageMaker job, on local Spark (`local[*]`).

pyspark (the `spark` extra; `make setup` installs it and a JDK) is imported here only.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from launcher.data import prepare_job
from launcher.data.spark_interrupt import SparkInterruption
from launcher.data.staging import Staged, check_writable
from launcher.errors import DfmError
from launcher.spec import Spec


QUIET_ARCHIVE = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # else the JVM warns on stdout of classes it cannot archive


def spark_session(cores: str = "*", app_name: str = "dfm-prepare", class_archive: bool = False):
    """A local SparkSession sized for a laptop or CI: no UI, few shuffle partitions, a quick JVM, quiet logs.
    class_archive: the JVM starts from this machine's archive of the classes local Spark loads (~1.5-2 CPU s less),
    or writes it when it ends (`end_session`) if there is none yet."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise DfmError(
            "pyspark is not installed: run `make setup` (or pip install 'dfm[spark]') and install a "
            "JDK (apt-get install openjdk-17-jre-headless)",
            2,
        ) from None
    java = (
        shutil.which("java") if not os.environ.get("JAVA_HOME") else os.path.join(os.environ["JAVA_HOME"], "bin/java")
    )
    if java is None:
        raise DfmError("local Spark needs Java: apt-get install openjdk-17-jre-headless (make setup does it)", 2)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this venv, not python3
    memory = os.environ.get("DFM_SPARK_DRIVER_MEMORY", "2g")
    # the JVM's JIT compiling for a run of seconds costs more CPU than it saves: C1 only and the serial
    # GC cut ~5 CPU s from a 1M-row prepare (~1 s more a million rows once warm; big inputs go to SageMaker);
    # a metaspace that fits Spark's classes from the start spares two full collections while they load
    options = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:MetaspaceSize=160m"
    archive, written = archive_paths(java, memory) if class_archive else (None, None)
    options += archive_options(archive, written)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", memory)
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", options)
        # one machine: the shuffle crosses no network, compressing it only costs CPU
        .config("spark.shuffle.compress", "false")
        .config("spark.shuffle.spill.compress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    writes = written is not None and not archive.is_file()
    spark._dfm_archive = (archive, written, [java, f"-Xmx{memory}", "-XX:+UseSerialGC"]) if writes else None
    return spark


def archive_options(archive: Path | None, written: Path | None) -> str:
    """The JVM options that start it from the class archive, or have it write the archive as it exits."""
    if archive is not None and archive.is_file():
        return f" -XX:SharedArchiveFile={archive} {QUIET_ARCHIVE}"
    if written is not None:
        return f" -XX:ArchiveClassesAtExit={written} {QUIET_ARCHIVE}"
    return ""


def archive_paths(java: str, memory: str) -> tuple[Path | None, Path | None]:
    """(this machine's archive of local Spark's classes, the file this run's JVM would write it to) in
    $XDG_CACHE_HOME/dfm/spark (~/.cache/dfm/spark), named for the JVM build, pyspark and the heap (an archive holds
    classes for one JVM build, class path and pointer size); (None, None) for a JVM before 17 (whose options
    differ), where the folder cannot be written, or once writing the archive failed (every run would pay it)."""
    import pyspark

    build = java_build(Path(java).resolve())
    major = re.match(r"\d+", build or "")
    if major is None or int(major.group()) < 17:
        return None, None
    identity = f"{Path(java).resolve()}|{build}|{pyspark.__file__}|{pyspark.__version__}|{memory}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dfm" / "spark"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None, None
    archive = folder / f"classes-{key}.jsa"
    if not os.access(folder, os.W_OK) or failed_marker(archive).exists():
        return None, None
    return archive, folder / f".classes-{key}.jsa.{os.getpid()}"


def java_build(binary: Path) -> str | None:
    """The JDK's runtime version (its `release` file, beside bin/), e.g. 17.0.15+6-Debian-1deb12u1; None if unknown."""
    try:
        release = (binary.parent.parent / "release").read_text(errors="replace")
    except OSError:
        return None
    found = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', release, re.M))
    return found.get("JAVA_RUNTIME_VERSION") or found.get("JAVA_VERSION") or None


def failed_marker(archive: Path) -> Path:
    return archive.with_suffix(".failed")


def end_session(spark) -> None:
    """Stop the session; when its JVM is to write the class archive, end the JVM now (it writes the archive as it
    exits, ~5 s once) and put the archive in place for the next run if a JVM starts from it (a truncated archive,
    from a JVM killed as it wrote, would crash every later start). For the command's own session, which the process
    outlives by moments: pyspark's stop waits up to 1 s for its accumulator server's handler to poll again; the
    server is only told to stop, and its thread ends with the process."""
    context = getattr(spark, "sparkContext", None)
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        server.server_shutdown = True
        context._accumulatorServer = None
    spark.stop()
    pending = getattr(spark, "_dfm_archive", None)
    if not pending:
        return
    from pyspark import SparkContext

    archive, written, java = pending
    gateway = SparkContext._gateway
    if gateway is not None:
        java = [*java, "-cp", gateway.jvm.System.getProperty("java.class.path")]  # an archive fits its class path
        gateway.shutdown()
        gateway.proc.stdin.close()  # the JVM exits when its input ends
        try:
            gateway.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            gateway.proc.kill()
        SparkContext._gateway = SparkContext._jvm = None
    if written.is_file() and archive_starts(java, written):
        os.replace(written, archive)
    else:
        written.unlink(missing_ok=True)
        failed_marker(archive).touch()


def archive_starts(java: list[str], archive: Path) -> bool:
    """Whether `java` (the command and the options that decide an archive's fit: heap, collector, class path)
    starts from the archive."""
    check = [*java, f"-XX:SharedArchiveFile={archive}", "-Xshare:on", "-Xlog:disable", "-version"]
    check[-1:-1] = ["-XX:+SuppressFatalErrorMessage"]  # a truncated archive crashes it: no hs_err file left here
    try:
        return subprocess.run(check, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def output_folders(job: dict[str, Any]) -> list[Path]:
    """The channel folders and the report folder a preparation writes, refused (exit 2) when one holds its input."""
    folders = sorted({Path(p).parent for p in job["train_paths"] + job["eval_paths"]} | {Path(job["report_dir"])})
    sources = [Path(p).resolve() for p in (job["input"]["uri"], job.get("eval_uri")) if p]
    for folder in folders:
        inside = [s for s in sources if s == folder.resolve() or folder.resolve() in s.parents]
        if inside:
            raise DfmError(
                f"{folder} (a local.channels folder) holds the input {inside[0]}: prepare writes its "
                "channels elsewhere",
                2,
            )
    return folders


def staged_job(job: dict[str, Any], stage: Staged) -> dict[str, Any]:
    """The job with every output under its staging folder (swapped into place when the preparation succeeds)."""

    def moved(path: str) -> str:
        return str(stage.path(Path(path).parent) / Path(path).name)

    return {
        **job,
        "train_paths": [moved(p) for p in job["train_paths"]],
        "eval_paths": [moved(p) for p in job["eval_paths"]],
        "report_dir": str(stage.path(Path(job["report_dir"]))),
    }


def refuse_unnamed_gzip(job: dict[str, Any]) -> None:
    """Spark decompresses text by the file's name (.gz): a gzip file named otherwise would be read as bad rows."""
    if job["input"]["format"] == "parquet":
        return
    from launcher.data.split import input_files
    from launcher.data.textfile import is_gzip

    for source in (job["input"]["uri"], job.get("eval_uri")):
        if not source:
            continue
        for path in input_files([Path(source)]):
            if not path.name.endswith(".gz") and is_gzip(path):
                raise DfmError(
                    f"{path} is gzip-compressed but not named .gz: Spark decompresses only files whose "
                    "names end in .gz; rename it",
                    2,
                )


def load_app(spark):
    """The application's files themselves, shipped to Spark's Python workers as on SageMaker (`--py-files`): the
    workers import them by their own names, never through `launcher`."""
    for path in (*prepare_job.APP_MODULES, prepare_job.APP):
        spark.sparkContext.addPyFile(str(path))
    return importlib.import_module(prepare_job.APP.stem)


def local_job(spec: Spec, *, stats_only: bool = False) -> dict[str, Any]:
    """The application's job on this machine's folders; exit 2 when a channel folder is not named or an input
    folder is missing."""
    missing = [
        name
        for name in prepare_job.prepared_layout(spec).channel_names()
        + (["eval"] if prepare_job.wants_eval(spec) else [])
        if name not in spec.local.channels
    ]
    if missing:
        raise DfmError(
            f"{spec.where('local.channels')}: local.channels: --local writes each channel's folder: "
            f"add {', '.join(f'{m}: data/...' for m in missing)}",
            2,
        )
    job = prepare_job.job_description(spec, local=True, stats_only=stats_only)
    for field, source in (("prepare.input.local", job["input"]["uri"]), ("prepare.eval.local", job.get("eval_uri"))):
        if source and not Path(source).exists():
            raise DfmError(f"{spec.where(field)}: {field}: {source} not found", 2)
    return job


def run(job: Mapping[str, Any], spec: Spec, *, force: bool = False, spark=None, stages=None) -> dict[str, Any]:
    """Run `job` (`local_job`'s, the one the dry run shows) on local Spark; -> the app's report (also in
    <train folder>/../prepare/prepare.json). `spec` names the places in errors and sizes the features: proposal.
    Everything is written beside its place and swapped in only when the preparation succeeds. `stages` is told the
    name of each stage as it starts (a terminal's status line)."""
    stages = stages or (lambda name: None)
    job = dict(job)
    refuse_unnamed_gzip(job)
    what = f"{spec.where('local.channels')}: local.channels"
    if job["stats_only"]:  # only the report folder's files, each replaced as it is written
        check_writable(Path(job["report_dir"]), what)
        with SparkInterruption(f"{job['report_dir']} holds no partial file") as guard:
            return _run_app(spec, job, spark, guard, stages)
    scratch = scratch_folders(job)
    remove_folders(scratch)  # a killed run's
    try:
        with Staged(output_folders(job), force, what) as stage:
            with SparkInterruption("the channel folders keep the data they had; nothing partial is left") as guard:
                report = _run_app(spec, staged_job(job, stage), spark, guard, stages)
            stages("moving the outputs into place")
            return report
    finally:
        remove_folders(scratch)


def scratch_folders(job: Mapping[str, Any]) -> set[Path]:
    """Where the application's write tasks write a file before renaming it into its channel folder (`.partial`
    beside the channel folders: prepare_app_write.scratch_folder)."""
    return {Path(p).parent.parent / ".partial" for p in job["train_paths"] + job["eval_paths"]}


def remove_folders(folders) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _run_app(spec: Spec, job: dict[str, Any], spark, guard: SparkInterruption, stages) -> dict[str, Any]:
    owned = spark is None
    if owned:
        stages("starting local Spark")
    spark = spark or spark_session(class_archive=True)
    watchers: list = []
    try:
        guard.watch(spark)
        prepare_app = load_app(spark)
        stages("read: parse the input and check its rows")
        watchers = getattr(prepare_app, "WATCHERS", [])  # the app tells each next stage as the last one ends
        watchers.append(stages)
        report = prepare_app.run(spark, job)
    except SystemExit as stop:  # no good rows, or bad rows under bad_rows: fail
        raise DfmError(str(stop.code).removeprefix(prepare_app.STAGE_PREFIX + " "), 1) from None
    finally:
        if stages in watchers:
            watchers.remove(stages)
        if owned:
            stages("ending local Spark")
            end_session(spark)
    if "stats" in report:
        from launcher.data.prepare_stats import proposal_yaml

        (Path(job["report_dir"]) / "features.yaml").write_text(proposal_yaml(report["stats"], spec))
    return report


def summary(report: dict[str, Any]) -> str:
    parts = [f"{report['rows']} good rows, {report['bad_rows']} bad ({report['bad_rows_policy']})"]
    for part in ("train", "eval"):
        if part in report:
            done = report[part]
            parts.append(
                f"{part}: {done['rows']} rows in {done['files']} files "
                f"({done['positives'] / max(1, done['rows']):.1%} positive)"
            )
    if report.get("negative_rate") is not None:
        parts.append(f"negatives kept at {report['negative_rate']}")
    return "; ".join(parts)


def dump(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)
