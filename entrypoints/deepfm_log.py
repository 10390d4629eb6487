"""The lines the entry points print for the launcher to read: `[dfm] ...` notes and the metric lines
whose format the launcher's metric regexes (SageMaker MetricDefinitions, the local progress line)
parse. Standard library only, so the launcher's tests can load this file on its own.
"""

import sys

LOG_PREFIX = "[dfm]"


def emit(line):
    # One write per line: print() writes the text and the newline separately, and under mpirun's
    # --tag-output two ranks' halves can interleave into one tagged line.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log(message):
    emit(f"{LOG_PREFIX} {message}")


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
