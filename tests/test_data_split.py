"""Splitting into equal-count files for hosts x workers, single channel and channel multi-path."""

import json
from collections import Counter

import pytest

from launcher.cli import main
from launcher.data import synth
from launcher.data.split import Layout, split
from launcher.data.tfrecord import iter_raw_records


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """103 records in 3 uneven files (the splitter does not care how the input is cut)."""
    folder = tmp_path_factory.mktemp("in")
    data = synth.generate(103, 4, field_size=4, feature_size=100)
    for name, part in (("a", slice(0, 50)), ("b", slice(50, 51)), ("c", slice(51, 103))):
        synth.write_tfrecords(folder, data.take(part.start, part.stop), files=1, prefix=name)
    return folder, list(iter_raw_records(sorted(folder.iterdir())))


def _counts(folder):
    return {p.relative_to(folder).as_posix(): len(list(iter_raw_records([p]))) for p in sorted(folder.rglob("*.tfrecord"))}


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
    argv = ["data", "split", str(source), "--out", str(out), "--hosts", "3", "--workers", "2", "--multi-path",
            "--channels", "4"]
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
        "train/part-00000.tfrecord", "train-1/part-00000.tfrecord",
        "train/part-00001.tfrecord", "train-1/part-00001.tfrecord"]
    assert len(Layout(hosts=2, workers=3, files_per_worker=2).paths(tmp_path)) == 12
    with pytest.raises(ValueError, match="only applies with multi-path"):
        Layout(hosts=1, workers=1, channels=2)


def test_progress_counts_every_input_record(records, tmp_path):
    source, originals = records
    reported = []
    report = split(sorted(source.iterdir()), tmp_path / "out", Layout(hosts=2, workers=2), on_records=reported.append)
    assert (report.total, report.dropped) == (103, 3)
    assert sum(reported) == len(originals)  # written and dropped: a bar over the total ends full
