"""`python -m bench.run [--quick] [--out BENCHMARKS.md] [--only a,b] [--repetitions N]`: run every item, write the
report.

Each item runs in a child process (`--item NAME`), so a crash, a hang or one item's TensorFlow thread
pools never reach another; an item that fails is reported as "not run: <reason>", never as a number.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, machine, section, versions
from bench.report import render

# name -> (module, time limit in seconds for quick, full); order matters: later items read earlier data.
ITEMS = {
    "training": ("bench.training", 600, 2400),
    "optimizer": ("bench.optimizer", 300, 1200),
    "pipeline": ("bench.pipeline", 300, 1200),
    "cli": ("bench.cli_latency", 180, 600),
    "distributed": ("bench.distributed", 1800, 7200),
    "raw_pipeline": ("bench.raw_pipeline", 300, 1200),
    "raw_training": ("bench.raw_training", 300, 1200),
    "quality": ("bench.quality", 1500, 2400),
    "baseline": ("bench.baseline", 1500, 2400),
    "tuning": ("bench.tuning", 1800, 3600),
    "tune_example": ("bench.tune_example", 1800, 1800),
    "prepare": ("bench.prepare", 600, 1800),
    "broadcast_memory": ("bench.broadcast_memory", 300, 900),
    "sync_steps": ("bench.sync_steps", 300, 900),
    "probe_stability": ("bench.probe_stability", 2400, 3600),
    "serving": ("bench.serving", 600, 1200),
    "big_table": ("bench.big_table", 1200, 4200),
    "watching": ("bench.watching", 600, 1200),
    "incremental": ("bench.incremental", 1500, 2400),  # 879 s quick, 1237 s full at load 9-17 on 2 cores
}


def run_item(name: str, quick: bool, context: dict) -> dict:
    module, quick_limit, full_limit = ITEMS[name]
    with tempfile.TemporaryDirectory(prefix=f"dfm-bench-{name}-") as tmp:
        result_path, context_path = Path(tmp, "result.json"), Path(tmp, "context.json")
        context_path.write_text(json.dumps(context))
        argv = [
            sys.executable,
            "-m",
            "bench.run",
            "--item",
            name,
            "--result",
            str(result_path),
            "--context",
            str(context_path),
        ] + (["--quick"] if quick else [])
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
        start = time.perf_counter()
        try:
            done = subprocess.run(
                argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=quick_limit if quick else full_limit
            )
            reason = (
                None
                if done.returncode == 0 and result_path.exists()
                else f"exit {done.returncode}: " + _last_line(done.stderr or done.stdout)
            )
        except subprocess.TimeoutExpired:
            reason = f"took longer than {quick_limit if quick else full_limit} s"
        elapsed = time.perf_counter() - start
        if reason is None:
            result = json.loads(result_path.read_text())
        else:
            result = section(name, "", "")
            result["not_run"] = reason
            if "done" in locals() and done.stderr:
                sys.stderr.write(done.stderr[-4000:])
        result["item"], result["elapsed_s"] = name, round(elapsed, 1)
        result["load_after"] = round(os.getloadavg()[0], 2)
        print(f"[bench] {name}: {'not run: ' + reason if reason else 'done'} in {elapsed:.0f} s", flush=True)
        return result


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _child(name: str, quick: bool, result_path: str, context_path: str) -> int:
    module = importlib.import_module(ITEMS[name][0])
    context = json.loads(Path(context_path).read_text())
    result = module.measure(quick, context)
    Path(result_path).write_text(json.dumps(result, default=float))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (minutes)")
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    parser.add_argument(
        "--repetitions", type=int, default=0, help="override every item's number of alternating repetitions"
    )
    parser.add_argument("--only", default="", help="comma-separated items: " + ",".join(ITEMS))
    parser.add_argument("--item", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--context", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.item:
        return _child(args.item, args.quick, args.result, args.context)

    names = [n for n in args.only.split(",") if n] or list(ITEMS)
    unknown = set(names) - set(ITEMS)
    if unknown:
        parser.error(f"unknown items: {', '.join(sorted(unknown))}")
    started = dt.datetime.now(dt.timezone.utc)
    info = {
        "machine": machine(),
        "versions": versions(),
        "quick": args.quick,
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "only": names if args.only else [],
        "repetitions": max(args.repetitions, 0),
    }
    context: dict = {"repetitions": args.repetitions} if args.repetitions > 0 else {}
    results = []
    for name in names:
        result = run_item(name, args.quick, context)
        context[name] = result.get("data", {})
        results.append(result)
    info["elapsed_s"] = round((dt.datetime.now(dt.timezone.utc) - started).total_seconds())
    Path(args.out).write_text(render(info, results))
    print(f"[bench] wrote {args.out} in {info['elapsed_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
