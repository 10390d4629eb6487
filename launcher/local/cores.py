"""Which of this machine's cores each simulated host owns, and confining a process to them.

On SageMaker a second host brings cores of its own; here every simulated host shares one machine. Each host
gets `cores_per_host` cores (default: the machine's cores divided among the hosts, at least one), and every
process of the host runs confined to them (its CPU affinity, inherited by its threads and children), so the
host's `SM_NUM_CPUS`, the thread budgets the scripts derive from it and the work agree, as on an instance.

When the hosts need more cores than the machine has, they are still given `cores_per_host` cores each, laid
out round-robin over the machine's, so sets overlap and those hosts time-share them: each process still sees
exactly as many cores as its host's `SM_NUM_CPUS` says (TensorFlow sizes some pools from the affinity mask),
and the load spreads evenly. A host asking for more cores than the machine has gets them all.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence


@dataclass(frozen=True)
class CoreLayout:
    per_host: int  # each host's SM_NUM_CPUS
    cpus: Mapping[str, tuple[int, ...]]  # host -> the cores its processes run on (empty: not confined)
    warning: str | None = None  # the hosts time-share cores, or cannot be confined here


def machine_cpus() -> tuple[int, ...]:
    """The cores this process may run on (its own affinity: a launcher started under `taskset` passes its
    limit on); empty where the platform has no CPU affinity."""
    if not hasattr(os, "sched_getaffinity"):
        return ()
    return tuple(sorted(os.sched_getaffinity(0)))


def layout(
    hosts: Sequence[str], available: Sequence[int], cores_per_host: int | None = None, cpu_count: int | None = None
) -> CoreLayout:
    """Each host's cores among `available` (machine_cpus()). With nothing available (no affinity on this
    platform) the hosts are not confined and get `cpu_count` divided among them."""
    hosts, available = list(hosts), sorted(available)
    total = len(available) or cpu_count or os.cpu_count() or 1
    per_host = cores_per_host or max(1, total // max(1, len(hosts)))
    if not available:
        return CoreLayout(
            per_host,
            {h: () for h in hosts},
            "this platform has no CPU affinity: the simulated hosts are not confined to their cores",
        )
    width = min(per_host, total)
    cpus = {
        host: tuple(sorted(available[(i * width + j) % total] for j in range(width))) for i, host in enumerate(hosts)
    }
    needed = per_host * len(hosts)
    warning = None
    if needed > total:
        warning = (
            f"{len(hosts)} simulated host(s) x {per_host} core(s) need {needed} cores, this machine has "
            f"{total}: the hosts time-share them ("
            + "; ".join(f"{h} on {format_cpus(c)}" for h, c in cpus.items())
            + "), so their speed is not what separate instances would give"
        )
    return CoreLayout(per_host, cpus, warning)


def format_cpus(cpus: Sequence[int]) -> str:
    """`0-3,6` for cores 0, 1, 2, 3 and 6 (taskset's list form); `all` for an empty set (not confined)."""
    if not cpus:
        return "all"
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@contextmanager
def confined(cpus: Sequence[int]) -> Iterator[None]:
    """Within this block the calling thread runs on `cpus`, and so does every process it starts (a child
    inherits the affinity of the thread that forks it, from its first instruction, and passes it on to its
    threads and children). Nothing happens for an empty set."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
