"""Each simulated host's memory: held to `local.memory_per_host` as an instance's is, and measured.

Where the kernel allows it (root, the cgroup v1 memory controller mounted and writable), each host gets a memory
cgroup of its own under the launcher's, `dfm-<job>-<id>/<host>`: every process of the host starts in it (a shell
writes its pid there, then execs the command, so nothing is charged elsewhere first; an MPI rank moves into its
host's group in rank_exec.py), `memory.limit_in_bytes` holds the host's processes together to the limit, the
kernel's OOM killer acts when they go over (`memory.oom_control`'s oom_kill), and `memory.max_usage_in_bytes` is
the host's peak. Elsewhere (cgroup v2 only, not root, `DFM_LOCAL_CGROUPS=0`) a sampler sums the resident memory of
the host's processes at every turn of the supervision loop, keeps the highest sum as the host's peak, and kills
the host's processes when the sum is over the limit.

Either way each process's own peak is the kernel's high-water mark of its resident memory: /proc/PID/status VmHWM
read while it runs, ru_maxrss when the launcher reaps it. A role's peak is the sum of its processes' peaks.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import psutil

CGROUPS_ENV = "DFM_LOCAL_CGROUPS"  # "0": no cgroups, the sampler holds the hosts to their limit
MEMORY_ROOT = Path("/sys/fs/cgroup/memory")  # the cgroup v1 memory controller
SUMMARY_FILE = "memory.json"  # in the run folder: each host's peak, its processes' peaks, its limit
RANK_ENV = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK")
GIB = 1 << 30
MIB = 1 << 20


def own_group(root: Path = MEMORY_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> Path | None:
    """The launcher's own memory cgroup folder, when the cgroup v1 memory controller is there and writable."""
    if os.environ.get(CGROUPS_ENV, "1") == "0" or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = root / path.lstrip("/")
            if (folder / "memory.limit_in_bytes").is_file() and os.access(folder, os.W_OK):
                return folder
    return None


def host_groups(job_dir: str, hosts: Iterable[str], parent: Path | None) -> dict[str, str]:
    """host -> the memory cgroup its processes run in (empty without cgroups); named after the run folder, so two
    runs never share one."""
    if parent is None:
        return {host: "" for host in hosts}
    job = Path(job_dir)
    folder = parent / f"dfm-{job.name[:60]}-{hashlib.sha1(str(job).encode()).hexdigest()[:8]}"
    return {host: str(folder / host) for host in hosts}


def joining(group: str, argv: Iterable[str]) -> list[str]:
    """`argv` started inside memory cgroup `group`: a shell writes its own pid into the group, then becomes the
    command (the same process: everything it allocates is charged to the host)."""
    argv = list(argv)
    if not group:
        return argv
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(Path(group) / "cgroup.procs"), *argv]


def machine_memory() -> int:
    return psutil.virtual_memory().total


def limit_warnings(limit: int | None, hosts: int, machine: int) -> list[str]:
    """What a run should know about `limit` per host on a machine with `machine` bytes of memory."""
    if not limit:
        return []
    if limit > machine:
        return [
            f"local.memory_per_host {size_text(limit)} is more than this machine's {size_text(machine)}: "
            "the hosts are held to what the machine has, not to the limit"
        ]
    if limit * hosts > machine:
        return [
            f"{hosts} simulated host(s) x local.memory_per_host {size_text(limit)} is more than this machine's "
            f"{size_text(machine)}: the hosts together may run this machine out of memory before any reaches its limit"
        ]
    return []


def size_text(value: float) -> str:
    if value >= 1 << 40:
        return f"{value / (1 << 40):.1f} TiB"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / MIB:.0f} MiB"


def vm_hwm(pid: int) -> int | None:
    """The process's resident high-water mark in bytes (None: gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass
class HostMemory:
    name: str
    group: str  # its memory cgroup ("" without)
    limit: int | None
    peak: int = 0  # bytes: the cgroup's max usage, or the highest sampled sum of its processes' resident memory
    process_peaks: dict[str, int] = field(default_factory=dict)  # label -> the summed peaks of its processes
    over: bool = False  # killed for going over its limit

    def read(self, name: str) -> str | None:
        try:
            return (Path(self.group) / name).read_text()
        except OSError:
            return None

    def oom_kills(self) -> int:
        for line in (self.read("memory.oom_control") or "").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def group_peak(self) -> int:
        text = self.read("memory.max_usage_in_bytes")
        return int(text) if text and text.strip().isdigit() else 0

    def pids(self) -> list[int]:
        return [int(p) for p in (self.read("cgroup.procs") or "").split()]


class RunMemory:
    """The hosts' memory over a run: `start` makes their groups, `sample` at every turn of the supervision loop,
    `over` names a host that went over its limit (after killing its processes), `finish` removes the groups."""

    def __init__(self, groups: Mapping[str, str], limit: int | None, owners: Mapping[str, str]):
        """`groups`: host -> cgroup (host_groups); `owners`: process label -> its host."""
        self.hosts = {name: HostMemory(name, group, limit) for name, group in groups.items()}
        self.limit = limit
        self.owners = dict(owners)
        self.cgroups = bool(groups) and all(groups.values())
        self._labels: dict[tuple[int, float], str] = {}  # (pid, create time) -> label
        self._peaks: dict[tuple[int, float], int] = {}  # (pid, create time) -> its VmHWM
        self._live: dict[str, list[psutil.Process]] = {}  # host -> its processes at the last sample
        self.note = ""

    @property
    def mechanism(self) -> str:
        return "cgroup v1 memory controller" if self.cgroups else "sampler (resident memory summed per host)"

    def start(self) -> None:
        if not self.cgroups:
            return
        try:
            for host in self.hosts.values():
                folder = Path(host.group)
                folder.mkdir(parents=True, exist_ok=True)
                if host.limit:
                    (folder / "memory.limit_in_bytes").write_text(str(host.limit))
                    swap = folder / "memory.memsw.limit_in_bytes"  # with swap: the limit holds memory and swap
                    if swap.is_file():
                        swap.write_text(str(host.limit))
        except OSError as err:
            self.finish()
            self.cgroups = False
            for host in self.hosts.values():
                host.group = ""
            self.note = f"memory cgroups refused ({err.strerror or err}): the sampler holds the hosts instead"

    def group(self, host: str) -> str:
        return self.hosts[host].group if self.cgroups else ""

    # ---- sampling ----
    def _label(self, proc: psutil.Process, direct: Mapping[int, str], ranks: Mapping[int, str]) -> str | None:
        key = (proc.pid, proc.create_time())
        if key not in self._labels:
            label = direct.get(proc.pid)
            if label is None:
                try:
                    env = proc.environ()
                    rank = next((int(env[n]) for n in RANK_ENV if n in env), None)
                except (psutil.Error, ValueError):
                    rank = None
                label = ranks.get(rank) if rank is not None else None
            if label is None:
                parent = proc.parent()
                label = self._label(parent, direct, ranks) if parent is not None else None
            if label is None:
                return None
            self._labels[key] = label
        return self._labels[key]

    def sample(self, processes: Iterable[psutil.Process], direct: Mapping[int, str], ranks: Mapping[int, str]) -> None:
        """Each process's high-water mark under its label (`direct`: pid -> label of the processes the launcher
        started; `ranks`: MPI rank -> label); without cgroups, each host's summed resident memory too."""
        resident: dict[str, int] = {}
        self._live = {}
        for proc in processes:
            try:
                label = self._label(proc, direct, ranks)
                if label is None or label not in self.owners:
                    continue
                hwm = vm_hwm(proc.pid)
                key = (proc.pid, proc.create_time())
                if hwm is not None:
                    self._peaks[key] = max(self._peaks.get(key, 0), hwm)
                host = self.owners[label]
                self._live.setdefault(host, []).append(proc)
                if not self.cgroups:
                    resident[host] = resident.get(host, 0) + proc.memory_info().rss
            except psutil.Error:
                continue
        for host, total in resident.items():
            self.hosts[host].peak = max(self.hosts[host].peak, total)
        self._sum_peaks()

    def reaped(self, pid: int, create_time: float, max_rss: int, label: str) -> None:
        """The exact peak of a process the launcher started and reaped (ru_maxrss, bytes), under its label: also
        when it ended before any sample saw it."""
        key = (pid, create_time)
        self._labels.setdefault(key, label)
        self._peaks[key] = max(self._peaks.get(key, 0), max_rss)
        self._sum_peaks()

    def _sum_peaks(self) -> None:
        for host in self.hosts.values():
            host.process_peaks = {}
        for key, peak in self._peaks.items():
            label = self._labels.get(key)
            if label in self.owners:
                host = self.hosts[self.owners[label]]
                host.process_peaks[label] = host.process_peaks.get(label, 0) + peak

    # ---- the limit ----
    def over(self) -> HostMemory | None:
        """The first host over its limit, its processes killed at once (SIGKILL, as an instance out of memory
        ends); None while every host is within its limit."""
        if not self.limit:
            return None
        for host in self.hosts.values():
            if self.cgroups:
                if host.oom_kills() == 0:
                    continue
                host.peak = max(host.peak, host.group_peak())
                for pid in host.pids():
                    _kill(pid)
            elif host.peak > host.limit:
                for proc in self._live.get(host.name, []):
                    try:
                        proc.kill()  # psutil checks it is still that process
                    except psutil.Error:
                        pass
            else:
                continue
            host.over = True
            return host
        return None

    def finish(self, settle_s: float = 5.0) -> None:
        """The hosts' final peaks; every process left in a host's group killed and the groups removed."""
        folders = set()
        for host in self.hosts.values():
            if not host.group:
                continue
            folder = Path(host.group)
            folders.add(folder.parent)
            if not folder.is_dir():
                continue
            host.peak = max(host.peak, host.group_peak())
            deadline = time.monotonic() + settle_s
            while True:
                left = host.pids()
                for pid in left:
                    _kill(pid)
                try:
                    folder.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        self.note = f"memory cgroup {folder} could not be removed (processes {left} still in it)"
                        break
                    time.sleep(0.05)
        for folder in folders:
            try:
                folder.rmdir()
            except OSError:
                pass

    # ---- reporting ----
    def document(self) -> dict:
        return {
            "mechanism": self.mechanism,
            "limit_bytes": self.limit,
            "hosts": {
                host.name: {
                    "peak_bytes": host.peak or sum(host.process_peaks.values()),
                    "limit_bytes": host.limit,
                    "over": host.over,
                    "processes": {
                        label: {"role": role_of(label), "peak_bytes": peak}
                        for label, peak in sorted(host.process_peaks.items())
                    },
                }
                for host in self.hosts.values()
            },
        }

    def save(self, job_dir: str | Path) -> Path:
        path = Path(job_dir) / SUMMARY_FILE
        path.write_text(json.dumps(self.document(), indent=1))
        return path

    def summary_lines(self) -> list[str]:
        """`memory: algo-1 peak 982 MiB of 3.0 GiB (resident peaks: master 1.3 GiB, ps 572 MiB)`, a line per host.
        The processes' resident peaks count the shared library pages in each; the host's peak counts them once."""
        lines = []
        for name, host in self.document()["hosts"].items():
            limit = f" of {size_text(host['limit_bytes'])}" if host["limit_bytes"] else ""
            roles = ", ".join(f"{p['role']} {size_text(p['peak_bytes'])}" for p in host["processes"].values())
            lines.append(
                f"  memory: {name} peak {size_text(host['peak_bytes'])}{limit}"
                + (f" (resident peaks: {roles})" if roles else "")
            )
        return lines


def role_of(label: str) -> str:
    """algo-1/master -> master, algo-2/rank3 -> rank3, mpirun -> mpirun."""
    return label.rsplit("/", 1)[-1]


def over_reason(host: HostMemory) -> str:
    return (
        f"{host.name} ran out of memory: peak {size_text(host.peak)} of its {size_text(host.limit or 0)} "
        f"(local.memory_per_host); its processes were killed, as SageMaker ends an instance out of memory"
    )


def _kill(pid: int) -> None:
    try:
        psutil.Process(pid).kill()
    except psutil.Error:
        pass
