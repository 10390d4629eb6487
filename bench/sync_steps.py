"""Item: synchronous steps/s with the end-of-data check on the host before every step (the loop before
this change, `deepfm_sync_steps.host_checked_steps`) vs inside a traced window of steps
(`window_runner`, the host waiting once per window): one process alone, and MultiWorkerMirrored with
2 logical CPU devices as its replicas (standing in for a host's GPUs).

Small batches and a small MLP, where per-step overhead shows; on a GPU the host round trip costs more
(the step waits for the device), which no CPU run measures.
"""

from __future__ import annotations

from bench.common import add_table, alternate, fmt, median, section, seconds, use_entrypoints, verdict
from bench.contenders import synthetic

BATCH = 256  # per replica
WINDOW = 16
REPLICAS = 2


def _logical_replicas(count: int) -> None:
    """The CPU as `count` logical devices, each an MWMS replica (it takes only GPUs, or one CPU; the hook
    is TensorFlow-internal, as in tests/entry_support.py). Before any other TensorFlow use."""
    import tensorflow as tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    cars.CollectiveAllReduceExtended._initialize_local_devices = lambda self, cluster_resolver, worker_device: (
        tuple(f"{worker_device}/device:CPU:{i}" for i in range(count)),
        "CPU",
    )


def _contenders(steps: int) -> dict:
    import tensorflow as tf

    use_entrypoints()
    _logical_replicas(REPLICAS)
    import deepfm_sync
    from deepfm_collectives import MirroredCollectives, SingleProcess
    from deepfm_hparams import parse_hyperparameters
    from deepfm_sync_steps import host_checked_steps, window_runner
    from train_mirrored import per_replica, replica_train_step

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    data = synthetic(BATCH * REPLICAS * 64, 100_000, seed=4)
    hp = parse_hyperparameters(
        [
            "--feature_size",
            str(data.feature_size),
            "--deep_layers",
            "64,32",
            "--batch_size",
            str(BATCH),
            "--optimizer",
            "adam",
        ]
    )
    dataset = tf.data.Dataset.from_tensor_slices(({"ids": data.ids, "values": data.values}, data.labels))
    contenders = {}
    for name, collectives in (
        ("one process", SingleProcess()),
        (f"MWMS, {REPLICAS} logical CPU replicas", MirroredCollectives(strategy, 0)),
    ):
        mirrored = isinstance(collectives, MirroredCollectives)
        trainer, _ = deepfm_sync.build_sync_trainer(hp, collectives, tf.float32, strategy if mirrored else None)
        step_fn = replica_train_step(trainer, strategy) if mirrored else tf.function(trainer.train_step)
        batches = dataset.batch(BATCH, drop_remainder=True).cache().repeat()
        iterator = iter(per_replica(strategy, lambda: batches, BATCH) if mirrored else batches)
        contenders[f"{name}: host check every step (before)"] = _timed(
            host_checked_steps(step_fn, collectives), 1, iterator, steps
        )
        contenders[f"{name}: in-graph check, host waits every {WINDOW} steps (after)"] = _timed(
            window_runner(step_fn, collectives), WINDOW, iterator, steps
        )
    return contenders


def _timed(runner, size, iterator, steps):
    runner(iterator, size)  # trace and warm up

    def run() -> float:
        def go():
            for _ in range(steps // size):
                runner(iterator, size)

        return (steps // size) * size / seconds(go)

    return run


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (3 if quick else 7)
    steps = 160 if quick else 640
    result = section(
        "Synchronous step overhead",
        "the in-graph end-of-data check runs at least as many steps/s as a host check before each step",
        f"`bench/sync_steps.py`: the bundled DeepFM (MLP 64-32, lazy Adam), batch {BATCH} per replica, "
        f"{steps} steps per run",
    )
    rates = {name: median(values) for name, values in alternate(_contenders(steps), repetitions).items()}
    add_table(
        result,
        ["loop", "steps/s"],
        [[name, fmt(rate, 1)] for name, rate in rates.items()],
        caption=f"median of {repetitions} alternating runs",
    )
    names = list(rates)
    for before, after in (names[0:2], names[2:4]):
        setting = before.split(":")[0]
        result["data"][setting] = {"before_steps_per_s": rates[before], "after_steps_per_s": rates[after]}
        verdict(
            result,
            f"{setting}: after >= before",
            rates[after] >= rates[before],
            f"{fmt(rates[after] / rates[before], 2)}x",
        )
    return result
