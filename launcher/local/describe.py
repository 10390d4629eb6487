"""`dfm launch SPEC --local --dry-run`: a LocalRequest as a document (JSON), and that document as a readable
listing (text). The CLI masks secret-looking environment values in the document before either is shown."""

from __future__ import annotations

import shlex
from typing import Any

from launcher.local.cores import format_cpus
from launcher.local.host_memory import size_text
from launcher.local.local_request import LocalRequest

LONG_VALUE = 160  # text cuts longer SM_* values (the toolkit's JSON views of the job) here; the JSON has them whole


def request_document(request: LocalRequest) -> dict[str, Any]:
    return request.to_dict()


def _short(name: str, value: str) -> str:
    return (
        value
        if len(value) <= LONG_VALUE or not name.startswith("SM_")
        else f"{value[:LONG_VALUE]}... ({len(value)} chars; --output json has all)"
    )


def _env_lines(env: dict[str, str], indent: str, first: str = "") -> list[str]:
    """`env      NAME=value` lines, sorted; `first` (e.g. "mpirun's, then") leads them."""
    entries = [first] if first else []
    entries += [f"{name}={_short(name, str(env[name]))}" for name in sorted(env)]
    return [f"{indent}{'env' if i == 0 else '':<9}{entry}" for i, entry in enumerate(entries or ["(none)"])]


def _process_lines(process: dict[str, Any], launcher: dict[str, str] | None) -> list[str]:
    first, env = "", process["env"]
    if process["supervision"] == "rank":
        head = f"  {process['label']}  (rank {process['rank']}, started by mpirun through rank_exec.py)"
        env = {k: v for k, v in env.items() if launcher.get(k) != v}  # what its host changes in mpirun's env
        first = "mpirun's" + (", with" if env else "")
    else:
        head = f"  {process['label']}  ({process['role']})"
    return [
        head,
        f"    command  {shlex.join(process['argv'])}",
        f"    cwd      {process['cwd']}",
        f"    log      {process['log_file']}",
        *_env_lines(env, "    ", first),
    ]


def _channel_line(feed: dict[str, Any]) -> str:
    how = {"link": "files linked", "pipe": "files fed into FIFOs", "mount": "folder mounted"}[feed["feed"]]
    source = feed["source"] or "(no local folder)"
    if feed["feed"] == "mount":
        return f"  channel {feed['name']}: {feed['mode']}, {how}: {source}"
    keys = [key for key, _ in feed["files"]]
    shown = ", ".join(keys[:4]) + (f", ... ({len(keys)} files)" if len(keys) > 4 else "")
    return (
        f"  channel {feed['name']}: {feed['mode']}, {feed['distribution']}, {how} from {source}: {shown or 'no files'}"
    )


def _cores_line(cpus: list[int], per_host: int) -> str:
    if not cpus:
        return f"  cores: not confined (no CPU affinity here); SM_NUM_CPUS={per_host}"
    return f"  cores: {format_cpus(cpus)} (SM_NUM_CPUS={per_host}): every process of this host runs on these only"


def _memory_line(group: str, limit: int | None) -> str:
    held = f"its memory cgroup {group}" if group else "a sampler of its processes' resident memory (no memory cgroup)"
    if not limit:
        return f"  memory: no limit (local.memory_per_host); its peak is measured by {held}"
    return (
        f"  memory: {size_text(limit)} at most for every process of this host together (local.memory_per_host), "
        f"held by {held}; over it, the host is killed and the run fails"
    )


def render_request(document: dict[str, Any]) -> str:
    """The text of a local dry run, from its document (request_document) alone."""
    processes = document["processes"]
    launcher = next((p["env"] for p in processes if p["label"] == "mpirun"), None)
    timeout = f"timeout {document['timeout_s']:g} s" if document["timeout_s"] else "no timeout"
    lines = [
        f"Local run {document['job_name']} (dry run: nothing started, nothing written)",
        f"  runtime      {document['runtime']['note']}: {document['runtime']['python']}",
        f"  job folder   {document['job_dir']}",
        f"  limits       {timeout}; the other scripts may run {document['master_grace_s']:g} s after "
        f"{document['master']} ends"
        + (
            f"; ps servers get {document['ps_grace_s']:g} s once the scripts have ended"
            if any(p["role"] == "ps" for p in processes)
            else ""
        ),
        f"  checkpoints  {document['checkpoint_store'] or 'not synced (no checkpoint_s3_uri)'}",
        f"  environment  {document['inherits']}",
    ]
    lines += [f"  writes       {path}" for path in document["files"]]
    added = f" + {', '.join(document['source_files'])}" if document["source_files"] else ""
    for host in document["hosts"]:
        lines += [
            "",
            f"host {host['name']}  {host['root']}  (its /opt/ml; code/ from {document['source_dir']}{added}; "
            f"input/config/{', '.join(host['config_files'])})",
        ]
        lines.append(_cores_line(host["cpus"], document["cores_per_host"]))
        lines.append(_memory_line(host["memory_group"], document["memory_per_host"]))
        lines += [_channel_line(feed) for feed in host["channels"]]
        if host["checkpoint_dir"]:
            lines.append(f"  checkpoints: {host['checkpoint_dir']}")
        for process in processes:
            if process["host"] == host["name"]:
                lines += _process_lines(process, launcher)
    if document["warnings"]:
        lines += ["", "Warnings", *(f"  {w}" for w in document["warnings"])]
    if document["problems"]:
        lines += ["", "Cannot run as it is (the run would stop here)", *(f"  {p}" for p in document["problems"])]
    return "\n".join(lines)
