"""Executing a LocalRequest (local_request.py): the hosts' trees and channels, the processes, their supervision
until the job ends, fails, times out or is interrupted, and the summary.

Everything the run does is in the request; here only what needs I/O happens: writing the trees (the
container's /opt/ml per host), linking or feeding the channels, starting and stopping processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from launcher.errors import DfmError
from launcher.local import channels as ch
from launcher.local import checkpoint_store, host_memory, netns, run_summary, run_total
from launcher.local.progress import TerminalFilter, display_for
from launcher.metric_lines import Progress
from launcher.local.local_processes import inherited_env
from launcher.local.local_request import LocalHost, LocalRequest, build_request, request_plan
from launcher.local.supervisor import Supervisor
from launcher.local.watchdog import StallWatchdog

HOST_FOLDERS = ("input/config", "input/data", "model", "output/data", "checkpoints")


@dataclass
class RunResult:
    exit_code: int
    job_dir: Path
    reason: str = ""
    pids: set[int] = field(default_factory=set)  # every process of the run's trees (for the orphan tests)
    isolated: bool = False  # ran in a loopback-only network namespace
    signal: int | None = None  # the signal that killed the failed process from outside (an interruption)


def run_local(plan, *, echo: Callable[[str], None] = print, verbose: bool = False) -> int:
    request = build_request(plan)
    return LocalRun(request, echo=echo, verbose=verbose).run().exit_code


def _file_stamps(folder: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (mtime_ns, size) of every file under `folder`."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*") if p.is_file()
    }


def write_host_tree(host: LocalHost, source_dir: str, source_files: Mapping[str, str] | None = None) -> None:
    """The host's tree as the container has it: folders, config files, its copy of the source dir (with
    the plan's added source files)."""
    root = Path(host.root)
    for folder in HOST_FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    if (root / "code").exists():
        shutil.rmtree(root / "code")
    shutil.copytree(source_dir, root / "code", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, text in (source_files or {}).items():
        (root / "code" / name).write_text(text, encoding="utf-8")
    for name, content in host.config_files.items():
        (root / "input" / "config" / name).write_text(json.dumps(content, indent=1))


# What a process line says when it names why a run failed: the scripts' one-line errors, a full disk.
CAUSES = ("[dfm] error: ", "No space left on device")


class LocalRun:
    def __init__(self, request: LocalRequest, *, echo=print, verbose=False):
        self.request = request
        self.echo = echo
        self.display = display_for(echo)
        self.terminal = TerminalFilter(verbose)  # the log files get every line; the terminal less TF's INFO
        self.job_dir = Path(request.job_dir)
        self.feeders: list[ch.PipeFeeder] = []
        self.progress = Progress()
        self.supervisor: Supervisor | None = None
        self.prepared = False
        self._stop_reason: str | None = None
        self.culprit = None  # the child whose exit failed the run
        self.watchdog: StallWatchdog | None = None
        self._restored: dict[str, dict[str, tuple[int, int]]] = {}  # host -> checkpoint files copied in from the store
        self.first_cause: str | None = None  # the first process line that says why a run failed
        self.memory = host_memory.RunMemory(
            {h.name: h.memory_group for h in request.hosts},
            request.memory_per_host,
            {p.label: p.host for p in request.processes},
        )
        self.memory_failure: host_memory.HostMemory | None = None  # the host killed for going over its limit

    # ---- preparing the hosts ----
    def prepare(self) -> None:
        request = self.request
        if request.problems:
            raise DfmError(request.problems[0])
        if self.job_dir.exists():
            raise DfmError(f"run directory {self.job_dir} already exists; pick another job name or run_dir")
        try:
            Path(request.log_dir).mkdir(parents=True)
        except OSError as err:
            raise DfmError(
                f"cannot create the run directory {self.job_dir}: {err.strerror or err}; "
                f"give a writable folder as local.run_dir (or --run-dir)"
            ) from None
        store = Path(request.checkpoint_store) if request.checkpoint_store else None
        for host in request.hosts:
            write_host_tree(host, request.source_dir, request.source_files)
            if host.checkpoint_dir is not None:
                Path(host.checkpoint_dir).mkdir(parents=True, exist_ok=True)
                if store is not None:
                    checkpoint_store.restore(store, Path(host.checkpoint_dir))
                self._restored[host.name] = _file_stamps(Path(host.checkpoint_dir))
            for feed in host.channels:
                files = [(key, Path(path)) for key, path in feed.files]
                if feed.feed == "mount":
                    Path(feed.target).symlink_to(feed.source, target_is_directory=True)
                elif feed.feed == "pipe":
                    self.feeders.append(ch.PipeFeeder(Path(feed.target).parent, feed.name, files))
                else:
                    ch.link_files(Path(feed.target), files)
        for path, content in request.files.items():
            Path(path).write_text(json.dumps(content))
        for warning in request.warnings:
            self.echo(f"[dfm local] {warning}")
        self.prepared = True

    # ---- starting the processes ----
    def start_processes(self, sup: Supervisor) -> None:
        base = inherited_env(os.environ)
        ranks = {p.rank: p for p in self.request.processes if p.supervision == "rank"}
        for process in self.request.started():
            logs = {process.label: process.log_file}
            rank_labels = None
            if process.role == "mpirun":
                logs.update({p.label: p.log_file for p in ranks.values()})

                def rank_labels(rank: int) -> str:
                    return ranks[rank].label if rank in ranks else f"rank{rank}"

            sup.start(
                process.label,
                process.supervision,
                host_memory.joining(self.memory.group(process.host), process.argv),
                env={**base, **process.env},
                cwd=Path(process.cwd),
                log_files=logs,
                rank_labels=rank_labels,
                cpus=self.request.host(process.host).cpus,
            )

    # ---- supervision ----
    def _on_line(self, label: str, line: str) -> None:
        if self.terminal.shows(label, line):
            self.display.line(f"[{label}] {line}")
        self.take(label, line)

    def take(self, label: str, line: str) -> bool:
        """A process line into the progress and the stall watchdog; -> whether it was a metric line."""
        metric = self.progress.feed(label, line)
        if self.first_cause is None and any(mark in line for mark in CAUSES):
            self.first_cause = f"{label}: {line.strip()}"
        if self.watchdog is not None:
            self.watchdog.saw(label, line, metric, time.monotonic())
        return metric

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return {}

        def stop(signum, _frame):
            self._stop_reason = f"stopped by {signal.Signals(signum).name}"

        return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}

    def supervise(self, sup: Supervisor) -> tuple[int, str]:
        request = self.request
        started = time.monotonic()
        if request.stall_timeout_s:
            self.watchdog = StallWatchdog(request.stall_timeout_s, started)
        master_done_at: float | None = None
        scripts_done_at: float | None = None
        while True:
            sup.drain(timeout=0.2)
            exited = sup.poll()
            over = self._memory_over(sup, exited)
            if over:
                return 1, over
            for child in exited:
                if child.stopped:
                    continue
                if child.returncode != 0:
                    self.culprit = child
                    return 1, f"{child.label} exited with code {child.returncode}"
                if child.label == request.master:
                    master_done_at = time.monotonic()
                if child.role == "script":
                    self._end_host_ps(sup, child.label.split("/")[0])
            for feeder in self.feeders:
                if feeder.error is not None:
                    return 1, f"Pipe feeder for '{feeder.channel}' failed: {feeder.error}"
            now = time.monotonic()
            if not sup.running("script"):
                scripts_done_at = scripts_done_at or now
                if not sup.running("ps") or now - scripts_done_at > request.ps_grace_s:
                    return 0, "all scripts finished"
                continue
            if self._stop_reason:
                return 1, self._stop_reason
            if request.timeout_s and now - started > float(request.timeout_s):
                return 1, f"timed out after {request.timeout_s} s"
            if self.watchdog is not None:
                self.watchdog.sample(sup.running(), now)
                if self.watchdog.expired(now):
                    return self._stalled(sup, now)
            if master_done_at is not None and now - master_done_at > request.master_grace_s:
                names = ", ".join(c.label for c in sup.running("script"))
                return 1, (
                    f"{names} still running {request.master_grace_s:.0f} s after the master finished "
                    f"(on SageMaker this job would run until max_run)"
                )
            self.display.progress(self.progress, now)

    def _memory_over(self, sup: Supervisor, exited: list) -> str | None:
        """Each process's memory measured; the failure when a host went over its limit (its processes killed), with
        that host's largest process as the culprit whose last lines the report shows."""
        self._record_reaped(sup, exited)
        ranks = {p.rank: p.label for p in self.request.processes if p.rank is not None}
        self.memory.sample(sup.processes(), {c.popen.pid: c.label for c in sup.children}, ranks)
        host = self.memory.over()
        if host is None:
            return None
        self.memory_failure = host
        # the last lines shown are the largest process's: the one the kernel's OOM killer picks
        mine = [c for c in sup.children if c.label in host.process_peaks] or sup.children
        self.culprit = max(mine, key=lambda c: host.process_peaks.get(c.label, 0))
        return host_memory.over_reason(host)

    def _record_reaped(self, sup: Supervisor, children: list) -> None:
        for child in children:
            created = sup.create_time(child.popen.pid)
            if child.max_rss is not None and created is not None:
                self.memory.reaped(child.popen.pid, created, child.max_rss, child.label)

    def _finish_memory(self, sup: Supervisor) -> None:
        """The peaks of the processes stopped at the end; the hosts' groups removed."""
        self._record_reaped(sup, sup.children)
        self.memory.finish()

    def _memory_lines(self) -> list[str]:
        """Each host's peak and its processes' (also in the run folder's memory.json), the limit and what held it."""
        lines = self.memory.summary_lines()
        if self.request.memory_per_host:
            lines.append(
                f"  memory limit: {host_memory.size_text(self.request.memory_per_host)} per host, held by the "
                f"{self.memory.mechanism}"
            )
        if self.prepared:
            lines.append(f"  memory peaks: {self.memory.save(self.job_dir)}")
        return lines + ([f"  note: {self.memory.note}"] if self.memory.note else [])

    def _stalled(self, sup: Supervisor, now: float) -> tuple[int, str]:
        """The watchdog's verdict: the likeliest culprit in the reason (its last lines follow in the report),
        what every other process was doing on lines of their own."""
        silences = self.watchdog.silences(sup.running(), now)
        if not silences:
            return 1, self.watchdog.reason(now)
        self.culprit = next(c for c in sup.children if c.label == silences[0].label)
        for other in silences[1:]:
            self.echo(f"[dfm local] stalled: {other.describe()}")
        return 1, f"{self.watchdog.reason(now)}. Likely culprit: {silences[0].describe()}"

    @staticmethod
    def _end_host_ps(sup: Supervisor, host: str) -> None:
        """The toolkit serves a host's ps from its own process, which ends once that host's script has ended
        (a non-master host's check of the master, `curl algo-1:2222`, fails against a gRPC port at once)."""
        for ps in sup.running("ps"):
            if ps.label == f"{host}/ps":
                sup.terminate(ps)

    def run(self) -> RunResult:
        started = time.monotonic()
        try:
            self.prepare()
        except (OSError, shutil.Error) as err:
            raise checkpoint_store.write_failed(err, f"preparing the run folder {self.job_dir}") from None
        namespace = netns.LoopbackNamespace()
        isolated = netns.wanted() and netns.possible() and namespace.start()
        holder = {namespace.pid} - {None}
        if not isolated:
            self.echo(
                "[dfm local] note: processes share this machine's network (TensorFlow servers bind 0.0.0.0); "
                "a loopback-only namespace needs root, unshare, nsenter, setpriv (with --pdeathsig) and ip"
            )
        sup = self.supervisor = Supervisor(self._on_line, wrap=namespace.wrap)
        previous = self._install_signal_handlers()
        code, reason, interruption = 1, "not started", None
        try:
            self.memory.start()
            for feeder in self.feeders:
                feeder.start()
            self.start_processes(sup)
            self.echo(
                f"[dfm local] {self.request.job_name}: {len(sup.children)} processes on "
                f"{len(self.request.hosts)} simulated host(s); {self.request.runtime.note}; "
                f"logs in {self.request.log_dir}"
            )
            self._progress_total()
            with self.display:
                code, reason = self.supervise(sup)
            interruption = self._interruption()  # before the stop: the processes dfm stops are no interruption
        finally:
            sup.stop()
            for feeder in self.feeders:
                feeder.stop()
            for feeder in self.feeders:
                feeder.join(timeout=5)
            sup.close()
            self._finish_memory(sup)
            namespace.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            unsaved = self._save_checkpoints() or self._unwritten_logs(sup)
        if unsaved is not None and code:  # the run's own failure stays the reason
            self.echo(f"[dfm local] {unsaved}")
        elif unsaved is not None:
            code, reason = 1, unsaved
        self._report(code, reason, time.monotonic() - started)
        return RunResult(code, self.job_dir, reason, sup.tracked_pids() | holder, isolated, interruption)

    def _progress_total(self) -> None:
        """What a terminal's progress bar counts the steps out of (the plain display has no bar)."""
        if hasattr(self.display, "total"):
            replicas = sum(1 for p in self.request.processes if p.role in ("master", "worker", "train", "rank"))
            self.display.total = run_total.run_total(request_plan(self.request), replicas)

    def _interruption(self) -> int | None:
        """The signal that ended the failed process when dfm did not send it (a lost instance, simulated)."""
        child = self.culprit
        if child is None or child.returncode is None or child.returncode >= 0 or child.stopped:
            return None
        if self.memory_failure is not None:  # out of memory: the next attempt would end the same way
            return None
        return -child.returncode

    @staticmethod
    def _unwritten_logs(sup: Supervisor) -> str | None:
        for path, err in sup.unwritten.items():
            return checkpoint_store.write_failed(err, "a process's log; its lines were shown here", path).message
        return None

    def _save_checkpoints(self) -> str | None:
        """-> why the store could not be updated (it still names its previous checkpoint), or None."""
        # SageMaker uploads /opt/ml/checkpoints to checkpoint_s3_uri; the next run with that URI starts from it.
        if self.request.checkpoint_store is None:
            return None
        # Like SageMaker's sync, only what a host wrote: its copy of the store's older files must not overwrite
        # what another host (the one that checkpoints) wrote since.
        changed = []
        for host in self.request.hosts:
            folder = Path(host.checkpoint_dir)
            restored = self._restored.get(host.name, {})
            changed += [
                (name, folder / name) for name, stamp in _file_stamps(folder).items() if restored.get(name) != stamp
            ]
        try:
            notes = checkpoint_store.save(Path(self.request.checkpoint_store), changed)
        except DfmError as err:
            return err.message
        for note in notes:
            self.echo(f"[dfm local] checkpoint store {note}")
        return None

    def _report(self, code: int, reason: str, wall_s: float) -> None:
        lines = run_summary.failure_lines(reason, self.culprit, self.supervisor.tails) if code != 0 else []
        lines += run_summary.summary_lines(
            self.request,
            self.progress,
            done=code == 0,
            wall_s=wall_s,
            prepared=self.prepared,
            hidden=self.terminal.hidden,
            memory_lines=self._memory_lines(),
        )
        if code != 0 and self.first_cause:  # last, where a reader looks: other processes' later lines are its echoes
            lines.append(f"[dfm local] cause: {self.first_cause}")
        for line in lines:
            if line:
                self.echo(line)
