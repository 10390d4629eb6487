"""Mutated example configs through `validate` and the dry run: exit 0 or 2, never a traceback or a hang.

Mutations: lines deleted, duplicated or re-indented; keys renamed; values replaced by other types, odd
text and over-long strings; `extends:` pointed at special files (a FIFO, /dev/zero, a folder, a name too
long for the file system, a cycle). Hypothesis shrinks whatever fails to a small reproducer.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, seed, settings, strategies as st  # noqa: E402

from spec_helpers import CONFIGS, REPO, run  # noqa: E402

JOB = "deepfm-fuzz-2026-01-01-00-00-00-000"
SPECIAL_VALUES = ["", "null", "~", "[1, 2]", "{a: 1}", "true", "-1", "0", "1e400", ".nan", "2.10", "'x'",
                  "ml.c5.bogus", "x" * 3000, "!!python/object:os.system", "*alias", "&anchor x", "${UNSET_DFM_VAR}",
                  "s3://", "\"\\0\"", "\"\\t\"", "{horovod: {processes_per_host: 99}}", "[s3://b/a, {file_system_id: fs-1}]"]
SPECIAL_EXTENDS = ["/dev/zero", "/dev/null", "FIFO", "/", ".", "x" * 5000, "../" * 300 + "a.yaml", "/proc/self/mem",
                   "shared/base.yaml", "missing.yaml", "SELF", "shared", "\"\\0\""]

line_edits = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 200)),
    st.tuples(st.just("duplicate"), st.integers(0, 200)),
    st.tuples(st.just("indent"), st.integers(0, 200), st.sampled_from([" ", "  ", "\t", "    "])),
    st.tuples(st.just("value"), st.integers(0, 200), st.one_of(st.sampled_from(SPECIAL_VALUES), st.text(max_size=20))),
    st.tuples(st.just("key"), st.integers(0, 200), st.one_of(st.sampled_from(["nme", "type", "extends", "0", "- a"]),
                                                             st.text(min_size=1, max_size=8))),
)


def mutate(text: str, edits: list[tuple]) -> str:
    lines = text.splitlines()
    for edit in edits:
        if not lines:
            break
        kind, index = edit[0], edit[1] % len(lines)
        line = lines[index]
        if kind == "delete":
            del lines[index]
        elif kind == "duplicate":
            lines.insert(index, line)
        elif kind == "indent":
            lines[index] = edit[2] + line
        elif kind == "value" and ":" in line:
            lines[index] = line.split(":", 1)[0] + ": " + edit[2]
        elif kind == "key" and ":" in line:
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = indent + edit[2] + ":" + line.split(":", 1)[1]
    return "\n".join(lines) + "\n"


def with_extends(text: str, target: str, folder: Path, spec: Path) -> str:
    if target == "FIFO":
        fifo = folder / "fifo.yaml"
        if not fifo.exists():
            os.mkfifo(fifo)
        target = str(fifo)
    elif target == "SELF":
        target = spec.name
    kept = [line for line in text.splitlines() if not line.startswith("extends:")]
    return f"extends: {target}\n" + "\n".join(kept) + "\n"


# CI runs the same examples every time (derandomize: drawn from the test's own source), so a pass or a
# failure is not chance; `make fuzz` runs many more, seeded from the date (DFM_FUZZ_SEED), for humans.
FUZZ_SEED = os.environ.get("DFM_FUZZ_SEED")


@settings(max_examples=int(os.environ.get("DFM_FUZZ_EXAMPLES", "100")), deadline=None, database=None,
          derandomize=FUZZ_SEED is None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@seed(int(FUZZ_SEED or 0))
@given(config=st.sampled_from(CONFIGS), edits=st.lists(line_edits, min_size=1, max_size=4),
       extends=st.one_of(st.none(), st.sampled_from(SPECIAL_EXTENDS)))
def test_mutated_configs_exit_0_or_2_without_traceback(config, edits, extends, capsys, no_aws_env, no_network):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        shutil.copytree(REPO / "configs" / "shared", folder / "shared")
        spec = folder / "spec.yaml"
        text = mutate(config.read_text(), edits)
        if extends is not None:
            text = with_extends(text, extends, folder, spec)
        spec.write_text(text)
        code, _, err = run(capsys, "validate", str(spec))
        assert code in (0, 2) and "Traceback" not in err, err
        hypothesis.event(f"validate exit {code}")
        if code == 0:
            code, _, err = run(capsys, "launch", str(spec), "--dry-run", "--output", "json", "--job-name", JOB)
            assert code in (0, 2) and "Traceback" not in err, err
            assert no_network == []


@pytest.mark.parametrize("target", ["/dev/zero", "FIFO", "x" * 5000, "/", "\"a\\0b\""])
def test_special_extends_targets_fail_at_once_on_one_line(tmp_path, capsys, target):
    spec = tmp_path / "spec.yaml"
    spec.write_text(with_extends((REPO / "configs" / "ps.yaml").read_text(), target, tmp_path, spec))
    code, _, err = run(capsys, "validate", str(spec))
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("value", ["1e400", "[1, 2]", "x", "0", "-5"])
def test_bad_feature_size_in_the_hetero_config_is_one_line(tmp_path, capsys, value):
    """Found by this fuzz once: the ps-memory rule called int() on the raw value and crashed."""
    spec = tmp_path / "spec.yaml"
    shutil.copytree(REPO / "configs" / "shared", tmp_path / "shared")
    text = (REPO / "configs" / "hetero-ps.yaml").read_text()
    spec.write_text(mutate(text, [("value", _line_index(text, "feature_size:"), value)]))
    code, _, err = run(capsys, "validate", str(spec))
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and "hyperparameters.feature_size" in errors[0] and "Traceback" not in err, err


def _line_index(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if line.strip().startswith(start))
