"""The supervisor's report of exited processes, with real processes."""

from __future__ import annotations

import os
import sys

from launcher.local.supervisor import Supervisor


def test_a_process_a_signal_killed_comes_before_one_that_exited_with_a_code_in_the_same_poll(tmp_path):
    """A chief exits with code 1 once its ps is killed: seen in one poll, the killed ps is the failure to report,
    whichever of the two was started first."""
    sup = Supervisor(on_line=lambda label, line: None)
    exits = "import sys; sys.exit(1)"
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    for label, code in (("algo-1/master", exits), ("algo-3/ps", killed)):
        sup.start(
            label,
            "script",
            [sys.executable, "-c", code],
            env=dict(os.environ),
            cwd=tmp_path,
            log_files={label: str(tmp_path / f"{label.replace('/', '-')}.log")},
        )
    for child in sup.children:
        child.popen.wait(timeout=60)
    try:
        assert [(child.label, child.returncode) for child in sup.poll()] == [("algo-3/ps", -9), ("algo-1/master", 1)]
        assert sup.poll() == []
    finally:
        sup.stop()
        sup.close()
