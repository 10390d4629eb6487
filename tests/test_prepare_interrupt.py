"""`dfm data prepare --local` interrupted on real local Spark while its write tasks run: a terminal's Ctrl-C (SIGINT
to the whole process group: dfm, the JVM, Spark's Python workers) or a SIGTERM to dfm alone ends it with one line,
exit 130 / 143, the previous data in place and no `.partial` folder left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prepare_support import write_clicks, write_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Click logs and a first, complete preparation of them (the data an interrupted rerun must keep)."""
    root = tmp_path_factory.mktemp("prep")
    write_clicks(root / "clicks", 300_000, files=4)
    section = {
        "input": {"uri": "s3://dfm-test-bucket/c/", "format": "libsvm", "local": str(root / "clicks")},
        "eval_fraction": 0.1,
        "files_per_worker": 8,
        "stats": False,
    }
    spec = write_spec(root, section, local={"train": str(root / "out/train"), "eval": str(root / "out/eval")})
    done = _prepare(spec)
    done.wait(timeout=400)
    assert done.returncode == 0, done.stderr.read()
    return spec, root / "out"


def _prepare(spec: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "data", "prepare", str(spec), "--local", "--force"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a command started from a terminal
    )


@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False)], ids=["ctrl-c", "term"])
def test_an_interrupt_while_writing_is_one_line_and_leaves_the_previous_data(prepared, signum, to_group):
    spec, out = prepared
    before = _files(out)
    scratch = out / ".partial"
    process = _prepare(spec)
    deadline = time.monotonic() + 400
    while not (scratch.is_dir() and any(scratch.iterdir())) and process.poll() is None:  # the write tasks are at it
        assert time.monotonic() < deadline, "the write stage never started"
        time.sleep(0.05)
    assert process.poll() is None, "the preparation ended before it could be interrupted"
    (os.killpg if to_group else os.kill)(process.pid, signum)
    _, err = process.communicate(timeout=300)
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, err
    ours = [line for line in err.splitlines() if line.startswith("dfm:")]
    assert ours == [f"dfm: interrupted ({name}): the channel folders keep the data they had; nothing partial is left"]
    # nothing from dfm's own process: no py4j connection torn down under a call, no traceback through dfm (Spark's
    # Python workers, whose output the JVM forwards, may still print the end of a task cancelled under them)
    assert "py4j" not in err.lower() and "ERROR:root" not in err and "/launcher/" not in err, err
    assert _files(out) == before
    assert sorted(p.name for p in out.iterdir()) == ["eval", "prepare", "train"]  # no .partial, no staging copy
