"""The lines the entry points print for the launcher to read: `[dfm] ...` notes and the metric lines
whose format the launcher's metric regexes (SageMaker MetricDefinitions, the local progress line)
parse. Standard library only, so the launcher's tests can load this file on its own.
"""

import re
import sys

LOG_PREFIX = "[dfm]"


def emit(line):
    # One write per line: print() writes the text and the newline separately, and under mpirun's
    # --tag-output two ranks' halves can interleave into one tagged line.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log(message):
    emit(f"{LOG_PREFIX} {message}")


def warn(message):
    """`[dfm] warning: <message>`: a run that goes on, or ends "done", with something the user must look at (the
    local run's summary repeats these lines)."""
    log(f"warning: {message}")


def format_metric(kind, step, loss, auc, examples_per_sec=None):
    """`[dfm] train step=<int> loss=<float> auc=<float> examples_per_sec=<float>` or
    `[dfm] eval step=<int> loss=<float> auc=<float>`."""
    if kind not in ("train", "eval"):
        raise ValueError(f"metric kind {kind!r} is not train or eval")
    line = f"{LOG_PREFIX} {kind} step={int(step)} loss={float(loss):.6f} auc={float(auc):.6f}"
    if kind == "train":
        line += f" examples_per_sec={float(examples_per_sec or 0.0):.1f}"
    return line


def format_exported(path):
    return f"{LOG_PREFIX} exported {path}"


def format_memory(role, host, peak_bytes):
    """`[dfm] memory role=<chief|worker|ps|single|rank N> host=<host> peak_rss_mb=<float>`: a process's peak
    resident memory, printed as it exits (the local summary and the memory tests read it)."""
    return f"{LOG_PREFIX} memory role={role} host={host} peak_rss_mb={peak_bytes / 2**20:.1f}"


def peak_rss_bytes():
    """This process's peak resident set size so far (Linux's ru_maxrss, in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def log_peak_memory(role, host):
    emit(format_memory(role, host, peak_rss_bytes()))


def error_line(message):
    """The line of a TensorFlow error message that says what went wrong. Eager errors lead with it; an error
    raised inside a traced function leads with "Graph execution error:" and a node trace, one that crossed from
    another task with "N root error(s) found." and "(0) INVALID_ARGUMENT:", and an assertion (a bad row) carries
    its own text after "assertion failed:"."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    for line in lines:
        if "assertion failed:" in line:
            return line.split("assertion failed:", 1)[1].strip()
    noise = ("Graph execution error", "Detected at node", "File ", "Traceback", "Stack trace", "<stack traces")
    useful = [
        re.sub(r"^\(\d+\) [A-Z_]+: ", "", line)
        for line in lines
        if not line.startswith(noise) and not re.match(r"^\d+ root error\(s\) found", line)
    ]
    return next((line for line in useful if line), lines[0] if lines else "")
