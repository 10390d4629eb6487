"""`dfm launch SPEC --local --dry-run`: a LocalRequest as a document (JSON) or a readable listing (text).

Environment values with secret-looking names are masked in both (launcher.secrets), unless asked not to.
"""

from __future__ import annotations

import shlex
from typing import Any

from launcher.local.request import LocalProcess, LocalRequest
from launcher.secrets import mask_environment

LONG_VALUE = 160  # text cuts longer SM_* values (the toolkit's JSON views of the job) here; the JSON has them whole


def _masked(value: Any, show: bool) -> Any:
    """`value` with every mapping under an `env` key masked (process environments, rank_exec's hosts)."""
    if isinstance(value, dict):
        return {k: mask_environment(v, show) if k == "env" and isinstance(v, dict) else _masked(v, show)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v, show) for v in value]
    return value


def request_document(request: LocalRequest, show_secrets: bool = False) -> dict[str, Any]:
    return _masked(request.to_dict(), show_secrets)


def _short(name: str, value: str) -> str:
    return value if len(value) <= LONG_VALUE or not name.startswith("SM_") else f"{value[:LONG_VALUE]}... ({len(value)} chars; --output json has all)"


def _env_lines(env: dict[str, str], indent: str, first: str = "") -> list[str]:
    """`env      NAME=value` lines, sorted; `first` (e.g. "mpirun's, then") leads them."""
    entries = [first] if first else []
    entries += [f"{name}={_short(name, str(env[name]))}" for name in sorted(env)]
    return [f"{indent}{'env' if i == 0 else '':<9}{entry}" for i, entry in enumerate(entries or ["(none)"])]


def _process_lines(process: LocalProcess, env: dict[str, str], launcher: dict[str, str] | None) -> list[str]:
    first = ""
    if process.supervision == "rank":
        head = f"  {process.label}  (rank {process.rank}, started by mpirun through rank_exec.py)"
        env = {k: v for k, v in env.items() if launcher.get(k) != v}  # what its host changes in mpirun's env
        first = "mpirun's" + (", with" if env else "")
    else:
        head = f"  {process.label}  ({process.role})"
    return [head, f"    command  {shlex.join(process.argv)}", f"    cwd      {process.cwd}",
            f"    log      {process.log_file}", *_env_lines(env, "    ", first)]


def _channel_line(feed: dict[str, Any]) -> str:
    how = {"link": "files linked", "pipe": "files fed into FIFOs", "mount": "folder mounted"}[feed["feed"]]
    source = feed["source"] or "(no local folder)"
    if feed["feed"] == "mount":
        return f"  channel {feed['name']}: {feed['mode']}, {how}: {source}"
    keys = [key for key, _ in feed["files"]]
    shown = ", ".join(keys[:4]) + (f", ... ({len(keys)} files)" if len(keys) > 4 else "")
    return (f"  channel {feed['name']}: {feed['mode']}, {feed['distribution']}, {how} from {source}: "
            f"{shown or 'no files'}")


def render_request(request: LocalRequest, show_secrets: bool = False) -> str:
    document = request_document(request, show_secrets)
    envs = {p["label"]: p["env"] for p in document["processes"]}
    timeout = f"timeout {request.timeout_s:g} s" if request.timeout_s else "no timeout"
    lines = [
        f"Local run {request.job_name} (dry run: nothing started, nothing written)",
        f"  runtime      {request.runtime.note}: {request.runtime.python}",
        f"  job folder   {request.job_dir}",
        f"  limits       {timeout}; the other scripts may run {request.master_grace_s:g} s after {request.master} ends"
        + (f"; ps servers get {request.ps_grace_s:g} s once the scripts have ended"
           if any(p.role == "ps" for p in request.processes) else ""),
        f"  checkpoints  {request.checkpoint_store or 'not synced (no checkpoint_s3_uri)'}",
        f"  environment  {document['inherits']}",
    ]
    lines += [f"  writes       {path}" for path in request.files]
    for host, host_doc in zip(request.hosts, document["hosts"]):
        added = f" + {', '.join(request.source_files)}" if request.source_files else ""
        lines += ["", f"host {host.name}  {host.root}  (its /opt/ml; code/ from {request.source_dir}{added}; "
                      f"input/config/{', '.join(host.config_files)})"]
        lines += [_channel_line(feed) for feed in host_doc["channels"]]
        if host.checkpoint_dir:
            lines.append(f"  checkpoints: {host.checkpoint_dir}")
        for process in request.processes:
            if process.host == host.name:
                lines += _process_lines(process, envs[process.label], envs.get("mpirun"))
    if request.warnings:
        lines += ["", "Warnings", *(f"  {w}" for w in request.warnings)]
    if request.problems:
        lines += ["", "Cannot run as it is (the run would stop here)", *(f"  {p}" for p in request.problems)]
    return "\n".join(lines)
