"""Item: synchronous steps/s with the end-of-data check on the host before every step (the loop before
this change, `deepfm_sync_steps.host_checked_steps`) vs inside a traced window of steps
(`window_runner`, the host waiting once per window), on one process (SingleProcess collectives).

Small batches and a small MLP, where per-step overhead shows; on a GPU the host round trip costs more
(the step waits for the device), which no CPU run measures.
"""

from __future__ import annotations

from bench.common import add_table, alternate, fmt, median, section, seconds, use_entrypoints, verdict
from bench.contenders import synthetic

BATCH = 256
WINDOW = 16


def _contenders(steps: int) -> dict:
    import tensorflow as tf

    use_entrypoints()
    from deepfm_collectives import SingleProcess
    from deepfm_hparams import parse_hyperparameters
    from deepfm_sync_steps import host_checked_steps, window_runner
    from deepfm_training import build_trainer

    data = synthetic(BATCH * 64, 100_000, seed=4)
    hp = parse_hyperparameters(["--feature_size", str(data.feature_size), "--deep_layers", "64,32",
                                "--batch_size", str(BATCH)])
    trainer = build_trainer(hp)
    step_fn = tf.function(trainer.train_step)
    dataset = tf.data.Dataset.from_tensor_slices(({"ids": data.ids, "values": data.values}, data.labels))
    iterator = iter(dataset.batch(BATCH, drop_remainder=True).cache().repeat())
    runners = {"host check every step (before)": (host_checked_steps(step_fn, SingleProcess()), 1),
               f"in-graph check, host waits every {WINDOW} steps (after)": (window_runner(step_fn, SingleProcess()), WINDOW)}

    def timed(runner, size):
        runner(iterator, size)  # trace and warm up

        def run() -> float:
            def go():
                for _ in range(steps // size):
                    runner(iterator, size)
            return (steps // size) * size / seconds(go)
        return run

    return {name: timed(runner, size) for name, (runner, size) in runners.items()}


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (3 if quick else 7)
    steps = 160 if quick else 640
    result = section(
        "Synchronous step overhead",
        "the in-graph end-of-data check runs at least as many steps/s as a host check before each step",
        f"`bench/sync_steps.py`: the bundled DeepFM (MLP 64-32), batch {BATCH}, one process, {steps} steps per run")
    rates = {name: median(values) for name, values in alternate(_contenders(steps), repetitions).items()}
    before, after = rates.values()
    add_table(result, ["loop", "steps/s"], [[name, fmt(rate, 1)] for name, rate in rates.items()],
              caption=f"median of {repetitions} alternating runs")
    result["data"] = {"before_steps_per_s": before, "after_steps_per_s": after}
    verdict(result, "after >= before", after >= before, f"{fmt(after / before, 2)}x")
    return result
