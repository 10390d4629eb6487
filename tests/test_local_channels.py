"""Channels on simulated hosts: S3 sharding by file, File-mode links, Pipe-mode FIFOs."""

import hashlib
import os
import threading

import pytest
from local_plans import make_channel_data

from launcher.errors import DfmError
from launcher.local.channels import PipeFeeder, channel_source, files_for_host, link_files, list_objects
from launcher.plans.training_plan import Channel


@pytest.mark.parametrize("num_files,num_hosts", [(7, 3), (2, 3), (8, 2)])
def test_sharded_hosts_see_disjoint_files_that_together_are_all(tmp_path, num_files, num_hosts):
    objects = list_objects(make_channel_data(tmp_path, "train", num_files))
    shares = [files_for_host(objects, "ShardedByS3Key", h, num_hosts) for h in range(num_hosts)]
    keys = [key for share in shares for key, _ in share]
    assert sorted(keys) == [key for key, _ in objects] and len(keys) == len(set(keys))
    assert max(len(s) for s in shares) - min(len(s) for s in shares) <= 1  # about 1/N each
    if num_files < num_hosts:
        assert [] in shares  # a host with no object gets no data, as on SageMaker


def test_fully_replicated_hosts_see_every_file_under_its_key(tmp_path):
    source = make_channel_data(tmp_path, "eval", 2)
    (source / "nested").mkdir()
    (source / "nested" / "x.tfrecord").write_bytes(b"abc")
    objects = list_objects(source)
    for host in range(2):
        target = tmp_path / f"host{host}" / "eval"
        link_files(target, files_for_host(objects, "FullyReplicated", host, 2))
        assert (target / "nested" / "x.tfrecord").read_bytes() == b"abc"
        assert sorted(p.name for p in target.iterdir()) == ["nested", "part-000.tfrecord", "part-001.tfrecord"]


def test_channel_source_is_the_local_folder_and_s3_without_one_is_refused(tmp_path):
    folder = make_channel_data(tmp_path, "train", 1)
    assert channel_source(Channel("train", "s3://b/t/", local_path=str(folder))) == folder
    with pytest.raises(DfmError, match="local"):
        channel_source(Channel("train", "s3://b/t/"))
    with pytest.raises(DfmError, match="does not exist"):
        channel_source(Channel("train", "s3://b/t/", local_path=str(tmp_path / "missing")))


def test_pipe_feeder_delivers_the_files_bytes_epoch_after_epoch(tmp_path):
    source = make_channel_data(tmp_path, "train", 3, size=300_000)
    files = list_objects(source)
    expected = hashlib.sha256(b"".join(p.read_bytes() for _, p in files)).hexdigest()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    feeder = PipeFeeder(data_dir, "train", files)
    feeder.start()
    seen = []
    for epoch in range(3):
        fifo = data_dir / f"train_{epoch}"
        for _ in range(200):
            if fifo.exists():
                break
            threading.Event().wait(0.05)
        assert fifo.exists() and fifo.is_fifo()
        with open(fifo, "rb") as handle:
            seen.append(hashlib.sha256(handle.read()).hexdigest())
    feeder.stop()
    feeder.join(timeout=5)
    assert not feeder.is_alive() and feeder.error is None
    assert seen == [expected] * 3
    assert not any(p.is_fifo() for p in data_dir.iterdir())  # stopping removes the waiting FIFO


def test_pipe_feeder_survives_a_reader_that_stops_early(tmp_path):
    files = list_objects(make_channel_data(tmp_path, "train", 2, size=2_000_000))
    feeder = PipeFeeder(tmp_path, "train", files)
    feeder.start()
    while not (tmp_path / "train_0").exists():
        threading.Event().wait(0.05)
    with open(tmp_path / "train_0", "rb") as handle:
        assert len(handle.read(1000)) == 1000
    while not (tmp_path / "train_1").exists():  # the early close ended epoch 0; epoch 1 is offered
        threading.Event().wait(0.05)
    feeder.stop()
    feeder.join(timeout=5)
    assert feeder.error is None and not feeder.is_alive()
    assert os.path.exists(tmp_path / "train_1") is False
