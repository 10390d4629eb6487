"""Splitting into equal-count files for hosts x workers, single channel and channel multi-path."""

import json
from collections import Counter

import pytest

from launcher.cli import main
from launcher.data import synth, synth_files
from launcher.data.split import Layout, split
from launcher.data.tfrecord import iter_raw_records


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """103 records in 3 uneven files (the splitter does not care how the input is cut)."""
    folder = tmp_path_factory.mktemp("in")
    data = synth.generate(103, 4, field_size=4, feature_size=100)
    for name, part in (("a", slice(0, 50)), ("b", slice(50, 51)), ("c", slice(51, 103))):
        synth_files.write_tfrecords(folder, data.take(part.start, part.stop), files=1, prefix=name)
    return folder, list(iter_raw_records(sorted(folder.iterdir())))


def _counts(folder):
    return {
        p.relative_to(folder).as_posix(): len(list(iter_raw_records([p]))) for p in sorted(folder.rglob("*.tfrecord"))
    }


def test_single_channel_equal_files_remainder_dropped(records, tmp_path, capsys):
    source, originals = records
    out = tmp_path / "out"
    assert main(["data", "split", str(source), "--out", str(out), "--hosts", "2", "--workers", "2"]) == 0
    assert "dropped the last 3 records" in capsys.readouterr().out
    counts = _counts(out)
    assert counts == {f"train/part-{i:05d}.tfrecord": 25 for i in range(4)}
    written = Counter(iter_raw_records(sorted((out / "train").iterdir())))
    assert written == Counter(originals[:100])
    summary = json.loads((out / "split.json").read_text())
    assert (summary["records_per_file"], summary["dropped"], summary["channels"]) == (25, 3, ["train"])


def test_multi_path_one_folder_per_channel_files_divisible_by_hosts(records, tmp_path):
    source, originals = records
    out = tmp_path / "out"
    argv = [
        "data",
        "split",
        str(source),
        "--out",
        str(out),
        "--hosts",
        "3",
        "--workers",
        "2",
        "--multi-path",
        "--channels",
        "4",
    ]
    assert main(argv) == 0
    counts = _counts(out)
    folders = Counter(name.split("/")[0] for name in counts)
    assert folders == {"train": 3, "train-1": 3, "train-2": 3, "train-3": 3}
    assert set(counts.values()) == {8}  # 103 // 12
    written = Counter(r for p in sorted(out.rglob("*.tfrecord")) for r in iter_raw_records([p]))
    assert written == Counter(originals[:96])


def test_bad_layouts_and_overwrites_exit_2(records, tmp_path, capsys):
    source, _ = records
    out = str(tmp_path / "out")
    assert main(["data", "split", str(source), "--out", out, "--workers", "2", "--multi-path", "--channels", "3"]) == 2
    assert "multiple of workers" in capsys.readouterr().err
    assert main(["data", "split", str(source), "--out", out, "--hosts", "200"]) == 2
    assert "cannot fill 200 files" in capsys.readouterr().err
    assert main(["data", "split", str(source), "--out", out]) == 0
    assert main(["data", "split", str(source), "--out", out]) == 2
    assert "--force" in capsys.readouterr().err


def test_layout_paths_round_robin_over_channels(tmp_path):
    layout = Layout(hosts=2, workers=2, multi_path=True)
    assert [p.relative_to(tmp_path).as_posix() for p in layout.paths(tmp_path)] == [
        "train/part-00000.tfrecord",
        "train-1/part-00000.tfrecord",
        "train/part-00001.tfrecord",
        "train-1/part-00001.tfrecord",
    ]
    assert len(Layout(hosts=2, workers=3, files_per_worker=2).paths(tmp_path)) == 12
    with pytest.raises(ValueError, match="only applies with multi-path"):
        Layout(hosts=1, workers=1, channels=2)


def test_progress_counts_every_input_record(records, tmp_path):
    source, originals = records
    reported = []
    report = split(sorted(source.iterdir()), tmp_path / "out", Layout(hosts=2, workers=2), on_records=reported.append)
    assert (report.total, report.dropped) == (103, 3)
    assert sum(reported) == len(originals)  # written and dropped: a bar over the total ends full


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda data: data[:-7], "truncated record at byte"),
        (lambda data: data[:40] + bytes([data[40] ^ 0xFF]) + data[41:], "corrupted record at byte"),
        (lambda data: b"1 0:1 2:1\n" * 3, "corrupted record at byte 0"),
    ],
)
def test_a_damaged_input_is_one_line_naming_the_file_and_nothing_is_written(records, tmp_path, capsys, damage, words):
    source, _ = records
    bad = tmp_path / "in" / "b.tfrecord"
    bad.parent.mkdir()
    bad.write_bytes(damage((source / "a-00000.tfrecord").read_bytes()))
    out = tmp_path / "out"
    assert main(["data", "split", str(source), str(bad), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"dfm: {bad}: not a complete TFRecord file ({words}") and err.count("\n") == 1, err
    assert not out.exists()  # nor the --out folder the command would have made


def test_a_failed_split_leaves_no_new_out_folder_and_an_old_one_as_it_was(records, tmp_path, capsys):
    source, _ = records
    out = tmp_path / "new" / "out"
    assert main(["data", "split", str(source), "--out", str(out), "--hosts", "200"]) == 2
    assert "cannot fill 200 files" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    assert main(["data", "split", str(source), "--out", str(out)]) == 0
    before = _counts(out)
    assert main(["data", "split", str(source), "--out", str(out), "--hosts", "200", "--force"]) == 2
    assert _counts(out) == before and sorted(p.name for p in out.iterdir()) == ["split.json", "train"]


def test_gzip_tfrecords_are_read(records, tmp_path):
    import gzip

    source, originals = records
    packed = tmp_path / "in" / "all.tfrecord.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(b"".join(p.read_bytes() for p in sorted(source.iterdir()))))
    out = tmp_path / "out"
    assert main(["data", "split", str(packed), "--out", str(out), "--workers", "2"]) == 0
    written = Counter(r for p in sorted(out.rglob("*.tfrecord")) for r in iter_raw_records([p]))
    assert written == Counter(originals[:102])


def test_force_swaps_the_new_set_in_only_when_it_is_complete(records, tmp_path, capsys):
    source, _ = records
    out = tmp_path / "out"
    assert main(["data", "split", str(source), "--out", str(out), "--workers", "2", "--multi-path"]) == 0
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert main(["data", "split", str(source), "--out", str(out), "--hosts", "200", "--force"]) == 2
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert main(["data", "split", str(source), "--out", str(out), "--force"]) == 0
    # the new set only: train-1/ of the old multi-path layout is gone, no staging copy is left
    assert sorted(p.relative_to(out).as_posix() for p in out.iterdir()) == ["split.json", "train"]
