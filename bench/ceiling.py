"""An estimate of the best DeepFM examples/s this machine allows, from two measured kernels.

Model: one training example costs its MLP GEMMs (forward X@W, backward dY@W^T and X^T@dY, i.e. about
3x the forward FLOPs) at the GEMM throughput measured for the model's exact shapes, plus its embedding
traffic (39 rows gathered forward, then a fused sparse Adagrad update of the same rows) at the measured
gather/scatter speed. Everything else (activations, the FM term, loss, Python and step overhead) is left
out, which is why this is a ceiling and not a prediction.
"""

from __future__ import annotations

import numpy as np

from bench.common import alternate, median, seconds

FIELDS = 39


def mlp_flops_per_example(embedding_size: int, layers: list[int]) -> float:
    dims = [FIELDS * embedding_size, *layers, 1]
    forward = sum(2 * a * b for a, b in zip(dims[:-1], dims[1:]))
    return 3.0 * forward


def _gemm_step(tf, batch: int, embedding_size: int, layers: list[int]):
    dims = [FIELDS * embedding_size, *layers, 1]
    rng = np.random.default_rng(0)
    weights = [tf.constant(rng.standard_normal((a, b), dtype=np.float32) * 0.05)
               for a, b in zip(dims[:-1], dims[1:])]
    inputs = [tf.constant(rng.standard_normal((batch, a), dtype=np.float32)) for a in dims[:-1]]
    grads = [tf.constant(rng.standard_normal((batch, b), dtype=np.float32)) for b in dims[1:]]

    @tf.function
    def step():
        out = []
        for x, w, dy in zip(inputs, weights, grads):
            out.append(tf.matmul(x, w))
            out.append(tf.matmul(dy, w, transpose_b=True))
            out.append(tf.matmul(x, dy, transpose_a=True))
        return out

    return step


def _embedding_step(tf, batch: int, embedding_size: int, vocabulary: int):
    rng = np.random.default_rng(1)
    ids = tf.constant(rng.integers(0, vocabulary, size=(batch, FIELDS)), dtype=tf.int64)
    flat_ids = tf.reshape(ids, [-1])
    tables = [tf.Variable(tf.random.normal([vocabulary, width], stddev=0.01)) for width in (embedding_size, 1)]
    accumulators = [tf.Variable(tf.fill([vocabulary, width], 0.1)) for width in (embedding_size, 1)]
    grad_values = [tf.constant(rng.standard_normal((batch * FIELDS, width), dtype=np.float32))
                   for width in (embedding_size, 1)]

    @tf.function
    def step():
        out = []
        for table, accumulator, grad in zip(tables, accumulators, grad_values):
            out.append(tf.gather(table, ids))
            tf.raw_ops.ResourceSparseApplyAdagradV2(
                var=table.handle, accum=accumulator.handle, lr=0.01, epsilon=1e-7, grad=grad,
                indices=flat_ids)
        return out

    return step


def measure_ceiling(batch: int, embedding_size: int, layers: list[int], vocabulary: int,
                    repetitions: int, calls: int) -> dict:
    import tensorflow as tf

    gemm = _gemm_step(tf, batch, embedding_size, layers)
    embed = _embedding_step(tf, batch, embedding_size, vocabulary)
    gemm(), embed()  # trace and warm up

    def timed(step):
        return lambda: seconds(lambda: [step() for _ in range(calls)]) / calls

    times = alternate({"gemm": timed(gemm), "embedding": timed(embed)}, repetitions)
    gemm_s, embed_s = median(times["gemm"]), median(times["embedding"])
    flops = mlp_flops_per_example(embedding_size, layers) * batch
    embedding_bytes = batch * FIELDS * (embedding_size + 1) * 4 * 5  # gather + accum r/w + var r/w
    per_example = (gemm_s + embed_s) / batch
    return {
        "batch": batch, "embedding_size": embedding_size,
        "mlp_flops_per_example": mlp_flops_per_example(embedding_size, layers),
        "gemm_gflops": flops / gemm_s / 1e9,
        "embedding_gbytes_per_s": embedding_bytes / embed_s / 1e9,
        "gemm_s_per_batch": gemm_s, "embedding_s_per_batch": embed_s,
        "ceiling_examples_per_s": 1.0 / per_example,
    }
