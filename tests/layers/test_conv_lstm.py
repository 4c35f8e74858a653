"""ConvLSTM2D against a NumPy convolutional LSTM written from Keras' cell, and its weights."""

import jax
import numpy as np

from mirrorfit import layers

RNG = np.random.default_rng(0)


def np_conv2d(x, w, pad):
    """Stride-1 2-D correlation in NumPy: ``x [b, h, w, c]``, ``w [kh, kw, c, f]``; ``pad``
    zeros on every side (1 for a 3x3 "same")."""
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w.shape[:2]
    rows, cols = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], rows, cols, w.shape[-1]))
    for i in range(rows):
        for j in range(cols):
            out[:, i, j] = np.tensordot(x[:, i:i + kh, j:j + kw], w, axes=3)
    return out


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def test_conv_lstm_2d_matches_keras_cell_in_numpy():
    filters, channels = 2, 3
    layer = layers.ConvLSTM2D(filters, 3, return_sequences=True, return_state=True)
    x = RNG.normal(size=(2, 3, 5, 5, channels)).astype(np.float32)
    # (Zero kernels: the orthogonal initializer's QR costs seconds of compile time here.)
    zero_kernels = layers.ConvLSTM2D(filters, 3, kernel_initializer="zeros",
                                     recurrent_initializer="zeros")
    params = zero_kernels.init(jax.random.key(0), x)["params"]
    # Keras' weights: kernel, recurrent_kernel, bias; the forget bias starts at one.
    assert {k: v.shape for k, v in params.items()} == {
        "kernel": (3, 3, channels, 4 * filters), "recurrent_kernel": (3, 3, filters, 4 * filters),
        "bias": (4 * filters,)}
    np.testing.assert_array_equal(params["bias"], [0, 0, 1, 1, 0, 0, 0, 0])
    count = sum(v.size for v in jax.tree.leaves(params))
    assert count == 3 * 3 * (channels + filters) * 4 * filters + 4 * filters  # Keras' count

    w = {k: RNG.normal(size=v.shape).astype(np.float32) * 0.5 for k, v in params.items()}
    outputs, h_last, c_last = layer.apply({"params": w}, x)
    h = c = np.zeros((2, 3, 3, filters))  # "valid" 3x3 on 5x5
    expected = []
    for t in range(3):
        z = np_conv2d(x[:, t], w["kernel"], 0) + w["bias"] + np_conv2d(
            h, w["recurrent_kernel"], 1)
        i, f, g, o = np.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        expected.append(h)
    np.testing.assert_allclose(outputs, np.stack(expected, 1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h_last, h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c_last, c, rtol=1e-4, atol=1e-5)
    # Dropout masks act in training only.
    dropped = layers.ConvLSTM2D(filters, 3, dropout=0.5, recurrent_dropout=0.5)
    np.testing.assert_array_equal(dropped.apply({"params": w}, x), outputs[:, -1])
    train = jax.jit(lambda key: dropped.apply({"params": w}, x, training=True,
                                              rngs={"dropout": key}))  # one compile
    assert not np.allclose(train(jax.random.key(1)), outputs[:, -1])
