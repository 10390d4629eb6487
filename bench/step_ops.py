"""Where the bundled training step's time goes, by kind of TensorFlow op.

The same step as `contenders.bundled` (build_trainer + Trainer.train_step in one tf.function, regularized alike),
run in a TF1-style session with FULL_TRACE, whose step stats time every op of the function, its gradient and the
optimizer's updates. Op time is summed per op type: with 2 threads running ops side by side it adds up to more
than the step's wall time, so the shares are what the table reads.
"""

from __future__ import annotations

import collections

from bench.common import use_entrypoints
from bench.contenders import DROPOUT, L2_DENSE, L2_EMBEDDING


def op_time_by_type(
    data,
    batch: int,
    embedding_size: int,
    compute_dtype: str = "float32",
    steps: int = 5,
    deep_layers=(400, 400, 400),
    threads: int = 2,
) -> list[tuple[str, float, float]]:
    """-> [(op type, ms per step, share of the step's op time)], largest first."""
    import tensorflow as tf

    use_entrypoints()
    from deepfm_hparams import parse_hyperparameters
    from deepfm_training import build_trainer

    graph = tf.Graph()
    with graph.as_default():
        hp = parse_hyperparameters(
            [
                "--feature_size",
                str(data.feature_size),
                "--embedding_size",
                str(embedding_size),
                "--deep_layers",
                ",".join(map(str, deep_layers)),
                "--batch_size",
                str(batch),
                "--optimizer",
                "adagrad",
                "--l2_reg",
                str(L2_EMBEDDING),
                "--dropout",
                str(DROPOUT),
                "--l2_dense",
                str(L2_DENSE),
            ]
        )
        trainer = build_trainer(hp, compute_dtype=tf.as_dtype(compute_dtype))
        dataset = tf.data.Dataset.from_tensor_slices(({"ids": data.ids, "values": data.values}, data.labels))
        batches = tf.compat.v1.data.make_one_shot_iterator(dataset.batch(batch, drop_remainder=True).cache().repeat())
        loss = tf.function(trainer.train_step)(batches.get_next())
        init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    totals: collections.Counter = collections.Counter()
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(init)
        for _ in range(3):
            session.run(loss)  # warm up
        trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for _ in range(steps):
            meta = tf.compat.v1.RunMetadata()
            session.run(loss, options=trace, run_metadata=meta)
            for device in meta.step_stats.dev_stats:
                for node in device.node_stats:
                    label = node.timeline_label
                    kind = label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else node.node_name
                    totals[kind] += node.op_end_rel_micros - node.op_start_rel_micros
    total = sum(totals.values()) or 1
    return [(kind, micros / steps / 1000, micros / total) for kind, micros in totals.most_common()]
