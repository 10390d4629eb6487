"""The input pipeline: the shard table over hosts x workers (every cell, real files through the real
pipeline), channel choice by name, libsvm = TFRecord, resume skipping, Pipe mode through real FIFOs."""

import numpy as np
import pytest

import entry_support as es
import deepfm_input as I

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too
FIELDS = 2


def write_ids(path, ids):
    """One TFRecord per id; the id is the record's identity (ids = [id, id])."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for rid in ids:
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "label": tf.train.Feature(float_list=tf.train.FloatList(value=[float(rid % 2)])),
                        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[rid] * FIELDS)),
                        "values": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * FIELDS)),
                    }
                )
            )
            writer.write(example.SerializeToString())


def read_ids(dataset):
    return [int(i) for features, _ in dataset for i in features["ids"][:, 0].numpy()]


def cfg_for(data_dir, **kw):
    return I.InputConfig(
        field_size=FIELDS, batch_size=kw.pop("batch_size", 64), data_dir=str(data_dir), shuffle_buffer=0, **kw
    )


@pytest.mark.parametrize("hosts,workers", [(2, 2), (3, 4), (1, 3)])
@pytest.mark.parametrize("multi_path", [True, False])
@pytest.mark.parametrize("s3_shard", [True, False])
@pytest.mark.parametrize("files_per_channel", [24, 3])
def test_shard_table_cells_cover_every_record_once(tmp_path, hosts, workers, multi_path, s3_shard, files_per_channel):
    """Each host gets its channel dirs (S3 sharding simulated by splitting the sorted object list
    across hosts); each worker reads what shard_for gives it; together: every record exactly once.
    24 files shard by file; 3 files (fewer than the shards) shard by record."""
    channels = ["train"] + [f"train-{i}" for i in range(1, workers)] if multi_path else ["train"]
    all_ids, next_id = [], 0
    objects = {}
    for channel in channels:
        objects[channel] = []
        for f in range(files_per_channel):
            ids = list(range(next_id, next_id + 5))
            next_id += 5
            all_ids += ids
            objects[channel].append((f"part-{f:05d}.tfrecord", ids))
    read = []
    for host in range(hosts):
        data_dir = tmp_path / f"host{host}" / "data"
        for channel, parts in objects.items():
            mine = parts[host::hosts] if s3_shard else parts
            for name, ids in mine:
                write_ids(data_dir / channel / name, ids)
            (data_dir / channel).mkdir(parents=True, exist_ok=True)
        for rank in range(workers):
            num_shards, index = I.shard_for(hosts, host, workers, rank, multi_path, s3_shard)
            mine = I.training_channels(channels + ["eval"], workers, rank)
            read += read_ids(I.make_dataset(cfg_for(data_dir), mine, num_shards, index, training=False))
    assert sorted(read) == sorted(all_ids)


def test_shard_table_values():
    assert I.shard_for(3, 2, 4, 1, multi_path=True, s3_shard=True) == (1, 0)
    assert I.shard_for(3, 2, 4, 1, multi_path=True, s3_shard=False) == (3, 2)
    assert I.shard_for(3, 2, 4, 1, multi_path=False, s3_shard=True) == (4, 1)
    assert I.shard_for(3, 2, 4, 1, multi_path=False, s3_shard=False) == (12, 9)
    with pytest.raises(ValueError):
        I.shard_for(2, 2, 1, 0, False, False)


def test_channels_are_chosen_by_name_not_position():
    # SM_CHANNELS is sorted as strings: train-10 comes before train-2.
    channels = sorted(["eval", "train"] + [f"train-{i}" for i in range(1, 12)])
    assert I.training_channels(channels, 4, 0) == ["train", "train-4", "train-8"]
    assert I.training_channels(channels, 4, 2) == ["train-2", "train-6", "train-10"]
    assert I.training_channels(["eval", "train"], 4, 3) == ["train"]  # one path: shared, sharded in code
    with pytest.raises(ValueError, match="no channel"):
        I.training_channels(["train", "train-1"], 4, 3)


def test_hidden_and_marker_files_are_not_read(tmp_path):
    write_ids(tmp_path / "train" / "part-0", [1, 2])
    (tmp_path / "train" / "_SUCCESS").write_text("")
    (tmp_path / "train" / ".part-0.crc").write_text("junk")
    assert sorted(read_ids(I.make_dataset(cfg_for(tmp_path), ["train"], training=False))) == [1, 2]


def test_libsvm_reads_the_same_examples_as_tfrecord(tmp_path):
    train, _ = es.synth_split(300, 0 + 1, seed=5, feature_size=500)
    es.write_tfrecords(tmp_path / "tf" / "train", train, 3)
    es.write_libsvm(tmp_path / "svm" / "train", train, 3)
    out = {}
    for fmt, sub in (("tfrecord", "tf"), ("libsvm", "svm")):
        cfg = I.InputConfig(field_size=39, batch_size=64, data_format=fmt, data_dir=str(tmp_path / sub))
        batches = list(I.make_dataset(cfg, ["train"], training=False))
        out[fmt] = [np.concatenate([b[0][k].numpy() for b in batches]) for k in ("ids", "values")]
        out[fmt].append(np.concatenate([b[1].numpy() for b in batches]))
    for tf_part, svm_part in zip(out["tfrecord"], out["libsvm"]):
        np.testing.assert_allclose(tf_part, svm_part, rtol=1e-6)
    np.testing.assert_array_equal(out["tfrecord"][0], train.ids)


def test_training_repeats_epochs_and_resume_skips_consumed_batches(tmp_path):
    write_ids(tmp_path / "train" / "part-0", list(range(100)))
    cfg = cfg_for(tmp_path, batch_size=10)
    assert len(list(I.make_dataset(cfg, ["train"], epochs=3))) == 30
    resumed = list(I.make_dataset(cfg, ["train"], epochs=3, skip_batches=12))
    assert len(resumed) == 18
    assert read_ids(resumed[:8]) == list(range(20, 100))


@pytest.mark.slow
def test_pipe_mode_reads_each_epoch_from_its_fifo_and_shards_records(tmp_path):
    es.require("pipe")
    env = es.make_container(tmp_path, ["train"], input_mode="Pipe")
    write_ids(tmp_path / "records.tfrecord", list(range(40)))
    payload = (tmp_path / "records.tfrecord").read_bytes()
    data_dir = tmp_path / "input" / "data"
    threads = [es.feed_fifo(str(data_dir / f"train_{epoch}"), payload) for epoch in range(2)]
    cfg = cfg_for(
        data_dir,
        batch_size=8,
        input_mode="Pipe",
        config_dir=env["SM_INPUT_CONFIG_DIR"],
        pipe_state_dir=str(tmp_path / "pipe_state"),
    )
    ids = read_ids(I.make_dataset(cfg, ["train"], num_shards=2, index=1, epochs=2))
    assert ids == list(range(1, 40, 2)) * 2  # both FIFOs read, every second record of each
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
