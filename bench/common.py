"""Timing, machine description and section building shared by the benchmark items."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
DFM = str(Path(sys.executable).with_name("dfm"))  # the console script installed beside this Python
ENTRYPOINTS = REPO / "entrypoints"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def alternate(contenders: dict[str, Callable[[], float]], repetitions: int) -> dict[str, list[float]]:
    """Call each contender once per round, rotating who goes first, so drift in the machine's load
    (other processes on 2 shared cores) falls on every contender alike."""
    names = list(contenders)
    results: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repetitions):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(contenders[name]())
    return results


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def synth(out: Path, *options: str) -> Path:
    """`dfm data synth --out OUT OPTIONS...` from the repository. -> out; RuntimeError with the end of its stderr
    when it fails."""
    import subprocess

    done = subprocess.run([DFM, "data", "synth", "--out", str(out), *options], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"dfm data synth failed: {done.stderr[-300:]}")
    return out


def run_measured(argv: list[str], **kwargs):
    """subprocess.run plus (wall seconds, CPU seconds of the child and its waited-for descendants).
    CPU time tells a slow command from a starved one on a machine shared with other work."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, **kwargs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, wall, cpu


def run_sampled(argv: list[str], label: Callable[[object], str], timeout: float, **kwargs):
    """subprocess.run(argv, capture_output=True, text=True) plus (wall seconds, {label: CPU seconds}) over the
    command and every process under it, sampled every 0.2 s: processes a command starts without waiting for
    them (Spark's JVM, a local cluster's servers) are missing from its rusage. label(psutil.Process) names
    each process's group. Each process counts its own time only (a parent's children_* time would count a
    waited-for child again), so a process's last 0.2 s may be missed."""
    done, wall, by_label, _ = run_sampled_window(argv, label, timeout, None, **kwargs)
    return done, wall, by_label


def run_sampled_window(
    argv: list[str], label: Callable[[object], str], timeout: float, mark: Callable[[str], bool] | None, **kwargs
):
    """run_sampled plus the steady part of the run: (seconds, {label: CPU seconds}, first line, last line) between
    the first and the last output line (stdout or stderr) that mark(line) accepts, e.g. a training run's first and
    last metric lines, so start-up, tracing and tear-down are left out; (nan, {}, "", "") when fewer than two
    samples saw such lines. The lines are those the samples that open and close the window had seen last."""
    import subprocess
    import tempfile

    import psutil

    seen: dict[int, tuple[str, float]] = {}
    first = last = None  # (time, snapshot of seen, line) when the first / the latest marked line had appeared
    marked, read, pending, lines_marked = 0, [0, 0], ["", ""], []
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err, text=True, **kwargs)
        while process.poll() is None:
            if time.perf_counter() - start > timeout:
                process.kill()
            before = marked
            if mark is not None:
                for i, stream in enumerate((out, err)):
                    # pread: the child shares the file's offset, which a seek here would move under it
                    chunk = os.pread(stream.fileno(), 1 << 20, read[i])
                    read[i] += len(chunk)
                    *lines, pending[i] = (pending[i] + chunk.decode(errors="replace")).split("\n")
                    lines_marked += [line for line in lines if mark(line)]
                marked = len(lines_marked)
            try:
                tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
            except psutil.Error:
                tree = []
            for member in tree:
                try:
                    # labelled at every sample (one first seen between fork and exec shows its parent's
                    # command), then timed; a process gone or a zombie raises psutil.Error: its last sample stays
                    name = label(member)
                    times = member.cpu_times()
                    seen[member.pid] = (name, times.user + times.system)  # children_*: counted twice
                except psutil.Error:
                    pass
            if marked > before:
                snapshot = (time.perf_counter(), dict(seen), lines_marked[-1])
                first, last = first or snapshot, snapshot
            time.sleep(0.2)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(argv, process.returncode, out.read(), err.read())
    by_label: dict[str, float] = {}
    for name, cpu in seen.values():
        by_label[name] = by_label.get(name, 0.0) + cpu
    if first is None or last is first:
        return done, wall, by_label, (float("nan"), {}, "", "")
    return done, wall, by_label, (last[0] - first[0], cpu_between(first[1], last[1]), first[2], last[2])


def cpu_between(first: dict[int, tuple[str, float]], last: dict[int, tuple[str, float]]) -> dict[str, float]:
    """{label: CPU seconds} spent between two samples of {pid: (label, CPU seconds so far)}: a process that
    started in between counts all of its time."""
    by_label: dict[str, float] = {}
    for pid, (name, cpu) in last.items():
        by_label[name] = by_label.get(name, 0.0) + cpu - (first[pid][1] if pid in first else 0.0)
    return by_label


def machine() -> dict:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = float("nan")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = int(line.split()[1]) / 2**20
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "memory_gib": round(memory_gib, 1),
        "load_1min_at_start": round(load, 2),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
    }


def versions(
    packages: tuple[str, ...] = (
        "dfm",
        "tensorflow-cpu",
        "keras",
        "numpy",
        "deepctr",
        "sagemaker",
        "sagemaker-tensorflow",
        "horovod",
    ),
) -> dict:
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def section(title: str, goal: str, command: str) -> dict:
    """An item's result: tables of rows (strings or numbers), notes, and verdicts on its goals."""
    return {"title": title, "goal": goal, "command": command, "tables": [], "notes": [], "verdicts": [], "data": {}}


def add_table(result: dict, headers: list[str], rows: list[list], caption: str = "") -> None:
    result["tables"].append({"caption": caption, "headers": headers, "rows": rows})


def verdict(result: dict, goal: str, met: bool | None, detail: str) -> None:
    result["verdicts"].append({"goal": goal, "met": met, "detail": detail})


def fmt(value: float, digits: int = 0) -> str:
    if value != value:  # NaN
        return "n/a"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def use_entrypoints() -> None:
    """The bundled entry points are flat modules (the container runs them with the source dir as cwd)."""
    if str(ENTRYPOINTS) not in sys.path:
        sys.path.insert(0, str(ENTRYPOINTS))


def quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
