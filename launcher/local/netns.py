"""A network namespace with only loopback, shared by every process of a run (where the machine allows it).

TensorFlow's gRPC server binds 0.0.0.0 whatever address TF_CONFIG gives it, so a ps or worker port would be
reachable from the network while a run lasts. Inside a fresh network namespace there is only `lo`: the
simulated hosts reach each other on 127.0.0.1 and nothing outside can reach them (nor can they reach out).
Needs root, `unshare`, `nsenter`, `setpriv` and `ip` (util-linux, iproute2); elsewhere runs use the host network.
The holder process dies with the dfm process that started it (`setpriv --pdeathsig KILL`): a dfm killed with
SIGKILL, which runs no cleanup, leaves no namespace behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess

DISABLE_ENV = "DFM_LOCAL_NETNS"  # "0" keeps runs on the host network


def wanted() -> bool:
    return os.environ.get(DISABLE_ENV, "1") != "0"


def possible() -> bool:
    return (
        hasattr(os, "geteuid")
        and os.geteuid() == 0
        and all(shutil.which(tool) for tool in ("unshare", "nsenter", "setpriv", "ip"))
    )


class LoopbackNamespace:
    """A holder process keeps the namespace alive; `wrap(cmd)` runs a command inside it."""

    def __init__(self) -> None:
        self.holder: subprocess.Popen | None = None

    def start(self) -> bool:
        """True when the namespace is up; False (and nothing left running) when this machine refuses it."""
        # unshare and setpriv exec in turn, so the holder's parent is this process; the kernel kills the holder
        # when the thread that started it ends (a run starts and stops its namespace in one thread). Had this
        # process ended before setpriv asked for that, the holder's parent is no longer this process: it exits.
        script = f'[ "$PPID" = {os.getpid()} ] && ip link set lo up && echo ready && exec sleep infinity'
        try:
            self.holder = subprocess.Popen(
                ["unshare", "--net", "setpriv", "--pdeathsig", "KILL", "sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        except OSError:
            return False
        ready = self.holder.stdout.readline().strip() == "ready"
        if not ready:
            self.stop()
        return ready

    @property
    def pid(self) -> int | None:
        return self.holder.pid if self.holder else None

    def wrap(self, cmd: list[str]) -> list[str]:
        if self.holder is None:
            return cmd
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--", *cmd]

    def stop(self) -> None:
        if self.holder is None:
            return
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()
        if self.holder.stdout:
            self.holder.stdout.close()
        self.holder = None
