"""`dfm launch SPEC --local`: a Plan run on this machine as SageMaker's TensorFlow container would run it.

Per simulated host: a tree under `<run_dir>/<job>/hosts/algo-N` (the container's /opt/ml), its channels,
its environment; then the processes the toolkit would start (script per host; plus a ps server per host
for parameter_server; one mpirun for horovod), supervised until the job ends, fails, times out or is
interrupted.
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
from typing import Callable

from launcher.errors import DfmError
from launcher.local import channels as ch
from launcher.local import cluster, mpi, netns, runtime
from launcher.local.container import (HostTree, build_host_tree, channel_mode, container_env, host_argv,
                                      host_names, to_host_path)
from launcher.local.progress import Progress, TerminalFilter, display_for
from launcher.local.supervisor import Supervisor

PS_SERVER = Path(__file__).with_name("ps_server.py")
DEFAULT_RUN_DIR = "runs"
PS_GRACE_S = 5.0  # how long stopped ps servers get to exit once every script has finished


@dataclass
class RunResult:
    exit_code: int
    job_dir: Path
    reason: str = ""
    pids: set[int] = field(default_factory=set)  # every process of the run's trees (for the orphan tests)
    isolated: bool = False  # ran in a loopback-only network namespace


def run_local(plan, *, run_dir: str | None = None, timeout_s: float | None = None,
              echo: Callable[[str], None] = print, verbose: bool = False) -> int:
    return LocalRun(plan, run_dir=run_dir, timeout_s=timeout_s, echo=echo, verbose=verbose).run().exit_code


def _inherited_env() -> dict[str, str]:
    # A launcher started inside a job (or a test) must not leak its own container variables to the children.
    env = {k: v for k, v in os.environ.items() if not (k.startswith("SM_") or k in ("TF_CONFIG", "SAGEMAKER_BASE_DIR"))}
    env["PYTHONUNBUFFERED"] = "1"  # lines reach the terminal as they are written
    return env


def checkpoint_store(plan, root: Path) -> Path | None:
    """Where `--local` keeps what SageMaker would sync to checkpoint_s3_uri (None: no sync), per URI."""
    uri = plan.checkpoint_s3_uri
    if not uri:
        return None
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in uri.split("://", 1)[-1].strip("/"))
    return root / "checkpoints" / slug


class LocalRun:
    def __init__(self, plan, *, run_dir=None, timeout_s=None, echo=print, verbose=False):
        self.plan = plan
        self.echo = echo
        self.display = display_for(echo)
        self.terminal = TerminalFilter(verbose)  # the log files get every line; the terminal less TF's INFO
        self.root = Path(run_dir or plan.local.run_dir or DEFAULT_RUN_DIR).resolve()
        self.job_dir = self.root / plan.job_name
        self.timeout_s = timeout_s if timeout_s is not None else plan.local.timeout_s
        self.master_grace_s = plan.local.master_grace_s
        self.hosts = host_names(plan.instance_count)
        self.trees: dict[str, HostTree] = {}
        self.feeders: list[ch.PipeFeeder] = []
        self.progress = Progress()
        self.supervisor: Supervisor | None = None
        self._stop_reason: str | None = None
        self.master_label = "mpirun"  # the process whose end the other hosts wait for
        self.culprit = None  # the child whose exit failed the run
        self.checkpoint_dirs: dict[str, Path] = {}  # host -> folder synced with the checkpoint store (if any)
        self.runtime = runtime.for_plan(plan)  # the Python (and TensorFlow) of every process of the job

    # ---- preparing the hosts ----
    def prepare(self) -> None:
        if self.job_dir.exists():
            raise DfmError(f"run directory {self.job_dir} already exists; pick another job name or run_dir")
        if self.plan.distribution.kind not in ("none", "parameter_server", "horovod", "multi_worker_mirrored"):
            raise DfmError(f"--local cannot run distribution '{self.plan.distribution.kind}'")
        if self.plan.distribution.kind == "horovod":
            mpi.parse_custom_mpi_options(self.plan.distribution.mpi_options)  # refuses what the toolkit cannot read
        sources = {c.name: ch.list_objects(ch.channel_source(c)) for c in self.plan.channels
                   if c.kind not in ("efs", "fsx")}
        (self.job_dir / "logs").mkdir(parents=True)
        store = checkpoint_store(self.plan, self.root)
        for index, host in enumerate(self.hosts):
            tree = build_host_tree(self.plan, self.job_dir / "hosts" / host, host)
            self.trees[host] = tree
            if store is not None:  # resolved now, so a checkpoint_local_path --local cannot emulate fails up front
                self.checkpoint_dirs[host] = self._checkpoint_dir(tree)
                if store.is_dir():
                    shutil.copytree(store, self.checkpoint_dirs[host], dirs_exist_ok=True)
            for channel in self.plan.channels:
                if channel.kind in ("efs", "fsx"):  # a mounted file system: shared by the hosts, writable
                    tree.channel_dir(channel.name).symlink_to(ch.channel_source(channel), target_is_directory=True)
                    continue
                files = ch.files_for_host(sources[channel.name], channel.distribution, index, len(self.hosts))
                if not files:
                    self.echo(f"[dfm local] {host}: channel '{channel.name}' has no files on this host")
                if channel_mode(self.plan, channel) == "Pipe":
                    self.feeders.append(ch.PipeFeeder(tree.data, channel.name, files))
                else:
                    ch.link_files(tree.channel_dir(channel.name), files)
        self._check_argv()

    def _check_argv(self) -> None:
        from launcher.contract import render_argv

        expected = render_argv(self.plan.hyperparameters)  # drops sagemaker_* as the toolkit does
        if list(self.plan.argv) != expected:
            self.echo(f"[dfm local] warning: the plan's argv differs from what the container renders from its "
                      f"hyperparameters ({expected}); running the plan's argv")

    # ---- starting the processes ----
    def _process_env(self) -> dict[str, str]:
        env = _inherited_env()
        # the runtime's bin first, as in an activated virtual environment: `python` there is the job's Python
        env["PATH"] = os.pathsep.join([str(self.runtime.bin_dir), *filter(None, [env.get("PATH")])])
        return env

    def _host_env(self, tree: HostTree, **kw) -> dict[str, str]:
        """What the toolkit adds for the script besides SM_*: PYTHONPATH, its own sys.path with the code dir
        first (here the host's code dir, then the launcher's PYTHONPATH, if any)."""
        env = container_env(self.plan, tree, **kw)
        env["PYTHONPATH"] = os.pathsep.join([str(tree.code), *filter(None, [os.environ.get("PYTHONPATH")])])
        return env

    def _script_env(self, tree: HostTree, tf_config: dict | None = None, **kw) -> dict[str, str]:
        env = {**self._process_env(), **self._host_env(tree, **kw)}
        if tf_config is not None:
            env["TF_CONFIG"] = json.dumps(tf_config)
        return env

    def start_processes(self, sup: Supervisor) -> None:
        plan, kind = self.plan, self.plan.distribution.kind

        def script(host: str) -> list[str]:
            return [self.runtime.python, plan.entry_point, *host_argv(plan, self.trees[host])]

        if kind == "horovod":
            self._start_mpi(sup)
        elif kind == "parameter_server" and len(self.hosts) > 1:
            layout = cluster.Layout.allocate(self.hosts, with_ps=True)
            for host in self.hosts:
                tree = self.trees[host]
                ps_env = {**self._process_env(), "TF_CONFIG": json.dumps(cluster.ps_tf_config(layout, host, ps_task=True))}
                sup.start(f"{host}/ps", "ps", [self.runtime.python, str(PS_SERVER)], env=ps_env, cwd=tree.base)
            for host in self.hosts:
                role = "master" if host == layout.master else "worker"
                env = self._script_env(self.trees[host], cluster.ps_tf_config(layout, host))
                sup.start(f"{host}/{role}", "script", script(host), env=env, cwd=self.trees[host].code)
            self.master_label = f"{layout.master}/master"
        elif kind == "multi_worker_mirrored":
            layout = cluster.Layout.allocate(self.hosts, with_ps=False)
            for host in self.hosts:
                env = self._script_env(self.trees[host], cluster.mwms_tf_config(layout, host))
                sup.start(f"{host}/worker", "script", script(host), env=env, cwd=self.trees[host].code)
            self.master_label = f"{self.hosts[0]}/worker"
        else:  # no distribution (or PS on one host): the toolkit just runs the script on every host
            for host in self.hosts:
                sup.start(f"{host}/train", "script", script(host), env=self._script_env(self.trees[host]),
                          cwd=self.trees[host].code)
            self.master_label = f"{self.hosts[0]}/train"

    def mpi_command(self) -> tuple[list[str], dict[str, str]]:
        """The mpirun (or horovodrun) command of a Horovod plan and its environment (after prepare)."""
        plan = self.plan
        per_host = plan.distribution.processes_per_host
        # the first host's toolkit exports its environment to every rank, each host's /opt/ml paths its own
        envs = {h: self._host_env(self.trees[h], current_host=self.hosts[0]) for h in self.hosts}
        master_env = {**self._process_env(), **envs[self.hosts[0]]}
        rank_hosts = mpi.write_rank_hosts(self.job_dir / "rank_hosts.json", per_host,
                                          [(envs[h], self.trees[h]) for h in self.hosts])
        # the toolkit exports what it sets for the script (SM_*, PYTHONPATH); PYTHONUNBUFFERED is dfm's own
        exported = sorted(n for n in envs[self.hosts[0]] if n.startswith("SM_")) + ["PYTHONPATH", "PYTHONUNBUFFERED"]
        cmd = mpi.launcher_command(ranks=per_host * len(self.hosts), rank_hosts=rank_hosts,
                                   program=mpi.script_command(self.runtime, plan.entry_point, list(plan.argv)),
                                   exported=exported, custom_options=plan.distribution.mpi_options,
                                   runtime=self.runtime, environ=master_env)
        return cmd, master_env

    def _start_mpi(self, sup: Supervisor) -> None:
        per_host = self.plan.distribution.processes_per_host
        cmd, env = self.mpi_command()
        sup.start("mpirun", "script", cmd, env=env, cwd=self.trees[self.hosts[0]].code,
                  rank_labels=lambda rank: f"{self.hosts[rank // per_host]}/rank{rank}")

    # ---- supervision ----
    def _on_line(self, label: str, line: str) -> None:
        if self.terminal.shows(label, line):
            self.display.line(f"[{label}] {line}")
        self.progress.feed(label, line)

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return {}

        def stop(signum, _frame):
            self._stop_reason = f"stopped by {signal.Signals(signum).name}"

        return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}

    def supervise(self, sup: Supervisor) -> tuple[int, str]:
        started = time.monotonic()
        master_done_at: float | None = None
        scripts_done_at: float | None = None
        while True:
            sup.drain(timeout=0.2)
            for child in sup.poll():
                if child.stopped:
                    continue
                if child.returncode != 0:
                    self.culprit = child
                    return 1, f"{child.label} exited with code {child.returncode}"
                if child.label == self.master_label:
                    master_done_at = time.monotonic()
                if child.role == "script":
                    self._end_host_ps(sup, child.label.split("/")[0])
            for feeder in self.feeders:
                if feeder.error is not None:
                    return 1, f"Pipe feeder for '{feeder.channel}' failed: {feeder.error}"
            now = time.monotonic()
            if not sup.running("script"):
                scripts_done_at = scripts_done_at or now
                if not sup.running("ps") or now - scripts_done_at > PS_GRACE_S:
                    return 0, "all scripts finished"
                continue
            if self._stop_reason:
                return 1, self._stop_reason
            if self.timeout_s and now - started > float(self.timeout_s):
                return 1, f"timed out after {self.timeout_s} s"
            if master_done_at is not None and now - master_done_at > self.master_grace_s:
                names = ", ".join(c.label for c in sup.running("script"))
                return 1, (f"{names} still running {self.master_grace_s:.0f} s after the master finished "
                           f"(on SageMaker this job would run until max_run)")
            self.display.progress(self.progress, now)

    @staticmethod
    def _end_host_ps(sup: Supervisor, host: str) -> None:
        """The toolkit serves a host's ps from its own process, which ends once that host's script has ended
        (a non-master host's check of the master, `curl algo-1:2222`, fails against a gRPC port at once)."""
        for ps in sup.running("ps"):
            if ps.label == f"{host}/ps":
                sup.terminate(ps)

    def run(self) -> RunResult:
        started = time.monotonic()
        self.prepare()
        namespace = netns.LoopbackNamespace()
        isolated = netns.wanted() and netns.possible() and namespace.start()
        holder = {namespace.pid} - {None}
        if not isolated:
            self.echo("[dfm local] note: processes share this machine's network (TensorFlow servers bind 0.0.0.0); "
                      "a loopback-only namespace needs root, unshare, nsenter and ip")
        sup = self.supervisor = Supervisor(self.job_dir / "logs", self._on_line, wrap=namespace.wrap)
        previous = self._install_signal_handlers()
        code, reason = 1, "not started"
        try:
            for feeder in self.feeders:
                feeder.start()
            self.start_processes(sup)
            self.echo(f"[dfm local] {self.plan.job_name}: {len(sup.children)} processes on "
                      f"{len(self.hosts)} simulated host(s); {self.runtime.note}; logs in {self.job_dir / 'logs'}")
            with self.display:
                code, reason = self.supervise(sup)
        finally:
            sup.stop()
            for feeder in self.feeders:
                feeder.stop()
            for feeder in self.feeders:
                feeder.join(timeout=5)
            sup.close()
            namespace.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._save_checkpoints()
        self._report(code, reason, time.monotonic() - started)
        return RunResult(code, self.job_dir, reason, sup.tracked_pids() | holder, isolated)

    def _save_checkpoints(self) -> None:
        # SageMaker uploads /opt/ml/checkpoints to checkpoint_s3_uri; the next run with that URI starts from it.
        store = checkpoint_store(self.plan, self.root)
        if store is None:
            return
        for folder in self.checkpoint_dirs.values():
            if folder.is_dir() and any(folder.iterdir()):
                shutil.copytree(folder, store, dirs_exist_ok=True)

    def _checkpoint_dir(self, tree: HostTree) -> Path:
        """The host folder SageMaker syncs with checkpoint_s3_uri (checkpoint_local_path, /opt/ml/checkpoints by default)."""
        local_path = self.plan.checkpoint_local_path or "/opt/ml/checkpoints"
        mapped = to_host_path(local_path, tree)
        if mapped == local_path:
            raise DfmError(f"--local can only emulate checkpoint_local_path under /opt/ml, not {local_path}")
        Path(mapped).mkdir(parents=True, exist_ok=True)
        return Path(mapped)

    def _hidden_note(self) -> str:
        hidden = self.terminal.hidden
        return f" (all lines; {hidden} TensorFlow INFO lines were not shown here, --verbose shows them)" if hidden else ""

    def _report(self, code: int, reason: str, wall_s: float) -> None:
        sup = self.supervisor
        if code != 0:
            self.echo(f"[dfm local] FAILED: {reason}")
            child = self.culprit
            if child is not None:
                # mpirun's ranks have their own labels: show each of them when mpirun is the one that failed
                labels = [label for label in sup.tails if label == child.label
                          or (child.rank_labels is not None and "/rank" in label)]
                for label in labels:
                    self.echo(f"[dfm local] last lines of {label}:")
                    for line in list(sup.tails[label])[-12:]:
                        self.echo(f"    {line}")
        p = self.progress
        speed = p.mean_examples_per_sec
        lines = [f"[dfm local] {'done' if code == 0 else 'stopped'} in {wall_s:.1f} s",
                 f"  examples/s: {speed:,.0f}" if speed else "  examples/s: (no train metric lines)",
                 "  final eval: " + (" ".join(f"{k}={v:g}" for k, v in p.eval.items()) if p.eval else "(none)"),
                 f"  ran on: {self.runtime.note}",
                 f"  model: {self.trees[self.hosts[0]].model}" if self.trees else "",
                 f"  logs: {self.job_dir / 'logs'}" + self._hidden_note()]
        lines += [f"  exported: {path}" for path in p.exported]
        for line in lines:
            if line:
                self.echo(line)
