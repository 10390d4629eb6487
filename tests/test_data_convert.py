"""libsvm -> TFRecord: exact round trip, and bad rows reported with file:line, nothing half-written."""

import numpy as np
import pytest

from launcher.cli import main
from launcher.data import libsvm, synth, synth_files
from launcher.data.tfrecord import read_examples


def test_round_trip_from_synthetic_libsvm(tmp_path):
    data = synth.generate(300, 2, field_size=6, feature_size=400)
    sources = synth_files.write_libsvm(tmp_path / "txt", data, files=2)
    assert (
        main(
            ["data", "convert", *map(str, sources), "--out", str(tmp_path / "tf"), "--field-size", "6", "--files", "4"]
        )
        == 0
    )
    outputs = sorted((tmp_path / "tf").iterdir())
    assert [len(read_examples([p], 6)[0]) for p in outputs] == [75, 75, 75, 75]
    # Rows are dealt round-robin: file k holds rows k, k+4, ...
    labels, ids, values = read_examples([outputs[1]], 6)
    np.testing.assert_array_equal(ids, data.ids[1::4])
    np.testing.assert_array_equal(values, data.values[1::4])
    np.testing.assert_array_equal(labels, data.labels[1::4])


def _write_with_bad_rows(path):
    path.write_text(
        "1 0:1 5:0.5 9:1\n"
        "0 0:1 5:0.5\n"  # line 2: a pair missing
        "\n"  # blank lines are skipped, but still counted for line numbers
        "0 1:1 6:2 9:1\n"
        "1 1:1 6:x 9:1\n"  # line 5: bad value
        "2 1:1 6:1 9:1\n"  # line 6: label out of range
        "0 1:1 6:1 9:1 10:1\n"  # line 7: one pair too many
    )


def test_bad_rows_fail_with_line_numbers_and_write_nothing(tmp_path, capsys):
    """Bad input found while reading the data: exit 1 (exit 2 is for what is refused before any work)."""
    source = tmp_path / "bad.libsvm"
    _write_with_bad_rows(source)
    out = tmp_path / "tf"
    assert main(["data", "convert", str(source), "--out", str(out), "--field-size", "3"]) == 1
    err = capsys.readouterr().err
    for line in (2, 5, 6, 7):
        assert f"{source}:{line}:" in err
    assert "4 bad rows (of 6)" in err and f"first at {source}:2: 2 id:value pairs, expected 3" in err
    assert not out.exists()


def test_skip_bad_writes_the_good_rows_and_reports_the_count(tmp_path, capsys):
    source = tmp_path / "bad.libsvm"
    _write_with_bad_rows(source)
    out = tmp_path / "tf"
    assert main(["data", "convert", str(source), "--out", str(out), "--field-size", "3", "--skip-bad"]) == 0
    assert "skipped 4 bad rows" in capsys.readouterr().out
    labels, ids, _ = read_examples(sorted(out.iterdir()), 3)
    np.testing.assert_array_equal(labels, [1, 0])
    np.testing.assert_array_equal(ids, [[0, 5, 9], [1, 6, 9]])


@pytest.mark.parametrize(
    "row, reason",
    [
        ("1 0:1 2:1", "2 id:value pairs, expected 3"),
        ("x 0:1 2:1 3:1", "label 'x' is not a number"),
        ("1 0:1 2 3:1", "pair 2 '2' is not id:value"),
        ("1 0:1 -2:1 3:1", "id -2 is outside"),
        ("1 0:1 2:1 300:1", "id 300 is outside [0, 100)"),
        ("1 0:1 2:inf 3:1", "value inf is not finite"),
        ("1 0:1 2:1e39 3:1", "value 1e39 is beyond float32"),
        ("1 0:1 2:-3.5e38 3:1", "value -3.5e38 is beyond float32"),
    ],
)
def test_parse_row_reasons(row, reason):
    with pytest.raises(ValueError) as err:
        libsvm.parse_row(row, 3, 100)
    assert reason in str(err.value)


def test_parse_row_accepts_a_good_row():
    assert libsvm.parse_row("0 3:1 17:0.25 40:1\n", 3, 100) == (0.0, [3, 17, 40], [1.0, 0.25, 1.0])


def test_a_value_beyond_float32_is_a_bad_row_not_an_inf_in_the_output(tmp_path, capsys):
    """1e39 is a finite double but inf as the float32 the records hold: training would meet inf/NaN."""
    source = tmp_path / "big.libsvm"
    source.write_text("1 0:1 5:0.5 9:1\n0 0:1 5:1e39 9:1\n0 1:1 6:3.4e38 9:1\n")
    out = tmp_path / "tf"
    assert main(["data", "convert", str(source), "--out", str(out), "--field-size", "3"]) == 1
    assert f"{source}:2: pair 2: value 1e39 is beyond float32" in capsys.readouterr().err
    assert main(["data", "convert", str(source), "--out", str(out), "--field-size", "3", "--skip-bad"]) == 0
    assert "skipped 1 bad rows" in capsys.readouterr().out
    _, _, values = read_examples(sorted(out.iterdir()), 3)
    assert np.isfinite(values).all() and len(values) == 2


def test_an_interrupted_convert_leaves_no_file_behind(tmp_path):
    """Files are written under hidden temporary names and renamed when complete: a failure half-way (here the
    progress callback, called per block of lines read: here when the second file's block is read, after the first
    one's rows were written) leaves no partial file a training job would read."""
    data = synth.generate(300, 2, field_size=6, feature_size=400)
    sources = synth_files.write_libsvm(tmp_path / "txt", data, files=2)
    seen = []

    def interrupt(size):
        seen.append(size)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        libsvm.convert(sources, tmp_path / "tf", 6, files=2, on_bytes=interrupt)
    assert list((tmp_path / "tf").iterdir()) == []


def _convert(*argv):
    return main(["data", "convert", *map(str, argv), "--field-size", "6"])


def test_a_non_empty_out_is_refused_and_force_replaces_the_whole_set(tmp_path, capsys):
    data = synth.generate(40, 2, field_size=6, feature_size=400)
    sources = synth_files.write_libsvm(tmp_path / "txt", data, files=1)
    out = tmp_path / "tf"
    assert _convert(*sources, "--out", out, "--files", "4") == 0
    capsys.readouterr()
    assert _convert(sources[0], "--out", out, "--files", "1") == 2
    err = capsys.readouterr().err
    assert str(out) in err and "--force" in err and err.count("\n") == 1
    assert len(list(out.iterdir())) == 4  # refused before any work: the old set is as it was
    assert _convert(sources[0], "--out", out, "--files", "1", "--force") == 0
    assert [p.name for p in out.iterdir()] == ["part-00000.tfrecord"]  # no old part-00001..3 beside the new one
    assert not list(tmp_path.glob(".*"))  # no staging copy left


def test_force_keeps_the_old_set_when_the_new_one_fails(tmp_path, capsys):
    data = synth.generate(40, 2, field_size=6, feature_size=400)
    sources = synth_files.write_libsvm(tmp_path / "txt", data, files=1)
    out = tmp_path / "tf"
    assert _convert(*sources, "--out", out, "--files", "2") == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (tmp_path / "bad.libsvm").write_text("not libsvm\n")
    assert _convert(tmp_path / "bad.libsvm", "--out", out, "--force") == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not list(tmp_path.glob(".*"))


def test_no_empty_files_beyond_the_rows(tmp_path, capsys):
    data = synth.generate(5, 2, field_size=6, feature_size=400)
    sources = synth_files.write_libsvm(tmp_path / "txt", data, files=1)
    assert _convert(*sources, "--out", tmp_path / "tf", "--files", "100") == 0
    assert "wrote 5 rows to 5 files (not 100" in capsys.readouterr().out
    outputs = sorted((tmp_path / "tf").iterdir())
    assert [len(read_examples([p], 6)[0]) for p in outputs] == [1] * 5


@pytest.mark.parametrize(
    "content, words",
    [
        ("", "all empty or blank"),
        ("1,2,3\n4,5,6\n", "2 bad; first at"),
        (bytes(range(256)) * 4, "bad; first at"),
    ],
)
def test_no_good_rows_fails_with_the_counts_and_the_first_bad_rows(tmp_path, capsys, content, words):
    source = tmp_path / "in.libsvm"
    source.write_bytes(content) if isinstance(content, bytes) else source.write_text(content)
    assert _convert(source, "--out", tmp_path / "tf", "--skip-bad") == 1
    err = capsys.readouterr().err
    assert "no good rows in 1 input files" in err and words in err, err
    assert not (tmp_path / "tf").exists()


def test_gzip_input_is_read_as_its_text(tmp_path, capsys):
    import gzip

    data = synth.generate(30, 2, field_size=6, feature_size=400)
    (source,) = synth_files.write_libsvm(tmp_path / "txt", data, files=1)
    packed = tmp_path / "day_0.gz"
    packed.write_bytes(gzip.compress(source.read_bytes()))
    assert _convert(packed, "--out", tmp_path / "tf") == 0
    assert "wrote 30 rows to 1 files" in capsys.readouterr().out
    labels, ids, _ = read_examples(sorted((tmp_path / "tf").iterdir()), 6)
    np.testing.assert_array_equal(ids, data.ids)
    truncated = tmp_path / "cut.gz"
    truncated.write_bytes(packed.read_bytes()[:-20])
    assert _convert(truncated, "--out", tmp_path / "tf2") == 1
    err = capsys.readouterr().err
    assert f"{truncated}: damaged gzip data" in err and err.count("\n") == 1


@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_unwritable_out_is_one_line_exit_2_before_any_work(tmp_path, capsys, where):
    data = synth.generate(5, 2, field_size=6, feature_size=400)
    sources = synth_files.write_libsvm(tmp_path / "txt", data, files=1)
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "tf" if where == "file" else "/proc/dfm-no-such/tf"
    assert _convert(*sources, "--out", out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dfm: --out {out}: ") and err.count("\n") == 1 and "Traceback" not in err, err


_TOKENS = [
    "0",
    "1",
    "-0",
    "0.5",
    ".5",
    "5.",
    "-.5",
    "007",
    "0.1",
    "-0.0",
    "1.0000000000000002",
    "0.000000000000001",
    "123456789012345.6",
    "99999999.99999999",
    "9007199254740993",
    "12345678901234567",
    "0.12345678901234567",
    "-1234567890.1234567890",
    "1.2.3",
    ".",
    "-",
    "--1",
    "1-2",
    "1e3",
    "+1",
    "1_0",
    "nan",
    "inf",
    "3.4e39",
    "\u0663",
    "",
    "a",
]


def _mangled(rng, row):
    """A row with a few tokens, ids, separators or whole pairs changed: many bad rows, some odd but good ones."""
    pairs = row.split(" ")
    for _ in range(rng.integers(0, 4)):
        j, token = int(rng.integers(len(pairs))), str(rng.choice(_TOKENS))
        kind = rng.integers(6)
        if j == 0 or kind == 0:
            pairs[j] = token if j == 0 else f"{pairs[j].split(':')[0]}:{token}"
        elif kind == 1:
            pairs[j] = f"{token}:{pairs[j].split(':')[-1]}"
        elif kind == 2:
            pairs[j] = token
        elif kind == 3:
            del pairs[j]
        else:
            pairs.insert(j, token)
    text = str(rng.choice([" "] * 8 + ["  ", "\t"])).join(pairs)
    return str(rng.choice([text, text, text, "", " \t", " " + text, text + "\r"]))


@pytest.mark.parametrize("ended", [True, False])
def test_the_block_parser_agrees_with_the_row_parser_on_every_row(ended):
    """parse_libsvm_lines (arrays over a block's bytes) keeps parse_libsvm's verdict, reason and value bit for
    bit: good rows in order, bad rows by index, blank lines skipped; 16-digit values, '5.', '.5', '-0' included."""
    from launcher.data.prepare_codec import BadRow, parse_libsvm, parse_libsvm_lines

    rng = np.random.default_rng(7)
    data = synth.generate(400, 3, field_size=5, feature_size=1000)
    rows = [
        f"{int(label)} " + " ".join(f"{i}:{v:.9g}" for i, v in zip(ids, values))
        for label, ids, values in zip(data.labels, data.ids, data.values)
    ]
    for feature_size in (None, 1000, 500):
        lines = [_mangled(rng, row) if rng.random() < 0.4 else row for row in rows]
        lines = [line + "\n" for line in lines] if ended else lines
        for size in (len(lines), 3):  # a whole block (rows picked by regex) and small ones (mostly all plain)
            parts = [
                parse_libsvm_lines(lines[i : i + size], 5, feature_size, ended=ended)
                for i in range(0, len(lines), size)
            ]
            labels, ids, values = (np.concatenate([part[j] for part in parts]) for j in range(3))
            bad = [(i * size + index, err) for i, part in enumerate(parts) for index, err in part[3]]
            expected, reasons = [], []
            for index, line in enumerate(lines):
                if line.strip():
                    try:
                        expected.append(parse_libsvm(line, 5, feature_size))
                    except BadRow as err:
                        reasons.append((index, str(err)))
            assert [(index, str(err)) for index, err in bad] == reasons
            assert len(expected) > 50 and len(reasons) > 20
            assert labels.tobytes() == np.array([row[0] for row in expected], np.float64).tobytes()
            assert ids.tobytes() == np.array([row[1] for row in expected], np.int64).tobytes()
            assert values.tobytes() == np.array([row[2] for row in expected], np.float64).tobytes()


@pytest.mark.parametrize("size", [64, 1 << 20])
def test_a_files_bytes_parse_as_the_lines_spark_reads_from_it(size):
    """`dfm data prepare` parses a libsvm file's bytes in chunks of whole lines (line_chunks, parse_libsvm_bytes):
    the rows, bad rows and reasons of the lines Hadoop's reader gives sc.textFile (ended by \\n, \\r\\n or \\r, a
    leading byte order mark dropped, undecodable bytes replaced), lines longer than a chunk included."""
    import re

    from launcher.data.prepare_codec import line_chunks, parse_libsvm_bytes, parse_libsvm_lines

    rng = np.random.default_rng(11)
    data = synth.generate(300, 3, field_size=5, feature_size=1000)
    rows = [
        f"{int(label)} " + " ".join(f"{i}:{v:.9g}" for i, v in zip(ids, values))
        for label, ids, values in zip(data.labels, data.ids, data.values)
    ]
    rows = [_mangled(rng, row) if rng.random() < 0.3 else row for row in rows]
    ends = [str(rng.choice(["\n"] * 6 + ["\r\n", "\r"])) for _ in rows]
    text = b"\xef\xbb\xbf" + "".join(row + end for row, end in zip(rows, ends)).encode() + b"1 \xff:1\n" + b"0 1:2"
    lines = [line.decode("utf-8", "replace") for line in re.split(rb"\r\n|\r|\n", text[3:])][:-1] + ["0 1:2"]
    labels, ids, values, bad = parse_libsvm_lines(lines, 5, 1000)
    chunks = list(line_chunks(text, size))
    parts = [parse_libsvm_bytes(chunk, 5, 1000) for chunk in chunks]
    assert all(chunk.endswith(b"\n") and (len(chunk) <= size or chunk.count(b"\n") == 1) for chunk in chunks)
    assert [(line, str(err)) for part in parts for line, err in part[3]] == [(lines[i], str(err)) for i, err in bad]
    assert len(bad) > 30 and lines[bad[-2][0]] == "1 \ufffd:1" and len(labels) > 150
    for j, expected in enumerate((labels, ids, values)):
        assert np.concatenate([part[j] for part in parts]).tobytes() == expected.tobytes()
