"""What `dfm probe --local` shows while it runs: one line per candidate (its state, the steps trained, examples/s so
far), as a live table on a terminal (rich) and as plain lines otherwise (a line when a candidate's state changes,
and its progress at most every `every_s` seconds). The processes' own lines go only to the run folder's logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

Echo = Callable[[str], None]
STATES = ("waiting", "running", "done", "not measured", "failed", "stopped")


@dataclass
class BoardRow:
    number: int
    job_name: str
    max_steps: int
    state: str = "waiting"
    step: int | None = None
    examples_per_sec: float | None = None  # so far: the median train window after the first
    note: str = ""

    def text(self) -> str:
        parts = [f"[dfm probe] candidate {self.number} ({self.job_name}): {self.state}"]
        if self.step is not None:
            parts.append(f"step {self.step}/{self.max_steps}")
        if self.examples_per_sec:
            parts.append(f"{self.examples_per_sec:,.0f} examples/s")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


class ProbeBoard:
    """One row per candidate, updated as the runs go; `live` draws them as a table that stays in place."""

    def __init__(
        self,
        rows: list[BoardRow],
        echo: Echo,
        *,
        live: bool = False,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.rows = {row.number: row for row in rows}
        self.echo, self.every_s, self.clock = echo, every_s, clock
        self._shown: dict[int, float] = {}
        self._live = None
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self.table(), console=Console(), refresh_per_second=4, transient=False)

    def __enter__(self) -> ProbeBoard:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self.table(), refresh=True)
            self._live.__exit__(*exc)

    def table(self):
        from rich.table import Table

        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("#", "job", "state", "steps", "examples/s", ""):
            table.add_column(column, justify="right" if column in ("#", "steps", "examples/s") else "left")
        for row in self.rows.values():
            table.add_row(
                str(row.number),
                row.job_name,
                row.state,
                f"{row.step if row.step is not None else '-'}/{row.max_steps}",
                f"{row.examples_per_sec:,.0f}" if row.examples_per_sec else "-",
                row.note,
            )
        return table

    def update(self, number: int, **changes) -> None:
        row = self.rows[number]
        state_changed = "state" in changes and changes["state"] != row.state
        changed = any(getattr(row, key) != value for key, value in changes.items())
        for key, value in changes.items():
            setattr(row, key, value)
        if not changed:
            return
        if self._live is not None:
            self._live.update(self.table())
            return
        now = self.clock()
        if state_changed or now - self._shown.get(number, float("-inf")) >= self.every_s:
            self.echo(row.text())
            self._shown[number] = now
