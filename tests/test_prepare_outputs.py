"""`dfm data prepare --local` without Spark (the app stood in for): outputs written beside their place and swapped
in only on success, refusals before any work, and the app's verdict on what its read found."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from prepare_support import write_clicks, write_spec

from launcher.cli import main
from launcher.data import prepare_job, prepare_local
from launcher.data import prepare_encode as encode

SECTION = {
    "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": "clicks"},
    "stats": False,
    "files_per_worker": 1,
}


@pytest.fixture
def app(monkeypatch):
    """The Spark application module itself, loaded as Spark's workers load it (its modules by their own names)."""
    for path in prepare_job.APP_MODULES:  # what the job ships beside the app, under the names the app imports
        monkeypatch.setitem(sys.modules, path.stem, importlib.import_module(f"launcher.data.{path.stem}"))
    spec = importlib.util.spec_from_file_location("dfm_prepare_app_under_test", prepare_job.APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeApp:
    """Writes each planned file (or fails half-way), as the Spark application would."""

    STAGE_PREFIX = "[dfm-prepare]"

    def __init__(self, fail: bool = False):
        self.fail, self.jobs = fail, []

    def run(self, spark, job):
        self.jobs.append(job)
        for path in job["train_paths"] + job["eval_paths"]:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(b"new")
            if self.fail:
                raise SystemExit(f"{self.STAGE_PREFIX} no good rows in clicks (3 bad; first: x); nothing written")
        Path(job["report_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(job["report_dir"]) / "prepare.json").write_text("{}")
        return {"rows": 1, "bad_rows": 0, "bad_rows_policy": "skip", "train": {"rows": 1, "files": 1, "positives": 0}}


def _setup(tmp_path, monkeypatch, fake, **changes):
    monkeypatch.chdir(tmp_path)
    write_clicks(tmp_path / "clicks", 20, files=1)
    spec = write_spec(
        tmp_path,
        {**SECTION, **changes.pop("section", {})},
        count=1,
        processes=1,
        local=changes.pop("local", {"train": "data/train", "eval": "data/eval"}),
        **changes,
    )
    monkeypatch.setattr(prepare_local, "load_app", lambda spark: fake)
    monkeypatch.setattr(prepare_local, "spark_session", lambda **_: type("NoSpark", (), {"stop": lambda self: None})())
    return spec


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _old_data(tmp_path):
    for name in ("train/part-00000.tfrecord", "train/part-00007.tfrecord", "eval/part-00000.tfrecord"):
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_bytes(b"old")
    return _files(tmp_path / "data")


def test_force_keeps_the_old_data_when_the_preparation_fails(tmp_path, monkeypatch, capsys):
    spec = _setup(tmp_path, monkeypatch, FakeApp(fail=True), section={"eval_fraction": 0.1})
    before = _old_data(tmp_path)
    assert main(["data", "prepare", str(spec), "--local", "--force"]) == 1
    assert "no good rows in clicks (3 bad; first: x); nothing written" in capsys.readouterr().err
    assert _files(tmp_path / "data") == before and sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        "eval",
        "train",
    ]  # no staging copy left


def test_force_swaps_the_whole_new_set_in_on_success(tmp_path, monkeypatch, capsys):
    fake = FakeApp()
    spec = _setup(tmp_path, monkeypatch, fake, section={"eval_fraction": 0.1})
    _old_data(tmp_path)
    assert main(["data", "prepare", str(spec), "--local", "--force"]) == 0
    assert all(".dfm-staging" in path for path in fake.jobs[0]["train_paths"])  # written beside, then swapped
    assert _files(tmp_path / "data") == {
        "train/part-00000.tfrecord": b"new",
        "eval/part-00000.tfrecord": b"new",
        "prepare/prepare.json": b"{}",
    }  # the old part-00007 is gone with its set


class InterruptedApp(FakeApp):
    """Half-way through its files, the command gets `signum` (a Ctrl-C, a SIGTERM); its cancelled job then fails."""

    def __init__(self, signum):
        super().__init__()
        self.signum = signum

    def run(self, spark, job):
        import os

        self.jobs.append(job)
        first = job["train_paths"][0]
        scratch = Path(first).parent.parent / ".partial"  # where the write tasks write before renaming
        scratch.mkdir(parents=True, exist_ok=True)
        (scratch / "train-part-00000.tfrecord.123").write_bytes(b"half")
        Path(first).parent.mkdir(parents=True, exist_ok=True)
        Path(first).write_bytes(b"new")
        os.kill(os.getpid(), self.signum)
        raise RuntimeError("org.apache.spark.SparkException: Job 3 cancelled as part of cancellation of all jobs")


@pytest.mark.parametrize("signum, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_preparation_says_so_on_one_line_and_leaves_nothing_partial(
    tmp_path, monkeypatch, capsys, signum, code
):
    import signal

    spec = _setup(tmp_path, monkeypatch, InterruptedApp(getattr(signal, signum)), section={"eval_fraction": 0.1})
    before = _old_data(tmp_path)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    assert main(["data", "prepare", str(spec), "--local", "--force"]) == code
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"dfm: interrupted ({signum}): the channel folders keep the data they had; nothing partial is left"
    )
    assert _files(tmp_path / "data") == before
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["eval", "train"]  # no .partial, no staging
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers  # the command's handlers are gone


def test_a_killed_runs_partial_folder_goes_with_the_next_run(tmp_path, monkeypatch, capsys):
    spec = _setup(tmp_path, monkeypatch, FakeApp(), section={"eval_fraction": 0.1})
    _old_data(tmp_path)
    leftover = tmp_path / "data" / ".partial" / "train-part-00003.tfrecord.4242"
    leftover.parent.mkdir()
    leftover.write_bytes(b"half")
    assert main(["data", "prepare", str(spec), "--local", "--force"]) == 0
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["eval", "prepare", "train"]


def test_without_force_non_empty_channels_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    fake = FakeApp()
    spec = _setup(tmp_path, monkeypatch, fake)
    before = _old_data(tmp_path)
    assert main(["data", "prepare", str(spec), "--local"]) == 2
    assert "data/train is not empty; pass --force" in capsys.readouterr().err and not fake.jobs
    assert _files(tmp_path / "data") == before


def test_unwritable_channel_folders_are_one_line_exit_2_before_any_work(tmp_path, monkeypatch, capsys):
    fake = FakeApp()
    spec = _setup(tmp_path, monkeypatch, fake, local={"train": "a-file/train", "eval": "a-file/eval"})
    (tmp_path / "a-file").write_text("x")
    assert main(["data", "prepare", str(spec), "--local"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and errors[0].endswith("local.channels: a-file is a file, not a folder"), errors
    assert not fake.jobs


def test_a_gzip_file_spark_would_not_decompress_is_refused_naming_gzip(tmp_path, monkeypatch, capsys):
    fake = FakeApp()
    spec = _setup(tmp_path, monkeypatch, fake)
    source = tmp_path / "clicks/part-000.libsvm"
    source.write_bytes(gzip.compress(source.read_bytes()))
    assert main(["data", "prepare", str(spec), "--local"]) == 2
    assert "part-000.libsvm is gzip-compressed but not named .gz" in capsys.readouterr().err and not fake.jobs
    source.rename(source.with_name("day_0.gz"))  # Spark reads it by its name
    assert main(["data", "prepare", str(spec), "--local"]) == 0 and fake.jobs


def test_a_local_dry_run_lists_what_would_be_read_and_written_and_runs_nothing(tmp_path, monkeypatch, capsys):
    fake = FakeApp()
    spec = _setup(tmp_path, monkeypatch, fake, section={"eval_fraction": 0.1})
    assert main(["data", "prepare", str(spec), "--local", "--dry-run", "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["input"].endswith("clicks") and document["report"].endswith("data/prepare")
    assert {Path(folder).name for folder in document["outputs"]} == {"train", "eval"}
    assert all(files > 0 for files in document["outputs"].values())
    assert main(["data", "prepare", str(spec), "--local", "--dry-run"]) == 0
    assert "Spark not started" in capsys.readouterr().out
    assert not fake.jobs and not (tmp_path / "data").exists()


def test_the_local_backend_runs_the_job_its_dry_run_built(tmp_path, monkeypatch):
    import dataclasses

    from launcher.backends import LocalProcessing
    from launcher.plans.prepare_plan import build_prepare_plan
    from launcher.spec import load_spec

    fake = FakeApp()
    spec = _setup(tmp_path, monkeypatch, fake)
    backend = LocalProcessing()
    request = backend.dryrun(build_prepare_plan(load_spec(spec), "clicks-prep-1"))
    shown = dataclasses.replace(request, job={**request.job, "seed": 4242})  # a job the spec alone cannot give
    monkeypatch.setattr(prepare_local, "local_job", lambda *a, **k: pytest.fail("execute derived the job again"))

    backend.execute(shown)

    assert [job["seed"] for job in fake.jobs] == [4242]


def test_force_is_refused_for_s3_outputs(tmp_path, capsys):
    spec = write_spec(tmp_path, SECTION, count=1, processes=1)
    assert main(["data", "prepare", str(spec), "--force", "--dry-run"]) == 2
    assert "--force replaces local folders only" in capsys.readouterr().err


def test_no_good_rows_stops_the_app_with_the_counts_and_the_first_bad_rows(app, capsys):
    examples = ["a.libsvm: 2 id:value pairs, expected 3: '1 0:1 1:1'", "a.libsvm: label 'x' is not a number: 'x'"]
    with pytest.raises(SystemExit) as stop:
        app.check_read("train", "s3://b/c/", 0, 2, examples, "skip")
    assert str(stop.value.code) == (
        f"[dfm-prepare] no good rows in s3://b/c/ (2 bad; first: {examples[0]}); nothing written"
    )
    assert capsys.readouterr().out.splitlines() == [f"[dfm-prepare] bad train row: {e}" for e in examples]
    with pytest.raises(SystemExit, match=r"no good eval rows in s3://b/e/ \(0 bad; no lines\)"):
        app.check_read("eval", "s3://b/e/", 0, 0, [], "skip")


def test_bad_rows_are_shown_under_skip_and_stop_under_fail(app, capsys):
    examples = ["a.libsvm: label 'x' is not a number: 'x'"]
    app.check_read("train", "s3://b/c/", 10, 1, examples, "skip")  # skipped: shown, not fatal
    assert capsys.readouterr().out == f"[dfm-prepare] bad train row: {examples[0]}\n"
    with pytest.raises(SystemExit, match=r"1 bad rows \(bad_rows: fail\); first: a.libsvm"):
        app.check_read("train", "s3://b/c/", 10, 1, examples, "fail")


def test_gzip_bytes_read_as_text_are_named(app):
    shown = "day_0: 0 id:value pairs, expected 39: " + repr("\x1f\ufffd\x08\x00abc")
    with pytest.raises(SystemExit, match="gzip-compressed data: Spark decompresses only files whose names end in .gz"):
        app.check_read("train", "s3://b/c/", 0, 1, [shown], "skip")


def test_a_write_task_of_several_files_writes_each_even_an_empty_one(app, tmp_path):
    """On a cluster with far fewer cores than files a task writes files task, task + tasks, ...: each complete,
    its records sorted by key, and a file no row went to written empty (the layout stays whole)."""

    paths = [str(tmp_path / f"out/train/part-{k:05d}.tfrecord") for k in range(7)]
    data, lengths = encode.frame(*encode.encode_records([b"a", b"b", b"c"]), encode.crc32c_function())
    one = len(data) // 3
    # task 1 of 3 writes files 1 and 4; file 4 got two chunks, file 1 none
    chunks = [
        (4, (np.array([9]), lengths[:1], data[:one].tobytes(), 1)),
        (4, (np.array([3]), lengths[1:2], data[one : 2 * one].tobytes(), 0)),
    ]
    assert list(app.write.write_files(1, iter(chunks), paths, 3)) == [(1, 0, 0), (4, 2, 1)]
    assert Path(paths[1]).read_bytes() == b""
    assert Path(paths[4]).read_bytes() == data[one : 2 * one].tobytes() + data[:one].tobytes()  # sorted by key
    assert sorted(p.name for p in (tmp_path / "out/train").iterdir()) == ["part-00001.tfrecord", "part-00004.tfrecord"]


def test_a_local_preparation_tells_each_stage_as_it_starts(app, tmp_path, monkeypatch):
    """What a terminal's status line shows (dfm data prepare --local): Spark's start, the app's stages as each one
    before it ends (the app's own stage lines), its end, the swap."""
    from launcher.spec import load_spec

    class StagedApp(FakeApp):
        WATCHERS = app.WATCHERS

        def run(self, spark, job):
            progress = app.Progress()  # the application's own stage lines
            progress.stage("read", "20 good rows, 0 bad")
            report = super().run(spark, job)
            progress.stage("write", "20 train rows in 1 files")
            return report

    spec = _setup(tmp_path, monkeypatch, StagedApp())
    seen = []
    job = prepare_local.local_job(load_spec(spec))
    prepare_local.run(job, load_spec(spec), stages=seen.append)
    assert seen == [
        "starting local Spark",
        "read: parse the input and check its rows",
        "statistics, split, encode and write",
        "finishing",
        "ending local Spark",
        "moving the outputs into place",
    ]
    assert app.WATCHERS == []  # told only while it ran
