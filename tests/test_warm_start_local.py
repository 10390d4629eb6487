"""`dfm launch --local` with a warm start: the source (a checkpoint folder, a model.tar.gz, a SavedModel folder, or a
local run's folder) is laid out as the channel in every simulated host's input/data/<channel>, linked, never written;
this run's own checkpoint store is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from local_plans import standin_spec

from launcher.errors import DfmError
from launcher.local.local_request import build_request, checkpoint_store
from launcher.local.runtime import Runtime
from launcher.plans.training_plan import build_plan
from launcher.spec import load_spec

FAKE_RUNTIME = Runtime("/opt/runtimes/tf-2.12/bin/python", "2.12.0", "tf-2.12", False, "TF 2.12.0 (runtime tf-2.12)")
CHECKPOINT_FILES = ("checkpoint", "ckpt-3.index", "ckpt-3.data-00000-of-00001")


def request_with(tmp_path: Path, source: Path | str, job_name: str = "today", **options):
    spec = load_spec(standin_spec(tmp_path, **options), [f"warm_start.from={json.dumps(str(source))}"])
    return build_request(build_plan(spec, job_name=job_name), environ={"PATH": ""}, runtime=FAKE_RUNTIME, cpus=range(4))


def checkpoint_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        (folder / name).write_text(name)
    return folder


def channel_on_every_host(request, name: str) -> list[dict[str, str]]:
    found = []
    for host in request.hosts:
        (feed,) = [c for c in host.channels if c.name == name]
        assert feed.mode == "File" and feed.feed == "link" and feed.distribution == "FullyReplicated"
        assert feed.target == f"{host.root}/input/data/{name}"
        found.append(dict(feed.files))
    return found


def test_a_checkpoint_folder_is_the_warmstart_channel_on_every_host(tmp_path):
    source = checkpoint_folder(tmp_path / "yesterday")
    request = request_with(tmp_path, source, hosts=3)
    expected = {name: str(source / name) for name in CHECKPOINT_FILES}
    assert channel_on_every_host(request, "warmstart") == [expected] * 3
    assert not request.problems


def test_a_model_archive_and_a_saved_model_folder_are_the_model_channel(tmp_path):
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(b"tar")
    assert channel_on_every_host(request_with(tmp_path / "a", archive), "model") == [{"model.tar.gz": str(archive)}] * 2
    saved = tmp_path / "export"
    (saved / "17").mkdir(parents=True)
    (saved / "17" / "saved_model.pb").write_bytes(b"pb")
    assert (
        channel_on_every_host(request_with(tmp_path / "b", saved), "model")
        == [{"17/saved_model.pb": str(saved / "17" / "saved_model.pb")}] * 2
    )


def test_a_local_runs_folder_gives_its_checkpoint_store_else_its_export(tmp_path):
    runs = tmp_path / "runs"
    yesterday_spec = load_spec(standin_spec(tmp_path / "y", checkpoint_s3_uri="s3://bucket/ck/yesterday"))
    yesterday = build_plan(yesterday_spec, job_name="yesterday")
    folder = runs / "yesterday"
    (folder / "hosts" / "algo-1" / "model" / "5").mkdir(parents=True)
    (folder / "hosts" / "algo-1" / "model" / "5" / "saved_model.pb").write_bytes(b"pb")
    (folder / "plan.json").write_text(json.dumps(yesterday.to_dict()))
    assert "model" in {c.name for c in request_with(tmp_path / "a", folder).hosts[0].channels}
    store = checkpoint_store(yesterday, runs)
    checkpoint_folder(store)
    request = request_with(tmp_path / "b", folder)
    assert channel_on_every_host(request, "warmstart")[0] == {name: str(store / name) for name in CHECKPOINT_FILES}
    assert "model" not in {c.name for c in request.hosts[0].channels}


def test_this_runs_own_checkpoint_store_is_refused(tmp_path):
    store = checkpoint_folder(tmp_path / "runs" / "checkpoints" / "bucket_ck_today")
    with pytest.raises(DfmError) as err:
        request_with(tmp_path, store, checkpoint_s3_uri="s3://bucket/ck/today")
    assert err.value.exit_code == 2 and "own checkpoint store" in err.value.message


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_source_that_is_not_there_or_holds_nothing_is_one_line_exit_2(tmp_path, make):
    source = tmp_path / "nothing"
    if make == "empty":
        source.mkdir()
        (source / "notes.txt").write_text("x")
    with pytest.raises(DfmError) as err:
        request_with(tmp_path, source)
    assert err.value.exit_code == 2 and str(source) in err.value.message


def test_the_source_is_never_written(tmp_path):
    """The hosts' channel folders hold links to the source's files (laid out as the runner does); the source stays
    as it was."""
    from launcher.local import channels as ch

    source = checkpoint_folder(tmp_path / "yesterday")
    before = {p.name: p.read_text() for p in source.iterdir()}
    request = request_with(tmp_path, source)
    for host in request.hosts:
        (feed,) = [c for c in host.channels if c.name == "warmstart"]
        ch.link_files(Path(feed.target), [(key, Path(path)) for key, path in feed.files])
        linked = Path(host.root) / "input" / "data" / "warmstart" / "checkpoint"
        assert linked.is_symlink() and linked.resolve() == source / "checkpoint"
    assert {p.name: p.read_text() for p in source.iterdir()} == before


def test_an_s3_source_reads_its_channel_from_a_local_folder_given_for_it(tmp_path):
    source = checkpoint_folder(tmp_path / "copy-of-yesterday")
    spec = load_spec(
        standin_spec(tmp_path),
        ["warm_start.from=s3://bucket/ck/yesterday/", f"local.channels.warmstart={json.dumps(str(source))}"],
    )
    from launcher import rules

    assert rules.check_local_channels(spec) == []
    request = build_request(
        build_plan(spec, job_name="today"), environ={"PATH": ""}, runtime=FAKE_RUNTIME, cpus=range(4)
    )
    assert channel_on_every_host(request, "warmstart")[1] == {name: str(source / name) for name in CHECKPOINT_FILES}
    assert rules.check_local_channels(load_spec(standin_spec(tmp_path / "b"), ["local.channels.warmstart=x"]))
