"""`dfm data prepare --local`'s JVM: started from this machine's archive of the classes local Spark loads, written
by the first run as its JVM exits (no Spark started here: a process stands in for the JVM)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from launcher.data import prepare_local


def jdk(folder: Path, version: str | None) -> str:
    (folder / "bin").mkdir(parents=True)
    (folder / "bin/java").write_text("")
    if version:
        (folder / "release").write_text(
            f'IMPLEMENTOR="X"\nJAVA_RUNTIME_VERSION="{version}+6-X"\nJAVA_VERSION="{version}"\n'
        )
    return str(folder / "bin/java")


def test_the_archive_is_named_for_the_jvm_and_heap_under_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    java = jdk(tmp_path / "jdk-17", "17.0.15")
    archive, written = prepare_local.archive_paths(java, "2g")
    assert archive.parent == written.parent == tmp_path / "cache/dfm/spark" and archive.parent.is_dir()
    assert archive.name.endswith(".jsa") and written.name.startswith(".") and archive != written
    assert prepare_local.archive_paths(java, "2g")[0] == archive
    assert prepare_local.archive_paths(java, "40g")[0] != archive  # no compressed pointers past 32 GB
    assert prepare_local.archive_paths(jdk(tmp_path / "jdk-21", "21.0.2"), "2g")[0] not in (archive, None)
    assert prepare_local.archive_paths(jdk(tmp_path / "jdk-11", "11.0.20"), "2g") == (None, None)  # other options
    assert prepare_local.archive_paths(jdk(tmp_path / "jre", None), "2g") == (None, None)  # version unknown
    prepare_local.failed_marker(archive).touch()  # writing it failed once: not tried on every run
    assert prepare_local.archive_paths(java, "2g") == (None, None)
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))
    assert prepare_local.archive_paths(java, "40g") == (None, None)


def test_the_jvm_starts_from_the_archive_or_writes_it_at_exit(tmp_path):
    archive, written = tmp_path / "classes.jsa", tmp_path / ".classes.jsa.1"
    assert f"-XX:ArchiveClassesAtExit={written} " in prepare_local.archive_options(archive, written)
    archive.write_bytes(b"archived classes")
    options = prepare_local.archive_options(archive, written)
    assert f"-XX:SharedArchiveFile={archive} " in options and "ArchiveClassesAtExit" not in options
    assert "-Xlog:cds=off" in options
    assert prepare_local.archive_options(None, None) == ""


def test_ending_the_session_ends_the_jvm_and_puts_its_archive_in_place(tmp_path, monkeypatch):
    from pyspark import SparkContext

    archive, written = tmp_path / "classes.jsa", tmp_path / ".classes.jsa.1"
    jvm = subprocess.Popen(  # writes "its archive" when its input ends, as the JVM does at exit
        [sys.executable, "-c", f"import sys; sys.stdin.read(); open({str(written)!r}, 'wb').write(b'classes')"],
        stdin=subprocess.PIPE,
    )
    system = type("System", (), {"getProperty": staticmethod(lambda name: "spark/jars/*")})
    gateway = type(
        "Gateway", (), {"proc": jvm, "shutdown": lambda self: None, "jvm": type("Jvm", (), {"System": system})}
    )()
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    monkeypatch.setattr(SparkContext, "_jvm", SparkContext._jvm)  # (set to None with the gateway: put back after)
    stopped = []
    session = type("Session", (), {"stop": lambda self: stopped.append(True)})()
    session._dfm_archive = (archive, written, ["java-that-starts-from-it"])
    monkeypatch.setattr(
        prepare_local, "archive_starts", lambda java, path: path == written and java[-2:] == ["-cp", "spark/jars/*"]
    )
    prepare_local.end_session(session)
    assert stopped and jvm.returncode == 0 and SparkContext._gateway is None
    assert archive.read_bytes() == b"classes" and not written.exists()
    assert not prepare_local.failed_marker(archive).exists()
    plain = type("Session", (), {"stop": lambda self: stopped.append(True)})()
    prepare_local.end_session(plain)  # no archive to write: only stopped
    assert len(stopped) == 2 and Path(archive).exists()


def test_an_archive_no_jvm_starts_from_is_not_kept(tmp_path, monkeypatch):
    """A JVM killed while it writes leaves a truncated archive: a JVM started from it crashes (and would leave its
    crash report in the current folder)."""
    import shutil

    import pytest

    java = shutil.which("java")
    if java is None:
        pytest.skip("no java")
    archive = tmp_path / "classes.jsa"  # the classes `java -version` loads: a small archive, written in a second
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={archive}", "-Xlog:disable", "-version"], capture_output=True)
    if not archive.is_file():
        pytest.skip("this JVM writes no class archive")
    assert prepare_local.archive_starts([java], archive)
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    monkeypatch.chdir(tmp_path)
    assert not prepare_local.archive_starts([java], damaged)
    assert not list(tmp_path.glob("hs_err*"))
    assert not prepare_local.archive_starts([java], tmp_path / "none.jsa")


def test_a_failed_archive_is_not_tried_again(tmp_path, monkeypatch):
    """A JVM that wrote no archive (or one no JVM starts from) costs the recording and the dump on every run."""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_gateway", None)
    archive, written = tmp_path / "classes.jsa", tmp_path / ".classes.jsa.1"
    session = type("Session", (), {"stop": lambda self: None})()
    session._dfm_archive = (archive, written, ["java"])
    prepare_local.end_session(session)
    assert not archive.exists() and prepare_local.failed_marker(archive).exists()


def test_ending_the_session_does_not_wait_for_the_accumulator_servers_poll():
    """pyspark's stop shuts its accumulator server down and waits (up to 1 s) for its handler's next poll."""
    server = type("Server", (), {"server_shutdown": False})()
    context = type("Context", (), {"_accumulatorServer": server})()
    stopped = []
    session = type(
        "Session", (), {"sparkContext": context, "stop": lambda self: stopped.append(context._accumulatorServer)}
    )()
    prepare_local.end_session(session)
    assert server.server_shutdown and stopped == [None]
