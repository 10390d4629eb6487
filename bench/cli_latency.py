"""Item 4: wall time of dfm's everyday commands against the bare SageMaker SDK import they must not exceed."""

from __future__ import annotations

import subprocess
import sys

from bench.common import DFM, REPO, add_table, alternate, fmt, median, run_measured, section, verdict

HELP_LIMIT_S = 0.5
DRY_RUN_MARGIN_S = 1.0


def _commands() -> dict[str, list[str]]:
    return {
        "dfm --help": [DFM, "--help"],
        "dfm validate configs/ps.yaml": [DFM, "validate", "configs/ps.yaml"],
        "dfm launch configs/ps.yaml --dry-run": [DFM, "launch", "configs/ps.yaml", "--dry-run"],
        'python -c "import sagemaker.tensorflow"': [sys.executable, "-c", "import sagemaker.tensorflow"],
    }


def measure(quick: bool, context: dict) -> dict:
    result = section(
        "CLI latency",
        f"`dfm --help` and `dfm validate` under {HELP_LIMIT_S} s; "
        f"`dfm launch --dry-run` within {DRY_RUN_MARGIN_S} s of a bare `import sagemaker.tensorflow`",
        "each command as a subprocess from the repository root, alternating, wall time",
    )
    repetitions = context.get("repetitions") or (3 if quick else 9)
    commands = _commands()
    failures: dict[str, str] = {}
    cpu: dict[str, list[float]] = {name: [] for name in commands}

    def runner(name: str, argv: list[str]):
        def run_once() -> float:
            done, elapsed, cpu_s = run_measured(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
            cpu[name].append(cpu_s)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines()
                failures[name] = f"exit {done.returncode}: {lines[-1] if lines else ''}"[:200]
            return elapsed

        return run_once

    for argv in commands.values():  # warm the page cache so the first contender is not penalised
        subprocess.run(argv, cwd=REPO, capture_output=True, timeout=120)
    times = alternate({name: runner(name, argv) for name, argv in commands.items()}, repetitions)
    medians = {name: median(values) for name, values in times.items()}
    cpu_medians = {name: median(values) for name, values in cpu.items()}
    bare_name = 'python -c "import sagemaker.tensorflow"'
    bare, bare_cpu = medians[bare_name], cpu_medians[bare_name]

    rows = []
    for name, value in medians.items():
        if name.startswith("dfm launch"):
            goal = f"<= bare import + {DRY_RUN_MARGIN_S:.1f} s ({fmt(bare + DRY_RUN_MARGIN_S, 2)} s)"
        elif name.startswith("python"):
            goal = "reference"
        else:
            goal = f"< {HELP_LIMIT_S} s"
        status = f"failed ({failures[name]})" if name in failures else "ok"
        rows.append([f"`{name}`", fmt(value, 3), fmt(value / bare, 2), fmt(cpu_medians[name], 3), goal, status])
    add_table(
        result, ["command", "median wall s", "x bare import", "median CPU s", "goal (on wall time)", "exit"], rows
    )

    for name in ("dfm --help", "dfm validate configs/ps.yaml"):
        met = medians[name] < HELP_LIMIT_S and name not in failures
        verdict(
            result,
            f"{name} < {HELP_LIMIT_S} s",
            met,
            f"{fmt(medians[name], 3)} s"
            + (
                ""
                if met
                else f" (over by {fmt(medians[name] - HELP_LIMIT_S, 3)} s)"
                if name not in failures
                else f"; {failures[name]}"
            ),
        )
    dry = medians["dfm launch configs/ps.yaml --dry-run"]
    dry_failed = "dfm launch configs/ps.yaml --dry-run" in failures
    met = dry - bare <= DRY_RUN_MARGIN_S and not dry_failed
    dry_cpu = cpu_medians["dfm launch configs/ps.yaml --dry-run"]
    verdict(
        result,
        f"dry run within {DRY_RUN_MARGIN_S} s of the bare import",
        met,
        f"{fmt(dry - bare, 3)} s over the bare import in wall time"
        + ("" if met else f" (over by {fmt(dry - bare - DRY_RUN_MARGIN_S, 3)} s)")
        + f"; {fmt(dry_cpu - bare_cpu, 3)} s in CPU time"
        + (f"; {failures['dfm launch configs/ps.yaml --dry-run']}" if dry_failed else ""),
    )
    result["notes"] += [
        f"{repetitions} alternating repetitions per command; a first untimed round warms the page cache.",
        "CPU s: user + system time of the command and its children. Wall time well above CPU time means the "
        "command waited (for a CPU on a loaded machine, or for I/O), not that it worked longer.",
    ]
    result["data"] = {"medians_s": medians, "failures": failures}
    return result
