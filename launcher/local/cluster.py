"""The cluster layout: TF_CONFIG as sagemaker-tensorflow-training builds it, with every host on loopback.

In the container, hosts are `algo-1..N` and the ports fixed (master/worker 2222, ps 2223, MWMS 8890). Here
every host is 127.0.0.1, so each (host, role) gets its own free loopback port instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.facts.contract import bundled_cluster

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A free port outside the kernel's ephemeral range, by the bundled scripts' own policy
    (`hetero_cluster.free_port`, which the chief's worker tasks use too): one walk per process."""
    return bundled_cluster().free_port()


@dataclass(frozen=True)
class Layout:
    """Loopback addresses for the container's (host, port) pairs: `script[host]` is the host's
    master/worker address (container port 2222, or 8890 for MWMS), `ps[host]` its ps address (2223)."""

    hosts: tuple[str, ...]
    script: dict[str, str]
    ps: dict[str, str]

    @classmethod
    def allocate(cls, hosts: list[str], *, with_ps: bool) -> "Layout":
        script = {h: f"{LOOPBACK}:{free_port()}" for h in hosts}
        ps = {h: f"{LOOPBACK}:{free_port()}" for h in hosts} if with_ps else {}
        return cls(tuple(hosts), script, ps)

    @property
    def master(self) -> str:
        return self.hosts[0]


def ps_cluster(layout: Layout) -> dict[str, list[str]]:
    # master = first host, ps on every host (only with more than one host), worker = the other hosts.
    cluster: dict[str, list[str]] = {"master": [layout.script[layout.master]]}
    if len(layout.hosts) > 1:
        cluster["ps"] = [layout.ps[h] for h in layout.hosts]
    workers = layout.hosts[1:]
    if workers:
        cluster["worker"] = [layout.script[h] for h in workers]
    return cluster


def ps_tf_config(layout: Layout, host: str, *, ps_task: bool = False) -> dict[str, Any]:
    """TF_CONFIG for the script on `host` (or, with ps_task, for its parameter server)."""
    if ps_task:
        task = {"index": layout.hosts.index(host), "type": "ps"}
    elif host == layout.master:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": layout.hosts[1:].index(host), "type": "worker"}
    return {"cluster": ps_cluster(layout), "environment": "cloud", "task": task}


def mwms_tf_config(layout: Layout, host: str) -> dict[str, Any]:
    return {
        "cluster": {"worker": [layout.script[h] for h in layout.hosts]},
        "environment": "cloud",
        "task": {"index": layout.hosts.index(host), "type": "worker"},
    }
