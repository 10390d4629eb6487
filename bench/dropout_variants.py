"""`python -m bench.dropout_variants [float32|bfloat16] [batch]`: what the bundled dropout costs, beside its variants.

Three dropouts at rate 0.2 over a [batch, 400] activation, forward and backward, 20 per compiled call, alternating:
the bundled `deepfm_model.dropout` (one random byte per element, a second draw for the ties with the threshold's top
byte), the same without the tie draw (its law then differs from tf.nn.dropout's: timing only), tf.nn.dropout, and
no dropout. A one-off diagnostic for the training item's gap to its ceiling (README, Benchmarks); not in make bench.
"""

from __future__ import annotations

import sys

from bench.common import alternate, median, seconds, use_entrypoints


def measure(dtype_name: str = "float32", batch: int = 512, repetitions: int = 7) -> dict[str, float]:
    """-> ms per three dropouts forward and backward, by variant."""
    import tensorflow as tf

    use_entrypoints()
    import deepfm_model

    dtype = tf.as_dtype(dtype_name)
    source = tf.Variable(tf.random.normal([batch, 400], seed=1))

    def without_ties(x, rate):
        exact = deepfm_model.dropout_threshold
        deepfm_model.dropout_threshold = lambda r, d: exact(r, d)[:1] + (0, exact(r, d)[2])
        try:
            return deepfm_model.dropout(x, rate)
        finally:
            deepfm_model.dropout_threshold = exact

    variants = {
        "bundled": deepfm_model.dropout,
        "bundled without the tie draw": without_ties,
        "tf.nn.dropout": lambda x, rate: tf.nn.dropout(x, rate=rate),
        "none": lambda x, rate: x,
    }
    contenders = {}
    for name, drop in variants.items():

        @tf.function
        def calls(drop=drop):
            for _ in range(20):
                with tf.GradientTape() as tape:
                    y = drop(drop(drop(tf.cast(source, dtype), 0.2), 0.2), 0.2)
                    total = tf.reduce_sum(tf.cast(y, tf.float32))
                source.assign_sub(tape.gradient(total, source) * 1e-9)
            return total

        calls()  # trace
        contenders[name] = lambda calls=calls: 20 / seconds(calls)
    return {name: 1000 / median(rates) for name, rates in alternate(contenders, repetitions).items()}


if __name__ == "__main__":
    precision, size = (sys.argv[1:] + ["float32"])[0], int((sys.argv[2:] + ["512"])[0])
    for variant, ms in measure(precision, size).items():
        print(f"{variant:32s} {precision} batch {size}: {ms:.3f} ms per three dropouts, forward and backward")
