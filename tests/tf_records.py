"""TensorFlow's C++ runtime log records in what a process printed, told from what the scripts print.

A test of the scripts' own lines (one `[dfm] error` line first, no traceback, no coordinator pages) leaves these
out: the runtime logs at E, with pages of gRPC detail, whatever the scripts do (a remote call that a failing
closure or a vanished ps cut short). A record runs on over the lines after its header (a Status's several root
errors, gRPC's `:{...}` detail) until a line the scripts or Python print. Lines may carry the local backend's
`[host/role] ` prefix; each source's records are followed apart.
"""

from __future__ import annotations

import re

PREFIX = re.compile(r"^(\[[\w.-]+/[\w.-]+\] )?(.*)$", re.S)
HEADER = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |[IWEF]\d{4} [\d:.]+\s+\d+ )\S+\.(?:cc|h):\d+\]")
SCRIPT_LINE = re.compile(r"^(?:\[dfm\]|Traceback|[A-Z]+:[\w.]+:|[IWEF]\d{4} [\d:.]+\s+\d+ \S+\.py:\d+\])")


def script_lines(lines: list[str]) -> list[str]:
    """`lines` without TensorFlow's C++ records and their continuation lines."""
    in_record: set[str] = set()
    kept = []
    for line in lines:
        source, body = PREFIX.match(line).groups()
        if HEADER.match(body):
            in_record.add(source or "")
        elif SCRIPT_LINE.match(body):
            in_record.discard(source or "")
        if (source or "") not in in_record:
            kept.append(line)
    return kept
