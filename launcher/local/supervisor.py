"""Processes of a local run: start them, stream their output line by line, stop every one of them.

Each child gets its own session, so a Ctrl-C in the terminal reaches only the launcher, which then stops
the children itself. Descendants (mpirun's ranks, anything a script forks) are found two ways: the process
tree, tracked with psutil while it lives, and the child's session, which a descendant keeps even after its
parent has exited and it was re-parented. Stopping reaches both: no process outlives a run.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import psutil

from launcher.local.cores import confined

# mpirun --tag-output writes "[jobid,rank]<stdout>:"; horovodrun writes "[rank]<stdout>:".
_RANK_TAG = re.compile(r"^\[(?:\d+,)?(\d+)\]<(?:stdout|stderr)>:\s?")
# A rank that writes a line in pieces gets every piece tagged; only the first tag says whose line it is.
_ANY_TAG = re.compile(r"\[(?:\d+,)?\d+\]<(?:stdout|stderr)>:")


@dataclass
class Child:
    label: str  # "algo-1/master", "algo-2/ps", "mpirun"
    role: str  # "script" (its exit ends or fails the job), "ps" (stopped when the job ends)
    popen: subprocess.Popen
    log_files: dict[str, str]  # label -> its log file (the child's own, and its ranks')
    rank_labels: Callable[[int], str] | None = None  # for mpirun/horovodrun: rank -> "algo-2/rank1"
    returncode: int | None = None
    logs: dict[str, object] = field(default_factory=dict)
    stopped: bool = False  # ended on purpose by the supervisor (its exit code says nothing about the job)
    max_rss: int | None = None  # bytes: the kernel's peak resident memory of the process, once reaped

    def log_for(self, label: str):
        if label not in self.logs:  # a label without a file of its own (a rank mpirun invented) logs to the child's
            path = self.log_files.get(label, self.log_files[self.label])
            self.logs[label] = open(path, "a", encoding="utf-8")
        return self.logs[label]

    def close_logs(self) -> list[tuple[str, OSError]]:
        """-> (log file, error) for each log whose last lines could not be written."""
        failed = []
        for handle in self.logs.values():
            try:
                handle.close()
            except OSError as err:
                failed.append((handle.name, err))
        return failed


class Supervisor:
    def __init__(
        self,
        on_line: Callable[[str, str], None],
        tail: int = 25,
        wrap: Callable[[list[str]], list[str]] = lambda cmd: cmd,
    ):
        self.wrap = wrap  # e.g. run inside the run's network namespace
        self.on_line = on_line  # (label, line) for every line of every process, in arrival order
        self.children: list[Child] = []
        self.lines: "queue.Queue[tuple[Child, str | None]]" = queue.Queue()
        self.tails: dict[str, deque[str]] = {}
        self._tail = tail
        self._tracked: dict[int, psutil.Process] = {}
        self._readers: list[threading.Thread] = []
        # log file -> the first error writing it (a full disk): its lines still reach the terminal and the tails
        self.unwritten: dict[str, OSError] = {}

    def start(
        self,
        label: str,
        role: str,
        cmd: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log_files: dict[str, str],
        rank_labels: Callable[[int], str] | None = None,
        cpus: Sequence[int] = (),
    ) -> Child:
        """`cpus`: the cores the process and its descendants run on (empty: wherever the launcher runs)."""
        with confined(cpus):
            popen = subprocess.Popen(
                self.wrap(cmd),
                env=env,
                cwd=str(cwd),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        child = Child(label, role, popen, dict(log_files), rank_labels)
        child.log_for(label)  # one log per process, even a silent one
        self.children.append(child)
        self._track(popen.pid)
        reader = threading.Thread(target=self._read, args=(child,), name=f"read-{label}", daemon=True)
        reader.start()
        self._readers.append(reader)
        return child

    def _read(self, child: Child) -> None:
        assert child.popen.stdout is not None
        for raw in child.popen.stdout:
            self.lines.put((child, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
        self.lines.put((child, None))

    def handle(self, child: Child, line: str) -> None:
        label = child.label
        if child.rank_labels is not None:
            match = _RANK_TAG.match(line)
            if match:
                label, line = child.rank_labels(int(match.group(1))), _ANY_TAG.sub("", line[match.end() :])
        try:
            handle = child.log_for(label)
            handle.write(line + "\n")
            handle.flush()
        except OSError as err:
            self.unwritten.setdefault(child.log_files.get(label, child.log_files[child.label]), err)
        self.tails.setdefault(label, deque(maxlen=self._tail)).append(line)
        self.on_line(label, line)

    def drain(self, timeout: float) -> None:
        """Handle the lines that arrived, waiting up to `timeout` for the first."""
        try:
            item = self.lines.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            child, line = item
            if line is not None:
                self.handle(child, line)
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return

    def poll(self) -> list[Child]:
        """Refresh the tracked process tree; return the children that exited since the last poll, those a signal
        killed first: the others may have ended because of them (a chief whose ps was killed), and the first
        failure is the one a run reports."""
        for child in self.children:
            if child.returncode is None:
                self._track(child.popen.pid)
        exited = []
        for child in self.children:
            if child.returncode is None and _reap(child) is not None:
                child.returncode = child.popen.returncode
                exited.append(child)
        return sorted(exited, key=lambda child: child.returncode >= 0)

    def running(self, role: str | None = None) -> list[Child]:
        return [c for c in self.children if c.returncode is None and (role is None or c.role == role)]

    def _track(self, pid: int) -> None:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                self._tracked.setdefault(proc.pid, proc)
        except psutil.NoSuchProcess:
            pass

    def _track_sessions(self) -> None:
        sessions = {child.popen.pid for child in self.children}
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) in sessions:
                    self._tracked.setdefault(proc.pid, proc)
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                continue

    def tracked_pids(self) -> set[int]:
        return set(self._tracked)

    def processes(self) -> list[psutil.Process]:
        """Every process of the run's trees seen so far and still there."""
        return [proc for proc in self._tracked.values() if _alive(proc)]

    def create_time(self, pid: int) -> float | None:
        proc = self._tracked.get(pid)
        try:
            return proc.create_time() if proc is not None else None
        except psutil.Error:
            return None

    def terminate(self, child: Child) -> None:
        """SIGTERM to one child and its descendants, without waiting; `stop` kills what is left at the end."""
        child.stopped = True
        self._track(child.popen.pid)
        sessions = {child.popen.pid}
        for proc in list(self._tracked.values()):
            try:
                if os.getsid(proc.pid) in sessions and _alive(proc):
                    proc.send_signal(signal.SIGTERM)
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                continue

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`: every child and every descendant seen (tree or session)."""
        for child in self.children:
            if child.returncode is None:
                self._track(child.popen.pid)
        self._track_sessions()
        alive = [p for p in self._tracked.values() if _alive(p)]
        for proc in alive:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGCONT)  # a stopped process (SIGSTOP, a debugger) gets its SIGTERM now
            except psutil.NoSuchProcess:
                pass
        still = self._wait_gone(alive, grace_s)
        for proc in still:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        self._wait_gone(still, grace_s)
        for child in self.children:
            try:
                child.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            if child.returncode is None:
                child.returncode = child.popen.returncode

    def _wait_gone(self, procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
        """Wait up to `timeout` for `procs` to end, reaping the launcher's own children with wait4 (which keeps their
        peak memory); -> those still running."""
        deadline = time.monotonic() + timeout
        children = {child.popen.pid: child for child in self.children}
        while True:
            for child in children.values():
                _reap(child)
            still = [
                proc
                for proc in procs
                if (children[proc.pid].popen.returncode is None if proc.pid in children else _alive(proc))
            ]
            if not still or time.monotonic() > deadline:
                return still
            time.sleep(0.02)

    def close(self) -> None:
        """Flush the remaining output and close the logs (after stop)."""
        for reader in self._readers:
            reader.join(timeout=2)
        self.drain(timeout=0)
        for child, reader in zip(self.children, self._readers):
            for path, err in child.close_logs():
                self.unwritten.setdefault(path, err)
            if not reader.is_alive():  # closing under a blocked reader would block too
                child.popen.stdout.close()


def _reap(child: Child) -> int | None:
    """The child's exit code once it has ended (None while it runs), reaped with wait4 so that its peak resident
    memory (ru_maxrss) is kept in `child.max_rss`."""
    if child.popen.returncode is not None or not hasattr(os, "wait4"):
        return child.popen.poll()
    try:
        pid, status, usage = os.wait4(child.popen.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere
        return child.popen.poll()
    if pid == 0:
        return None
    child.popen.returncode = os.waitstatus_to_exitcode(status)
    child.max_rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
    return child.popen.returncode


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
