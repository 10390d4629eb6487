"""The model's dropout: tf.nn.dropout's law (exact keep probability per dtype, scaling, independent
elements) from one random byte per element."""

from fractions import Fraction

import numpy as np
import pytest

import entry_support  # noqa: F401  (puts the entry points on sys.path)

tf = pytest.importorskip("tensorflow")
import deepfm_model as M  # noqa: E402

pytestmark = pytest.mark.runtimes  # every test here runs on each image family's runtime too

RATES = [0.2, 0.1, 0.5, 1 / 3, 0.05, 0.9, 0.9999]  # 0.9999 is 1 in float16 and bfloat16


def drop_probability(high, low, low_bits):
    """Of the new rule: the top byte below `high`, or equal to it and the low bits below `low`."""
    return Fraction(high, 256) + Fraction(low, 256 * 2**low_bits)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_tf_uniform_draws_are_multiples_of_two_to_the_minus_the_bits_the_threshold_assumes(dtype):
    tf.random.set_seed(1)
    bits = M._UNIFORM_BITS[dtype]
    draws = tf.cast(tf.random.uniform([200_000], dtype=dtype), tf.float64).numpy() * 2**bits
    np.testing.assert_array_equal(draws, np.floor(draws))
    assert draws.min() >= 0 and draws.max() < 2**bits
    assert len(np.unique(draws)) > min(2**bits, 100_000) * 0.5  # and they use those bits


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("rate", RATES)
def test_drop_probability_is_exactly_tf_nn_dropouts(dtype, rate):
    """tf.nn.dropout drops where uniform < rate in `dtype`; count those of the 2**bits equally likely draws."""
    bits = M._UNIFORM_BITS[dtype]
    numpy_dtype = dtype.as_numpy_dtype
    draws = (np.arange(2**bits, dtype=np.float64) * 2.0**-bits).astype(numpy_dtype)
    dropped = int(np.count_nonzero(draws < np.array(rate, numpy_dtype)))
    assert drop_probability(*M.dropout_threshold(rate, dtype)) == Fraction(dropped, 2**bits)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16])
def test_dropout_keeps_elements_at_the_keep_probability_scaled_and_its_gradient_is_the_mask(dtype):
    """16M elements: the keep share is within 4 sigma (about 4e-4) of the exact probability; getting the
    1-in-256 ties wrong would move it by up to 1/256 of the keep or drop probability (8e-4 at least)."""
    tf.random.set_seed(2)
    rate = 0.2
    x = tf.ones([4096, 4096], dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = M.dropout(x, rate)
        total = tf.reduce_sum(tf.cast(y, tf.float32))
    grad = tape.gradient(total, x).numpy()
    values = y.numpy()
    scale = np.array(1 / (1 - rate), dtype.as_numpy_dtype)
    assert set(np.unique(values).tolist()) == {0.0, float(scale)}
    np.testing.assert_array_equal(grad, values)  # d/dx of the kept elements is the scale, 0 elsewhere
    keep = 1 - float(drop_probability(*M.dropout_threshold(rate, dtype)))
    share = np.count_nonzero(values) / values.size
    assert abs(share - keep) < 4 * np.sqrt(keep * (1 - keep) / values.size), (share, keep)
    again = M.dropout(x, rate).numpy()
    assert np.count_nonzero(again != values) > 0.2 * values.size  # a fresh mask every call


def test_dropout_masks_differ_per_step_inside_a_compiled_function_and_keep_odd_shapes():
    tf.random.set_seed(3)
    step = tf.function(lambda x: M.dropout(x, 0.3))
    x = tf.ones([7, 13])  # 91 elements: not a multiple of the 4 bytes of a random word
    first, second = step(x).numpy(), step(x).numpy()
    assert first.shape == (7, 13) and np.any(first != second)


def test_a_rate_that_rounds_to_one_in_the_dtype_drops_everything_as_tf_nn_dropout_does():
    x = tf.ones([3, 5], tf.float16)
    assert not np.any(M.dropout(x, 0.9999).numpy())
    assert np.count_nonzero(M.dropout(tf.ones([300, 50]), 0.9999).numpy()) < 10  # float32: 1 in 10,000 kept


@pytest.mark.parametrize("gpus,byte_dropout", [("0", True), ("", True), ("4", False)])
def test_the_byte_dropout_is_for_cpu_steps_and_gpu_hosts_keep_tf_nn_dropout(monkeypatch, gpus, byte_dropout):
    from deepfm_hparams import parse_hyperparameters
    from deepfm_model import build_model

    monkeypatch.setenv("SM_NUM_GPUS", gpus)
    model = build_model(parse_hyperparameters(["--feature_size", "50", "--field_size", "3", "--deep_layers", "4"]))
    assert model.byte_dropout is byte_dropout
