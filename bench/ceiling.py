"""An estimate of the best DeepFM examples/s this machine allows, from two measured kernels.

Model: one training example costs its MLP GEMMs (forward X@W, backward dY@W^T and X^T@dY, i.e. about
3x the forward FLOPs) at the GEMM throughput measured for the model's exact shapes, plus its embedding
traffic (39 rows gathered forward, then a fused sparse Adagrad update of the same rows) at the measured
gather/scatter speed. Everything else (activations, the FM term, loss, Python and step overhead) is left
out, which is why this is a ceiling and not a prediction.
"""

from __future__ import annotations

import numpy as np

from bench.common import seconds

FIELDS = 39


def mlp_flops_per_example(embedding_size: int, layers: list[int]) -> float:
    dims = [FIELDS * embedding_size, *layers, 1]
    forward = sum(2 * a * b for a, b in zip(dims[:-1], dims[1:]))
    return 3.0 * forward


def _gemm_step(tf, batch: int, embedding_size: int, layers: list[int], dtype: str = "float32"):
    """The MLP's matmuls in the order backpropagation runs them: forward x@W layer by layer, then per
    layer from the top dW = x^T@dy and dy = dy@W^T. No bias, activation or loss: only the GEMMs, in `dtype`
    (the bfloat16 ceiling: the GEMMs the bfloat16 step runs)."""
    dims = [FIELDS * embedding_size, *layers, 1]
    rng = np.random.default_rng(0)
    # 1/sqrt(fan-in) keeps values near 1 through the chain: no overflow and no slow denormals.
    weights = [
        tf.cast(rng.standard_normal((a, b), dtype=np.float32) / np.sqrt(a), dtype) for a, b in zip(dims[:-1], dims[1:])
    ]
    inputs = tf.cast(rng.standard_normal((batch, dims[0]), dtype=np.float32), dtype)

    @tf.function
    def step():
        activations = [inputs]
        for w in weights:
            activations.append(tf.matmul(activations[-1], w))
        dy, out = tf.ones_like(activations[-1]), []
        for x, w in zip(reversed(activations[:-1]), reversed(weights)):
            out.append(tf.matmul(x, dy, transpose_a=True))
            dy = tf.matmul(dy, w, transpose_b=True)
        return out + [dy]

    return step


def _embedding_step(tf, batch: int, embedding_size: int, vocabulary: int):
    rng = np.random.default_rng(1)
    ids = tf.constant(rng.integers(0, vocabulary, size=(batch, FIELDS)), dtype=tf.int64)
    flat_ids = tf.reshape(ids, [-1])
    tables = [tf.Variable(tf.random.normal([vocabulary, width], stddev=0.01)) for width in (embedding_size, 1)]
    accumulators = [tf.Variable(tf.fill([vocabulary, width], 0.1)) for width in (embedding_size, 1)]
    grad_values = [
        tf.constant(rng.standard_normal((batch * FIELDS, width), dtype=np.float32)) for width in (embedding_size, 1)
    ]

    @tf.function
    def step():
        out = []
        for table, accumulator, grad in zip(tables, accumulators, grad_values):
            out.append(tf.gather(table, ids))
            tf.raw_ops.ResourceSparseApplyAdagradV2(
                var=table.handle, accum=accumulator.handle, lr=0.01, epsilon=1e-7, grad=grad, indices=flat_ids
            )
        return out

    return step


def kernels(
    batch: int,
    embedding_size: int,
    layers: list[int],
    vocabulary: int,
    calls: int,
    gemm_dtypes: tuple[str, ...] = ("float32",),
) -> dict:
    """name -> callable timing `calls` runs of that kernel and returning seconds per batch: `embedding`, and
    `gemm` (float32) or `gemm_<dtype>` for each of gemm_dtypes."""
    import tensorflow as tf

    steps = {
        ("gemm" if dtype == "float32" else f"gemm_{dtype}"): _gemm_step(tf, batch, embedding_size, layers, dtype)
        for dtype in gemm_dtypes
    }
    steps["embedding"] = _embedding_step(tf, batch, embedding_size, vocabulary)
    for step in steps.values():
        step()  # trace and warm up
    return {
        name: (lambda step=step: seconds(lambda: [step() for _ in range(calls)]) / calls)
        for name, step in steps.items()
    }


def ceiling(gemm_s: float, embedding_s: float, batch: int, embedding_size: int, layers: list[int]) -> dict:
    """The model above from the kernels' seconds per batch."""
    flops = mlp_flops_per_example(embedding_size, layers) * batch
    embedding_bytes = batch * FIELDS * (embedding_size + 1) * 4 * 5  # gather + accum r/w + var r/w
    return {
        "mlp_flops_per_example": mlp_flops_per_example(embedding_size, layers),
        "gemm_gflops": flops / gemm_s / 1e9,
        "embedding_gbytes_per_s": embedding_bytes / embedding_s / 1e9,
        "gemm_s_per_batch": gemm_s,
        "embedding_s_per_batch": embedding_s,
        "ceiling_examples_per_s": batch / (gemm_s + embedding_s),
    }
