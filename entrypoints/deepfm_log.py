"""The lines the entry points print for the launcher to read: `[dfm] ...` notes and the metric lines
whose format the launcher's metric regexes (SageMaker MetricDefinitions, the local progress line)
parse. Standard library only, so the launcher's tests can load this file on its own.
"""

import re
import sys
import threading

LOG_PREFIX = "[dfm]"
PROGRESS_SECONDS = 5.0  # at most one progress line this often
_WRITING = threading.Lock()  # the progress thread's lines and the loop's never share a line


def emit(line):
    # One write per line: print() writes the text and the newline separately, and under mpirun's
    # --tag-output two ranks' halves can interleave into one tagged line.
    with _WRITING:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def log(message):
    emit(f"{LOG_PREFIX} {message}")


def warn(message):
    """`[dfm] warning: <message>`: a run that goes on, or ends "done", with something the user must look at (the
    local run's summary repeats these lines)."""
    log(f"warning: {message}")


def format_metric(kind, step, loss, auc, examples_per_sec=None, baseline_auc=None):
    """`[dfm] train step=<int> loss=<float> auc=<float> examples_per_sec=<float>` or
    `[dfm] eval step=<int> loss=<float> auc=<float>`, then ` baseline_auc=<float>` with the logistic-regression
    baseline's AUC (deepfm_baseline)."""
    if kind not in ("train", "eval"):
        raise ValueError(f"metric kind {kind!r} is not train or eval")
    line = f"{LOG_PREFIX} {kind} step={int(step)} loss={float(loss):.6f} auc={float(auc):.6f}"
    if kind == "train":
        line += f" examples_per_sec={float(examples_per_sec or 0.0):.1f}"
    if baseline_auc is not None:
        line += f" baseline_auc={float(baseline_auc):.6f}"
    return line


def format_progress(step):
    """`[dfm] progress step=<int>`: the steps trained so far, between the train lines (the launcher's progress
    display reads it; no metric definition does)."""
    return f"{LOG_PREFIX} progress step={int(step)}"


class ProgressTicker:
    """A progress line when training starts, then at most every `every_s` seconds while the step moves, from a
    thread of its own that reads the step (`read_step`: a variable's value, which no step waits for): the training
    loop never waits for it, and its windows stay as long as they are. A failed read ends the thread: the run is
    ending, and these lines are only a display's."""

    def __init__(self, read_step, every_s=None):
        self.read_step, self.every_s = read_step, PROGRESS_SECONDS if every_s is None else every_s
        self._stop = threading.Event()
        self._thread = None
        self.last = None

    def tick(self):
        """Print the step if it moved since the last line. -> whether a line was printed."""
        step = int(self.read_step())
        if step == self.last:
            return False
        self.last = step
        emit(format_progress(step))
        return True

    def _run(self):
        while not self._stop.wait(self.every_s):
            try:
                self.tick()
            except Exception:
                return

    def __enter__(self):
        self.tick()
        self._thread = threading.Thread(target=self._run, name="dfm-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        # a read in flight finishes; after an error (a ps gone) no wait: the daemon thread never holds the process
        self._thread.join(timeout=10 if exc[0] is None else 0)


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
