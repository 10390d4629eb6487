"""Item: a table no simulated host can hold (issue 48). A parameter-server job on HOSTS simulated hosts, each held to
`local.memory_per_host`, whose tables and Adagrad slots are at least STATE_OVER_LIMIT times one host's limit, on data
shaped like Criteo Kaggle (`dfm data synth --like criteo-kaggle`): it trains, checkpoints (each ps its own shard,
on a folder every host mounts: `configs/efs-ps.yaml`), loses a worker (SIGKILL of algo-2's worker after the first
checkpoint: `recover:` runs it again from the checkpoints), keeps its best evaluation and exports; the export loads
and answers `serving_default` in one process. Against it, the same hosts with the demo's 117,581-id table.

The limit is the rule's own need (`launcher.rules.memory.plan_host_memory`) rounded up to 0.1 GiB: a smaller one is
refused before anything runs. Each process's peak comes from the run folders' memory.json (both attempts, the
higher of the two), its estimate from the rule's per-process needs (`HostNeed.processes`); times from the arrival
of the chief's lines (a checkpoint line against the train line before it, and so on). A big run that ends out of
memory is reported (its peaks, the verdicts missed), not dropped. DFM_BENCH_BIG_TABLE_LIMIT (a size) runs the hosts
with another limit, to measure the rest of the flow with room; DFM_BENCH_KEEP (a folder) keeps the runs' logs,
memory.json files and timed output lines.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import DFM, REPO, add_table, fmt, median, section, synth, verdict

CONFIG = REPO / "configs" / "efs-ps.yaml"  # parameter servers, checkpoints on a file system all mount
HOSTS = 4
SMALL_IDS = 117_581  # the demo's table
EMBEDDING, OPTIMIZER, LEARNING_RATE, BATCH = 16, "adagrad", 0.3, 1024
STATE_OVER_LIMIT = 1.2  # the tables and slots against one host's limit
ESTIMATE_GOAL = 0.25  # every estimate within this share of the measured peak
SPEED_GOAL = 0.5  # the big table's examples/s against the small table's
GIB = 1 << 30
MIB = 1 << 20
LIMIT_STEP = GIB // 10  # the limit: the rule's need rounded up to this
KILLED = "algo-2 worker"  # the process lost after the first checkpoint
LINE = re.compile(r"^\[(?P<label>[\w.-]+/[\w:.-]+)\] (?P<text>.*)$")
CHIEF = "algo-1/master"
METRIC = re.compile(r"(\w+)=([-0-9.e]+)")


@dataclass(frozen=True)
class Size:
    ids: int  # the big table's feature_size
    rows: int  # training rows (FILES files)
    eval_rows: int
    max_steps: int
    every: int  # checkpoint_steps and eval_steps
    log_steps: int


FILES = 2 * HOSTS  # ShardedByS3Key
# The rule counts 3 working sets on the chief's host (its ps, the chief, the worker it starts) beside the ps's
# share at its peak (PS_RESTORE_FACTOR: the job restores): a limit that the state exceeds 1.2x is only possible from
# state >= 1.2 x (3 x 640 MiB + 2.1 x state / HOSTS): about 6.1 GiB on 4 hosts (on 3 none is), and the limit's
# rounding asks a little more, so both sizes have 48M ids (the quick one fewer rows and steps). The --like
# criteo-kaggle data's ids run to 33,762,784 in any case.
SIZES = {
    True: Size(ids=48_000_000, rows=FILES * 24_576, eval_rows=16_384, max_steps=160, every=80, log_steps=20),
    False: Size(ids=48_000_000, rows=FILES * 196_608, eval_rows=65_536, max_steps=1200, every=400, log_steps=50),
}


def state_bytes(ids: int, embedding: int = EMBEDDING, optimizer: str = OPTIMIZER) -> int:
    from launcher.plans.hosts import embedding_bytes

    return embedding_bytes(ids, embedding, optimizer, baseline=True)  # sets() trains the baseline


def limit_for(need: int, state: int, step: int = LIMIT_STEP) -> int:
    """The per-host limit: the rule's need rounded up to `step`; ValueError when the state is not at least
    STATE_OVER_LIMIT times it (the size is then too small to prove anything)."""
    limit = math.ceil(need / step) * step
    if state < STATE_OVER_LIMIT * limit:
        raise ValueError(
            f"{state / GIB:.2f} GiB of state is under {STATE_OVER_LIMIT} x the {limit / GIB:.1f} GiB limit the rule "
            "needs per host: use a larger table"
        )
    return limit


def sets(size: Size, ids: int, limit: int, cores: int) -> list[str]:
    return [
        f"hyperparameters.feature_size={ids}",
        f"hyperparameters.embedding_size={EMBEDDING}",
        f"hyperparameters.optimizer={OPTIMIZER}",
        f"hyperparameters.learning_rate={LEARNING_RATE}",
        f"hyperparameters.batch_size={BATCH}",
        "hyperparameters.epochs=0",  # the data repeats to max_steps
        f"hyperparameters.max_steps={size.max_steps}",
        f"hyperparameters.checkpoint_steps={size.every}",
        f"hyperparameters.eval_steps={size.every}",
        "hyperparameters.eval_batches=0",
        f"hyperparameters.log_steps={size.log_steps}",
        "hyperparameters.baseline=true",
        f"instance.count={HOSTS}",
        f"local.memory_per_host={limit / GIB:.1f}GiB",
        f"local.cores_per_host={cores}",
        "recover.max_restarts=1",
        "recover.backoff_s=0",
    ]


# ---- what the output and the run folders say (pure) ----
def labelled(lines: list[tuple[float, str]]) -> list[tuple[float, str, str]]:
    """(time, process label, text) of the processes' lines; `[dfm local] ...` lines as label `local`."""
    found = []
    for at, line in lines:
        match = LINE.match(line)
        if match:
            found.append((at, match["label"], match["text"]))
        elif line.startswith("[dfm local] "):
            found.append((at, "local", line[len("[dfm local] ") :]))
    return found


def gaps_before(lines: list[tuple[float, str]], label: str, pattern: str) -> list[float]:
    """Seconds between each line of `label` matching `pattern` and that process's line before it (a checkpoint's
    line against the train line just before it: the time the save took)."""
    found, previous = [], None
    for at, who, text in labelled(lines):
        if who != label:
            continue
        if previous is not None and re.search(pattern, text):
            found.append(at - previous)
        previous = at
    return found


def metrics(text: str) -> dict[str, float]:
    return {key: float(value) for key, value in METRIC.findall(text)}


def steady_rates(lines: list[tuple[float, str]], label: str = CHIEF) -> list[float]:
    """examples_per_sec of `label`'s train lines, the first of each attempt (start-up, a restore) left out."""
    rates, first = [], True
    for _, who, text in labelled(lines):
        if who == "local" and text.startswith("attempt ") and "ended" not in text:
            first = True
        elif who == label and text.startswith("[dfm] train step="):
            if not first:
                rates.append(metrics(text)["examples_per_sec"])
            first = False
    return rates


def evaluations(lines: list[tuple[float, str]]) -> list[dict[str, float]]:
    return [metrics(text) for _, who, text in labelled(lines) if who == CHIEF and text.startswith("[dfm] eval step=")]


def process_peaks(documents: list[dict]) -> dict[str, dict]:
    """label -> {host, role, peak_bytes} over the attempts' memory.json documents (the higher peak of a label)."""
    found: dict[str, dict] = {}
    for document in documents:
        for host, measured in document["hosts"].items():
            for label, process in measured["processes"].items():
                seen = found.setdefault(label, {"host": host, "role": process["role"], "peak_bytes": 0})
                seen["peak_bytes"] = max(seen["peak_bytes"], process["peak_bytes"])
    return dict(sorted(found.items()))


def host_peaks(documents: list[dict]) -> dict[str, dict]:
    """host -> {peak_bytes, limit_bytes, over} over the attempts."""
    found: dict[str, dict] = {}
    for document in documents:
        for host, measured in document["hosts"].items():
            seen = found.setdefault(host, {"peak_bytes": 0, "limit_bytes": measured["limit_bytes"], "over": False})
            seen["peak_bytes"] = max(seen["peak_bytes"], measured["peak_bytes"])
            seen["over"] = seen["over"] or bool(measured["over"])
    return dict(sorted(found.items()))


def role_estimates(processes, workers_with_chief: int = 1) -> dict[str, int]:
    """memory.json role -> the rule's estimate (`HostNeed.processes`: ProcessNeed roles ps, chief, worker). The
    chief's label (`master`) counts the worker process it starts on its host too."""
    by_role = {p.role: p.bytes for p in processes}
    return {
        "ps": by_role["ps"],
        "worker": by_role["worker"],
        "master": by_role["chief"] + workers_with_chief * by_role["worker"],
    }


def against_estimates(peaks: dict[str, dict], estimates: dict[str, int], goal: float = ESTIMATE_GOAL) -> list[dict]:
    """Each process label's peak against its role's estimate: {label, peak, estimate, off (estimate/peak - 1),
    within}."""
    rows = []
    for label, measured in peaks.items():
        estimate = estimates.get(measured["role"])
        if estimate is None:
            continue
        off = estimate / measured["peak_bytes"] - 1 if measured["peak_bytes"] else float("inf")
        rows.append(
            {
                "label": label,
                "peak": measured["peak_bytes"],
                "estimate": estimate,
                "off": off,
                "within": abs(off) <= goal,
            }
        )
    return rows


def done_when(completed: bool, hosts: dict[str, dict], rate: float, small_rate: float, rows: list[dict]) -> list:
    """The issue's done-when lines: [(goal, met, detail)]."""
    worst = max(hosts.items(), key=lambda kv: kv[1]["peak_bytes"] / (kv[1]["limit_bytes"] or 1), default=None)
    inside = completed and bool(hosts) and not any(h["over"] for h in hosts.values())
    limits = (
        f"busiest host {worst[0]} peaked at {worst[1]['peak_bytes'] / GIB:.2f} of {worst[1]['limit_bytes'] / GIB:.1f}"
        " GiB"
        if worst and worst[1]["limit_bytes"]
        else "no host measured"
    )
    ratio = rate / small_rate if small_rate else float("nan")
    missed = [r for r in rows if not r["within"]]
    return [
        (
            "the big-table run completes inside its per-host limits",
            inside,
            ("completed; " if completed else "did not complete; ") + limits,
        ),
        (
            f"its examples/s >= {SPEED_GOAL}x the 117,581-id table's on the same hosts",
            ratio >= SPEED_GOAL if ratio == ratio else None,
            f"{fmt(rate)} vs {fmt(small_rate)} examples/s ({ratio:.2f}x)",
        ),
        (
            f"every estimate within {ESTIMATE_GOAL:.0%} of the measured peak",
            bool(rows) and not missed,
            "; ".join(f"{r['label']} estimate {r['off']:+.0%}" for r in rows) or "no peaks",
        ),
    ]


# ---- running ----
class Launch:
    """`dfm launch ... --local` with every output line timed as it arrives; `kill_after(pattern)` SIGKILLs the
    algo-2 worker once a chief line matches."""

    def __init__(self, argv: list[str], timeout_s: float):
        self.lines: list[tuple[float, str]] = []
        self.start = time.monotonic()
        self.process = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.timeout_s = timeout_s
        self.killed: tuple[float, str] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic() - self.start, line.rstrip("\n")))

    def wait(self, kill_after: str | None = None) -> int:
        import psutil

        from bench.distributed_runs import label_of

        while self.process.poll() is None:
            if time.monotonic() - self.start > self.timeout_s:
                self.process.send_signal(signal.SIGTERM)  # the launcher stops its hosts itself
                self.process.wait(timeout=120)
                break
            if kill_after and self.killed is None:
                hit = next(
                    (t for _, w, t in labelled(list(self.lines)) if w == CHIEF and re.search(kill_after, t)), None
                )
                if hit:
                    for member in psutil.Process(self.process.pid).children(recursive=True):
                        try:
                            if label_of(member.environ(), " ".join(member.cmdline()), member.cwd()) == KILLED:
                                member.kill()
                                self.killed = (time.monotonic() - self.start, hit)
                        except psutil.Error:
                            continue
            time.sleep(0.2)
        self._reader.join(timeout=60)
        return self.process.returncode

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def launch(size: Size, ids: int, limit: int, channels: dict[str, Path], run_dir: Path, cores: int, kill: bool):
    argv = [DFM, "launch", str(CONFIG), "--local", "--run-dir", str(run_dir), "--timeout", "3600"]
    for item in sets(size, ids, limit, cores):
        argv += ["--set", item]
    for name, path in channels.items():
        argv += ["--channel", f"{name}={path}"]
    run = Launch(argv, timeout_s=3900)
    code = run.wait(kill_after=r"^\[dfm\] checkpoint step=" if kill else None)
    return run, code


def rule_need(size: Size, ids: int, limit_text: str = "64GiB"):
    """The rule's HostNeed of the big run (its busiest host and that host's processes)."""
    from launcher.rules.memory import plan_host_memory
    from launcher.spec import load_spec

    overrides = [s for s in sets(size, ids, GIB, 1) if not s.startswith("local.")]
    spec = load_spec(CONFIG, overrides + [f"local.memory_per_host={limit_text}"])
    return plan_host_memory(spec)


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def checkpoint_bytes(folder: Path, step: int) -> int:
    return sum(p.stat().st_size for p in folder.glob(f"ckpt-{step}.*"))


SERVE = """
import json, resource, sys, time
import numpy as np
started = time.perf_counter()
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
loaded = time.perf_counter() - started
rows = np.load(sys.argv[2])
ids, vals = rows["ids"], rows["values"]
began, probs = time.perf_counter(), []
for start in range(0, len(ids), 4096):
    out = serve(feat_ids=tf.constant(ids[start:start + 4096]), feat_vals=tf.constant(vals[start:start + 4096]))
    probs.append(out["probabilities"].numpy().reshape(-1))
answered = time.perf_counter() - began
np.save(sys.argv[3], np.concatenate(probs))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"load_s": loaded, "answer_s": answered, "peak_mb": peak}))
"""


def serve_check(export: Path, eval_dir: Path, work: Path) -> dict:
    """Load the export in one process (the runtime that trained it) and score the eval rows with serving_default."""
    import numpy as np

    from launcher.data.synth import roc_auc
    from launcher.data.tfrecord import read_examples
    from launcher.local import runtime

    labels, ids, values = read_examples(sorted(eval_dir.iterdir()), 39)
    np.savez(work / "eval.npz", ids=ids, values=values)
    python = runtime.choose_runtime(
        "2.21", root=runtime.runtimes_root(), own_python=sys.executable, own_tf=runtime.tf_version_in()
    ).python
    done = subprocess.run(
        [python, "-c", SERVE, str(export), str(work / "eval.npz"), str(work / "probs.npy")],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1][:300]}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["auc"] = roc_auc(labels, np.load(work / "probs.npy"))
    figures["rows"] = len(labels)
    return figures


def _last(lines, pattern: str) -> str | None:
    found = [t for _, w, t in labelled(lines) if w == CHIEF and re.search(pattern, t)]
    return found[-1] if found else None


def _attempt_peak(documents: list[dict], index: int, label: str) -> str:
    peak = process_peaks(documents[index : index + 1]).get(label) if index < len(documents) else None
    return f"{fmt(peak['peak_bytes'] / MIB)} MiB" if peak else "n/a"


def _attempt_host(documents: list[dict], index: int, host: str) -> str:
    found = host_peaks(documents[index : index + 1]).get(host) if index < len(documents) else None
    return f"{fmt(found['peak_bytes'] / MIB)} MiB" if found else "n/a"


def _memory_documents(run_dir: Path) -> list[dict]:
    """The attempts' memory.json, the first attempt first (`<job>`, `<job>-r1`)."""
    from launcher.plans.recovery import attempt_number

    found = sorted(run_dir.glob("*/memory.json"), key=lambda p: attempt_number(p.parent.name))
    return [json.loads(p.read_text()) for p in found]


LIMIT_ENV = "DFM_BENCH_BIG_TABLE_LIMIT"  # a size (6GiB): the hosts' limit instead of the rule's need
KEEP_ENV = "DFM_BENCH_KEEP"  # a folder: the runs' logs, memory.json files and output lines are copied there


def measure(quick: bool, context: dict) -> dict:
    from launcher.spec import size_bytes

    size = SIZES[quick]
    state = state_bytes(size.ids)
    need = rule_need(size, size.ids)
    override = os.environ.get(LIMIT_ENV)
    limit = size_bytes(override) if override else limit_for(need.needed, state)
    cores = min(2, os.cpu_count() or 1)
    result = section(
        "A table no host can hold (issue 48)",
        f"{HOSTS} simulated hosts, each held to local.memory_per_host; tables and slots >= {STATE_OVER_LIMIT}x one "
        "host's limit: completes inside the limits (training, a checkpoint, a lost worker and the resume, the best "
        f"evaluation, the export); examples/s >= {SPEED_GOAL}x the 117,581-id table's on the same hosts; every "
        f"estimate of `dfm validate`'s memory rule within {ESTIMATE_GOAL:.0%} of the measured peak",
        f"`bench/big_table.py`: `dfm data synth --like criteo-kaggle`, then `dfm launch configs/efs-ps.yaml --local` "
        f"with feature_size {size.ids:,}, embedding_size {EMBEDDING}, {OPTIMIZER}, `--set "
        f"local.memory_per_host={limit / GIB:.1f}GiB`"
        + (f" ({LIMIT_ENV}={override})" if override else "")
        + f", `recover: {{max_restarts: 1}}`, algo-2's worker SIGKILLed after the first checkpoint; the same with "
        f"feature_size {SMALL_IDS:,} on `dfm data synth` data",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-big-table-"))
    try:
        data = {
            "big": synth(work / "big-data", "--like", "criteo-kaggle", *_rows(size)),
            "small": synth(work / "small-data", *_rows(size)),
        }
        runs = {}
        for name, ids, kill in (("big", size.ids, True), ("small", SMALL_IDS, False)):
            (work / f"efs-{name}").mkdir()
            channels = {"train": data[name] / "train", "eval": data[name] / "eval", "checkpoints": work / f"efs-{name}"}
            runs[name] = launch(size, ids, limit, channels, work / f"runs-{name}", cores, kill=kill)
            _keep(work, name, runs[name][0])
        (big, big_code), (small, small_code) = runs["big"], runs["small"]
        if small_code != 0:
            raise RuntimeError(f"the small-table run failed (exit {small_code}): {small.text[-600:]}")
        exported = _last(big.lines, r"^\[dfm\] exported ") if big_code == 0 else None
        export = Path(exported.split()[-1]) if exported else None
        served = serve_check(export, data["big"] / "eval", work) if export else {"error": "no export"}
        files = _files(work / "efs-big", export)
        documents = _memory_documents(work / "runs-big")
        small_documents = _memory_documents(work / "runs-small")
        _report(result, size, state, limit, need, big, big_code, small, served, files, documents, small_documents)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _rows(size: Size) -> list[str]:
    return ["--rows", str(size.rows), "--eval-rows", str(size.eval_rows), "--files", str(FILES), "--seed", "5"]


def _keep(work: Path, name: str, run: Launch) -> None:
    keep = os.environ.get(KEEP_ENV)
    if not keep:
        return
    folder = Path(keep) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "output.txt").write_text("\n".join(f"{at:9.2f} {line}" for at, line in run.lines))
    runs = work / f"runs-{name}"
    for job in runs.iterdir() if runs.is_dir() else ():  # none when the launch was refused
        if (job / "logs").is_dir():
            shutil.copytree(job / "logs", folder / job.name / "logs", dirs_exist_ok=True)
        if (job / "memory.json").is_file():
            (folder / job.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(job / "memory.json", folder / job.name / "memory.json")


def _files(efs: Path, export: Path | None) -> dict:
    [job] = [p for p in efs.iterdir() if p.is_dir()] or [efs]
    steps = sorted(int(m[1]) for p in job.glob("ckpt-*.index") if (m := re.match(r"ckpt-(\d+)\.index", p.name)))
    best = job / "best"
    return {
        "checkpoint_step": steps[-1] if steps else None,
        "checkpoint_bytes": checkpoint_bytes(job, steps[-1]) if steps else 0,
        "checkpoint_files": len(list(job.glob(f"ckpt-{steps[-1]}.data-*"))) if steps else 0,
        "best_bytes": folder_bytes(best) if best.is_dir() else 0,
        "export_bytes": folder_bytes(export) if export and export.exists() else 0,
    }


def _report(result, size, state, limit, need, big, big_code, small, served, files, documents, small_documents) -> None:
    big_lines, small_lines = big.lines, small.lines
    rate, small_rate = median(steady_rates(big_lines)), median(steady_rates(small_lines))
    evals = evaluations(big_lines)
    best = max(evals, key=lambda e: e.get("auc", 0.0)) if evals else {}
    estimates = role_estimates(need.processes)
    peaks = process_peaks(documents)
    rows = against_estimates(peaks, estimates)
    hosts = host_peaks(documents)
    resumed = re.search(r"continuing at step (\d+)", big.text)
    completed = big_code == 0 and "finished (exit 0)" in big.text
    ended = [t for _, w, t in labelled(big.lines) if w == "local" and t.startswith("FAILED: ")]
    add_table(
        result,
        ["what", "value"],
        [
            ["table", f"{size.ids:,} ids x (1 + {EMBEDDING}) floats, {OPTIMIZER} (1 slot)"],
            ["state (weights + slots)", f"{state / GIB:.2f} GiB = {state / limit:.2f}x one host's limit"],
            [
                "local.memory_per_host",
                f"{limit / GIB:.1f} GiB (the rule's need {need.needed / GIB:.2f} GiB, rounded up)",
            ],
            ["rule's busiest host", need.layout],
            ["data", f"{size.rows:,} rows like Criteo Kaggle in {FILES} files, {size.eval_rows:,} eval rows"],
            ["steps", f"{size.max_steps} of batch {BATCH}, checkpoint and evaluation every {size.every}"],
            [
                "lost worker",
                f"{KILLED} SIGKILLed {fmt(big.killed[0], 1)} s in, after `{big.killed[1][:60]}`"
                if big.killed
                else "not killed",
            ],
            ["resumed", f"at step {resumed[1]}" if resumed else "no"],
            ["ended", "finished (exit 0)" if completed else f"exit {big_code}: " + "; ".join(ended)],
            [
                "examples/s (median of the chief's train lines)",
                f"{fmt(rate)} vs {fmt(small_rate)} with {SMALL_IDS:,} ids",
            ],
            [
                "eval AUC (best) vs logistic regression",
                f"{best.get('auc', float('nan')):.4f} vs {best.get('baseline_auc', float('nan')):.4f} at step "
                f"{int(best.get('step', 0))}"
                if best
                else "no evaluation",
            ],
            [
                "the export served in one process",
                f"AUC {served['auc']:.4f} on {served['rows']:,} eval rows; loaded in {fmt(served['load_s'], 1)} s, "
                f"answered in {fmt(served['answer_s'], 1)} s, peak {fmt(served['peak_mb'])} MiB"
                if "auc" in served
                else f"failed: {served.get('error')}",
            ],
        ],
        "the run",
    )
    add_table(
        result,
        [
            "process",
            "peak, attempt 1 (fresh start)",
            "peak, attempt 2 (resumed)",
            "rule's estimate",
            "estimate vs peak",
        ],
        [
            [
                r["label"],
                *(_attempt_peak(documents, i, r["label"]) for i in (0, 1)),
                f"{fmt(r['estimate'] / MIB)} MiB",
                f"{r['off']:+.0%}",
            ]
            for r in rows
        ]
        + [
            [
                f"{host} (host, limit {h['limit_bytes'] / GIB:.1f} GiB{', OVER' if h['over'] else ''})",
                *(_attempt_host(documents, i, host) for i in (0, 1)),
                "",
                "",
            ]
            for host, h in hosts.items()
            if h["limit_bytes"]
        ],
        "each process's peak resident memory (each attempt's memory.json; the higher is judged) against "
        "launcher.rules.memory's estimate (HostNeed.processes; algo-1/master is the chief and the worker it starts); "
        "a host's peak is its memory cgroup's, page cache included",
    )
    small_peaks = process_peaks(small_documents)
    if small_peaks:
        add_table(
            result,
            ["process", f"peak, {SMALL_IDS:,} ids", f"peak, {size.ids:,} ids"],
            [
                [
                    label,
                    f"{fmt(p['peak_bytes'] / MIB)} MiB",
                    f"{fmt(peaks.get(label, {}).get('peak_bytes', 0) / MIB)} MiB",
                ]
                for label, p in small_peaks.items()
            ],
            "the same hosts and limit, the small table",
        )
    saves = gaps_before(big_lines, CHIEF, r"^\[dfm\] checkpoint step=")
    bests = gaps_before(big_lines, CHIEF, r"^\[dfm\] best evaluation kept")
    restores = gaps_before(big_lines, CHIEF, r"^\[dfm\] restored .*continuing at step")
    exports = gaps_before(big_lines, CHIEF, r"^\[dfm\] exported ")
    small_saves = gaps_before(small_lines, CHIEF, r"^\[dfm\] checkpoint step=")
    add_table(
        result,
        ["operation", "seconds (each)", f"seconds, {SMALL_IDS:,} ids", "size"],
        [
            [
                "checkpoint (every ps its shard, on the shared folder)",
                ", ".join(fmt(s, 1) for s in saves) or "n/a",
                ", ".join(fmt(s, 1) for s in small_saves) or "n/a",
                f"{files['checkpoint_bytes'] / GIB:.2f} GiB in {files['checkpoint_files']} data files "
                f"(step {files['checkpoint_step']})",
            ],
            [
                "best evaluation kept (a checkpoint)",
                ", ".join(fmt(s, 1) for s in bests) or "n/a",
                "",
                f"{files['best_bytes'] / GIB:.2f} GiB",
            ],
            ["restore after the lost worker", ", ".join(fmt(s, 1) for s in restores) or "n/a", "", ""],
            [
                "export (restoring the best evaluation first when it is not the last)",
                ", ".join(fmt(s, 1) for s in exports) or "n/a",
                "",
                f"{files['export_bytes'] / GIB:.2f} GiB",
            ],
        ],
        "times from the arrival of the chief's lines: each against the chief's line before it",
    )
    for goal, met, detail in done_when(completed, hosts, rate, small_rate, rows):
        verdict(result, goal, met, detail)
    auc_ok = bool(best) and best.get("auc", 0) > best.get("baseline_auc", 1)
    verdict(
        result,
        "eval AUC above logistic regression on the same data",
        auc_ok if best else None,
        f"{best.get('auc', float('nan')):.4f} vs {best.get('baseline_auc', float('nan')):.4f}" if best else "no eval",
    )
    verdict(
        result,
        "lost a worker, resumed from the checkpoint, kept the best evaluation, exported, served in one process",
        bool(big.killed and resumed and bests and "auc" in served),
        f"resumed at step {resumed[1] if resumed else 'n/a'}; export AUC "
        + (f"{served['auc']:.4f}" if "auc" in served else "n/a"),
    )
    result["notes"].append(
        "The small table runs on `dfm data synth` data (39 fields, ids under 117,581); the big one on `--like "
        "criteo-kaggle` data (Zipf-like ids over 33.8M): a batch reads more distinct rows from the ps there. "
        f"Both: {HOSTS} hosts time-sharing this machine's cores, the same steps, batch, checkpoints and evaluations."
    )
    result["data"] = {
        "ids": size.ids,
        "state_bytes": state,
        "limit_bytes": limit,
        "examples_per_s": rate,
        "small_examples_per_s": small_rate,
        "peaks": {r["label"]: {"peak": r["peak"], "estimate": r["estimate"]} for r in rows},
        "hosts": hosts,
        "checkpoint_s": saves,
        "restore_s": restores,
        "export_s": exports,
        "files": files,
        "served": served,
        "best_eval": best,
    }
