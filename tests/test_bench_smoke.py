"""The benchmark harness's plumbing: metric-line parsing, the report, and one real quick item end to end.
No timing is asserted anywhere: timings belong to BENCHMARKS.md, not to tests."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import machine, run_sampled, section, verdict, versions
from bench.distributed import eval_seconds, throughput
from bench.report import render

REPO = Path(__file__).resolve().parent.parent


def _tables(markdown: str) -> list[list[str]]:
    tables, current = [], []
    for line in markdown.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def _assert_well_formed(markdown: str) -> None:
    for table in _tables(markdown):
        width = table[0].count("|")
        assert table[1].replace("---|", "") == "|", table[:2]
        for row in table[2:]:
            assert row.count("|") == width, row


def test_throughput_uses_steady_reports_and_sums_processes():
    output = "\n".join([
        "[algo-1/rank0] [dfm] train step=25 loss=0.6 auc=0.5 examples_per_sec=100.0",  # warm-up, dropped
        "[algo-1/rank0] [dfm] train step=50 loss=0.6 auc=0.5 examples_per_sec=1000.0",
        "[algo-1/rank0] [dfm] train step=75 loss=0.6 auc=0.5 examples_per_sec=3000.0",
        "[algo-1/rank0] [dfm] eval step=75 loss=0.6 auc=0.5",
        "[algo-2/worker] [dfm] train step=25 loss=0.6 auc=0.5 examples_per_sec=10.0",
        "[algo-2/worker] [dfm] train step=50 loss=0.6 auc=0.5 examples_per_sec=500.0",
        "[dfm local] progress: step 75 | 3,500 examples/s",
    ])
    rate, reports = throughput(output)
    assert rate == pytest.approx(2000.0 + 500.0)
    assert reports == 3


def test_eval_seconds_sum_the_evaluations_after_the_first():
    output = "\n".join([
        "[algo-1/master] [dfm] eval step=50 loss=0.5 auc=0.6",
        "[algo-1/master] [dfm] evaluated 8192 rows on 2 worker(s) in 2.74 s",  # traces: left out
        "[algo-1/master] [dfm] evaluated 8192 rows on 2 worker(s) in 0.25 s",
        "[algo-1/master] [dfm] evaluated on the chief in 0.50 s",
        "[algo-1/master] [dfm] train step=75 loss=0.6 auc=0.5 examples_per_sec=1000.0",
    ])
    assert eval_seconds(output) == pytest.approx(0.75)
    assert math.isnan(eval_seconds("[algo-1/master] [dfm] evaluated on the chief in 0.50 s"))  # the first only


def test_throughput_without_metric_lines_is_not_a_number():
    rate, reports = throughput("[algo-1/master] Traceback (most recent call last):\n")
    assert reports == 0 and rate != rate


def test_report_says_not_run_instead_of_a_number():
    done = section("CLI latency", "help < 0.5 s", "subprocesses")
    done.update(item="cli", elapsed_s=1.0, load_after=0.5)
    done["tables"].append({"caption": "", "headers": ["command", "median s"], "rows": [["`dfm --help`", "0.1"]]})
    verdict(done, "help < 0.5 s", True, "0.1 s")
    failed = section("distributed", "", "")
    failed.update(item="distributed", elapsed_s=3.0, not_run="exit 1: no local backend")
    info = {"machine": machine(), "versions": versions(), "quick": True, "started": "now", "elapsed_s": 4}
    markdown = render(info, [done, failed])
    _assert_well_formed(markdown)
    assert "Not run: exit 1: no local backend" in markdown
    assert "| distributed | - | not run | exit 1: no local backend |" in markdown
    assert "| CLI latency | help < 0.5 s | met | 0.1 s |" in markdown


@pytest.mark.slow
def test_quick_cli_item_writes_a_well_formed_report(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--only", "cli", "--repetitions", "1",
                           "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    markdown = out.read_text()
    _assert_well_formed(markdown)
    assert "## Machine and versions" in markdown and "## 1. CLI latency" in markdown
    for command in ("`dfm --help`", "`dfm validate configs/ps.yaml`", "`dfm launch configs/ps.yaml --dry-run`",
                    '`python -c "import sagemaker.tensorflow"`'):
        assert command in markdown
    assert "Not run" not in markdown


def test_run_sampled_counts_each_process_cpu_once_under_its_own_label():
    """A parent that only waits for a child burning 0.6 CPU seconds: the child's time goes to the child's
    label, not again to the parent's (whose children_* time includes the child once it is reaped)."""
    burn = "import time\nwhile time.process_time() < 0.6: pass"
    parent = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}, 'child']); time.sleep(0.5)"
    done, _, cpu = run_sampled([sys.executable, "-c", parent], lambda p: p.cmdline()[-1], timeout=60)
    assert done.returncode == 0
    assert cpu["child"] >= 0.35, cpu  # its last 0.2 s of wall time may fall between samples
    assert cpu[parent] < 0.3, cpu
