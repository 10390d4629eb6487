"""Item: daily incremental training (docs/daily-training.md). Three synthetic days of one click stream
(`dfm data synth --seed S --day 1|2|3`: the same planted teacher drifting day to day, new ids each day), and on
day 3's eval rows: (a) one job from scratch on days 1-3's train data, against (b) the chain configs/daily.yaml
makes, day 1 from scratch -> day 2 warm-started from day 1's job -> day 3 warm-started from day 2's, each on its own
day's data. Every job is `dfm launch configs/daily.yaml --local` (two hosts, a parameter server on each), one pass
over its data (the config's epochs: 1). Beside them: day 3 alone from scratch (what the warm start adds), and day 2's
parameter-server job as the warm-start source of a Horovod job on the TF 2.12 runtime and of a one-host job, each
trained on day 3.

Training time is the job's training loop, from the chief's "starting at step" line (before the warm start's
restore) to its "trained steps" line, with the CPU seconds every process of the job spent in it (sampled every
0.2 s: on a loaded machine the CPU tells a job's work from its wait); the whole job's wall time (start-up of the
local cluster and export included) and CPU seconds beside them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import DFM, REPO, add_table, fmt, run_sampled_window, section, synth, verdict

CONFIG = "configs/daily.yaml"
SEED = 23
DRIFT, NEW_IDS = 0.1, 0.1  # dfm data synth's defaults for --day, written out
# rows per day, eval rows per day, train files per day (s3_shard over 2 hosts: at least 2). Each job pays a fixed
# cost (tracing, the end-of-epoch evaluation, restore, checkpoints: about 18 CPU-s, report 21) beside its rows, so the
# full size's days are big enough that the rows dominate, as a real day's click log does.
SIZES = {True: (150_000, 30_000, 2), False: (1_500_000, 50_000, 4)}
PROOF_STEPS = 100  # the Horovod and one-host jobs prove restore-and-train: a capped run
AUC_MARGIN = 0.002
TIME_SHARE = 0.5
START_MARK = "starting at step"  # the chief's resume check, before a warm start restores
END_MARK = "[dfm] trained steps"
WARM_MARK = "[dfm] warm start: restored"
HOROVOD_212 = [
    "instance.count=1",
    "entry_point=deepfm-horovod",
    'framework.version="2.12"',
    "framework.python=py310",
    "distribution={horovod: {processes_per_host: 2}}",
    "hyperparameters.learning_rate=0.15",  # x 2 ranks (the script scales it): daily.yaml's 0.3
    f"hyperparameters.max_steps={PROOF_STEPS}",
]
ONE_HOST = ["instance.count=1", "distribution=none", f"hyperparameters.max_steps={PROOF_STEPS}"]


@dataclass
class Run:
    code: int
    text: str
    wall: float  # the whole job: dfm launch from start to end
    cpu: float  # CPU seconds of every process of the job (sampled)
    loop: float = float("nan")  # the training loop: from the START_MARK line to the END_MARK line
    loop_cpu: float = float("nan")  # CPU seconds of every process of the job within the loop


def loop_mark(line: str) -> bool:
    """The lines that open and close a job's training loop (run_sampled_window's window)."""
    return START_MARK in line or END_MARK in line


def final_auc(text: str) -> float:
    """The last eval line's AUC (the run's last evaluation); nan without one."""
    from launcher.metric_lines import parse_metric_line

    evals = [parsed[1] for parsed in map(parse_metric_line, text.splitlines()) if parsed and parsed[0] == "eval"]
    return evals[-1].get("auc", float("nan")) if evals else float("nan")


def train_steps(text: str) -> int:
    """The last step of the "[dfm] trained steps 0..N" line (0 without one)."""
    found = re.findall(r"\[dfm\] trained steps \d+\.\.(\d+)", text)
    return int(found[-1]) if found else 0


def run_folder(text: str) -> Path | None:
    """The local run's folder, from dfm's first line ("... logs in <run folder>/logs")."""
    found = re.search(r"logs in (\S+)/logs\b", text)
    return Path(found[1]) if found else None


def warm_start_line(text: str) -> str:
    """The script's "warm start: restored ..." line without its process prefix; '' when it restored nothing."""
    for line in text.splitlines():
        if WARM_MARK in line:
            return line[line.index("[dfm]") :]
    return ""


def restored_and_trained(run: Run) -> tuple[bool, str]:
    """A warm-started job that restored (its warm-start line), trained (a trained-steps line) and ended 0."""
    warm, steps = warm_start_line(run.text), train_steps(run.text)
    met = run.code == 0 and bool(warm) and steps > 0
    detail = f"exit {run.code}; {warm or 'no warm-start line'}; {steps} steps; eval AUC {fmt(final_auc(run.text), 4)}"
    return met, detail


def goal(a: tuple[float, float], b: tuple[float, float]) -> tuple[bool, str]:
    """(b) >= (a)'s AUC - AUC_MARGIN in <= TIME_SHARE of (a)'s time; a and b are (AUC, seconds)."""
    (auc_a, sec_a), (auc_b, sec_b) = a, b
    auc_ok, time_ok = auc_b >= auc_a - AUC_MARGIN, sec_b <= TIME_SHARE * sec_a
    detail = (
        f"AUC (b) {fmt(auc_b, 4)} vs (a) {fmt(auc_a, 4)} ({auc_b - auc_a:+.4f}: {'ok' if auc_ok else 'short'}); "
        f"time (b) {fmt(sec_b, 1)} s = {sec_b / sec_a:.2f} x (a)'s {fmt(sec_a, 1)} s ({'ok' if time_ok else 'over'})"
    )
    return auc_ok and time_ok, detail


def _launch(run_dir: Path, train: Path, eval_: Path, sets: list[str], warm_from: Path | None = None) -> Run:
    argv = [DFM, "launch", CONFIG, "--local", "--run-dir", str(run_dir), "--timeout", "1500"]
    argv += ["--warm-start-from", str(warm_from)] if warm_from else ["--set", "warm_start=null"]
    for item in sets:
        argv += ["--set", item]
    argv += ["--channel", f"train={train}", "--channel", f"eval={eval_}"]
    done, wall, by_label, (loop, loop_cpu, _, _) = run_sampled_window(
        argv, lambda process: "job", 1600, loop_mark, cwd=REPO
    )
    text = done.stdout + done.stderr
    cpu = sum(loop_cpu.values()) if loop_cpu else float("nan")
    return Run(done.returncode, text, wall, sum(by_label.values()), loop, cpu)


def _joined(days: list[Path], into: Path) -> Path:
    """One train folder holding every day's train files (hard links, else copies), named by their day."""
    into.mkdir(parents=True)
    for day, folder in enumerate(days, 1):
        for path in sorted((folder / "train").iterdir()):
            target = into / f"day{day}-{path.name}"
            try:
                os.link(path, target)
            except OSError:
                shutil.copy(path, target)
    return into


def _row(name: str, data: str, rows: int, run: Run) -> list:
    return [
        name,
        data,
        fmt(rows),
        train_steps(run.text),
        fmt(final_auc(run.text), 4),
        fmt(run.loop, 1),
        fmt(run.loop_cpu, 0),
        fmt(run.wall, 1),
        fmt(run.cpu, 0),
    ]


def _must(run: Run, what: str) -> Run:
    if run.code != 0 or run_folder(run.text) is None:
        lines = run.text.splitlines()
        tail = [line for line in lines if "error" in line.lower()] or lines[-3:]
        raise RuntimeError(f"{what}: exit {run.code}: {tail[-1][:300] if tail else 'no output'}")
    return run


def measure(quick: bool, context: dict) -> dict:
    rows, eval_rows, files = SIZES[quick]
    synth_flags = ["--drift", str(DRIFT), "--new-ids", str(NEW_IDS)]
    result = section(
        "Daily incremental training: warm start against retraining on all days",
        f"(b) day 3 warm-started from day 2 (itself from day 1) reaches >= (a) from scratch on days 1-3's AUC - "
        f"{AUC_MARGIN} on day 3's eval in <= {TIME_SHARE:g} x (a)'s training time; a parameter-server job's output "
        "warm-starts a Horovod job (TF 2.12) and a one-host job, each restores and trains",
        f"`dfm data synth --seed {SEED} --day N {' '.join(synth_flags)} --rows {rows:,} --eval-rows {eval_rows:,} "
        f"--files {files}` for N = 1, 2, 3; every job `dfm launch {CONFIG} --local` (2 hosts, parameter server, "
        "one epoch), the chain with `--warm-start-from <yesterday's run folder>`, the others with "
        "`--set warm_start=null`, the Horovod job with `" + " ".join(f"--set {s}" for s in HOROVOD_212) + "`, "
        "the one-host job with `" + " ".join(f"--set {s}" for s in ONE_HOST) + "`; `bench/incremental.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-incremental-"))
    runs = work / "runs"
    try:
        days = [
            synth(
                work / f"day-{day}",
                *("--seed", str(SEED), "--day", str(day), *synth_flags),
                *("--rows", str(rows), "--eval-rows", str(eval_rows), "--files", str(files)),
            )
            for day in (1, 2, 3)
        ]
        eval3 = days[2] / "eval"
        day1 = _must(_launch(runs, days[0] / "train", days[0] / "eval", []), "day 1")
        day2 = _must(_launch(runs, days[1] / "train", days[1] / "eval", [], run_folder(day1.text)), "day 2")
        scratch = _must(_launch(runs, _joined(days, work / "days-1-3"), eval3, []), "(a) days 1-3 from scratch")
        warm = _must(_launch(runs, days[2] / "train", eval3, [], run_folder(day2.text)), "(b) day 3 warm")
        alone = _launch(runs, days[2] / "train", eval3, [])
        horovod = _launch(runs, days[2] / "train", eval3, HOROVOD_212, run_folder(day2.text))
        one_host = _launch(runs, days[2] / "train", eval3, ONE_HOST, run_folder(day2.text))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    day_rows, capped = f"{rows:,} rows", f"day 3, max_steps {PROOF_STEPS}"
    add_table(
        result,
        ["job", "trained on", "train rows", "steps", "eval AUC", "training loop s", "its CPU s", "job wall s", "CPU s"],
        [
            _row("day 1 from scratch (chain)", "day 1", rows, day1),
            _row("day 2 warm from day 1 (chain)", "day 2", rows, day2),
            _row("**(b)** day 3 warm from day 2 (chain)", "day 3", rows, warm),
            _row("**(a)** from scratch on days 1-3", "days 1-3", 3 * rows, scratch),
            _row("day 3 alone from scratch", "day 3", rows, alone),
            _row("Horovod, TF 2.12, 2 ranks: warm from day 2's PS job", capped, rows, horovod),
            _row("one host: warm from day 2's PS job", capped, rows, one_host),
        ],
        f"each day {day_rows} of train, {eval_rows:,} of eval; eval AUC: day 1 and 2 on their own day's eval, every "
        "other job on day 3's",
    )
    a = (final_auc(scratch.text), scratch.loop)
    b = (final_auc(warm.text), warm.loop)
    met, detail = goal(a, b)
    detail += (
        f"; the loop's CPU: (b) {fmt(warm.loop_cpu, 0)} s = {warm.loop_cpu / scratch.loop_cpu:.2f} x (a)'s "
        f"{fmt(scratch.loop_cpu, 0)} s"
    )
    verdict(
        result,
        f"(b) >= (a) AUC - {AUC_MARGIN} in <= {TIME_SHARE:g} x (a)'s training time (training loop)",
        met,
        detail,
    )
    met_wall, detail_wall = goal((a[0], scratch.wall), (b[0], warm.wall))
    verdict(
        result,
        "the same on the whole job's wall time (local cluster start-up and export included)",
        met_wall,
        detail_wall,
    )
    for name, run in (("Horovod job (TF 2.12)", horovod), ("one-host job", one_host)):
        verdict(result, f"a parameter-server job's output warm-starts a {name}: it restores and trains",
                *restored_and_trained(run))  # fmt: skip
    result["notes"] += [
        f"(b)'s warm-start line: `{warm_start_line(warm.text) or 'none'}`",
        "Jobs ran one after another in this order: day 1, day 2, (a), (b), day 3 alone, Horovod, one host; (a) and "
        "(b) back to back so that a change in the machine's load falls on both alike.",
    ]
    result["data"] = {
        "a_auc": a[0],
        "a_training_s": a[1],
        "a_wall_s": scratch.wall,
        "a_training_cpu_s": scratch.loop_cpu,
        "b_auc": b[0],
        "b_training_s": b[1],
        "b_wall_s": warm.wall,
        "b_training_cpu_s": warm.loop_cpu,
        "day3_alone_auc": final_auc(alone.text),
        "horovod_auc": final_auc(horovod.text),
        "one_host_auc": final_auc(one_host.text),
    }
    return result
