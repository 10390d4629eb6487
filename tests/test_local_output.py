"""What `--local` shows on the terminal: every process line but TensorFlow's INFO-level C++ records."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.local.progress import TerminalFilter
from spec_helpers import REPO

# A ps server's output as TF 2.14 writes it (stderr and stdout in one stream), then a chief's warning.
PS_STREAM = """\
2026-11-21 21:20:07.390735: I tensorflow/core/util/port.cc:111] oneDNN custom operations are on. You may see slightly different numerical results.
2026-11-21 21:20:07.445454: I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
2026-11-21 21:20:10.249075: I tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc:457] Started server with target: grpc://127.0.0.1:56999
ps server 1 listening on grpc://127.0.0.1:56999
2026-11-21 21:20:11.941432: I tensorflow/core/distributed_runtime/eager/eager_service_impl.cc:318] SessionOptions: device_count {
  key: "CPU"
  value: 1
}
intra_op_parallelism_threads: 1
gpu_options {
  experimental {
  }
}
allow_soft_placement: true

ps server stopping: SIGTERM (its host's script has ended, or the run)"""

SHOWN = [
    "ps server 1 listening on grpc://127.0.0.1:56999",
    "ps server stopping: SIGTERM (its host's script has ended, or the run)",
]


def shown(terminal, label, text):
    return [line for line in text.splitlines() if terminal.shows(label, line)]


def test_info_records_and_their_continuation_lines_stay_off_the_terminal():
    terminal = TerminalFilter()
    assert shown(terminal, "algo-1/ps", PS_STREAM) == SHOWN
    assert terminal.hidden == len(PS_STREAM.splitlines()) - len(SHOWN)


def test_warnings_errors_and_the_scripts_lines_are_shown():
    stream = """\
2026-11-21 21:20:07.445454: I tensorflow/core/platform/cpu_feature_guard.cc:182] banner
[dfm] tensorflow 2.14.1 gpus=0 vcpus=1
2026-11-21 21:20:12.174365: W tensorflow/core/framework/op_kernel.cc:1839] OP_REQUIRES failed : NOT_FOUND: x
  an indented line of the warning
2026-11-21 21:20:12.174365: E tensorflow/core/common_runtime/base.cc:12] an error
Traceback (most recent call last):
RuntimeError: boom
I1121 21:20:07.390735   1234 port.cc:113] absl-style INFO record, as newer TensorFlow writes
W0000 00:00:1732224007.390735   1234 port.cc:113] absl-style warning before absl's init
[dfm] train step=50 loss=0.57 auc=0.54 examples_per_sec=12744.8"""
    lines = stream.splitlines()
    assert shown(TerminalFilter(), "algo-1/master", stream) == [lines[i] for i in (1, 2, 3, 4, 5, 6, 8, 9)]


def test_each_process_has_its_own_record_state():
    terminal = TerminalFilter()
    assert not terminal.shows("algo-1/ps", "2026-11-21 21:20:11.941432: I tensorflow/x.cc:318] SessionOptions: a {")
    assert terminal.shows("algo-2/worker", "}")  # another process: not inside algo-1/ps's record
    assert not terminal.shows("algo-1/ps", "}")


def test_verbose_shows_everything():
    terminal = TerminalFilter(verbose=True)
    assert shown(terminal, "algo-1/ps", PS_STREAM) == PS_STREAM.splitlines() and terminal.hidden == 0


def test_launch_verbose_reaches_the_local_run_and_needs_local(capsys, monkeypatch, tmp_path):
    import launcher.local

    calls = []
    monkeypatch.setattr(launcher.local, "run_request", lambda request, **kwargs: calls.append(kwargs) or 0)
    args = [
        "launch",
        str(REPO / "configs" / "ps.yaml"),
        "--local",
        "--channel",
        f"train={tmp_path}",
        "--channel",
        f"eval={tmp_path}",
        "--run-dir",
        str(tmp_path / "runs"),
        "--verbose",
    ]
    assert main(args) == 0 and calls[0]["verbose"] is True
    assert main(["launch", str(REPO / "configs" / "ps.yaml"), "--dry-run", "--verbose"]) == 2
    assert "--verbose apply to --local runs" in capsys.readouterr().err


@pytest.mark.parametrize("line", ["", "  indented", "}", "name {", "key: value"])
def test_continuation_shapes_only_continue_an_info_record(line):
    assert TerminalFilter().shows("algo-1/ps", line)
