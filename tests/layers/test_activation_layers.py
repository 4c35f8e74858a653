"""ReLU, LeakyReLU, PReLU, ELU and Softmax against NumPy written from Keras 3's formulas."""

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from mirrorfit._src.constraints.constraints import layer_constraints

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 3, 4)).astype(np.float32) * 4  # spans the thresholds and max_value


def np_softmax(x, axis):
    z = np.exp(x - x.max(axis, keepdims=True))
    return z / z.sum(axis, keepdims=True)


@pytest.mark.parametrize("layer, expected", [
    (layers.ReLU(), np.maximum(X, 0)),
    (layers.ReLU(max_value=6.0), np.clip(X, 0, 6)),
    (layers.ReLU(max_value=2.0, negative_slope=0.1, threshold=0.5),
     np.where(X > 0.5, np.minimum(X, 2.0), 0.1 * (X - 0.5))),
    (layers.ReLU(negative_slope=0.2), np.where(X >= 0, X, 0.2 * X)),
    (layers.LeakyReLU(), np.where(X >= 0, X, 0.3 * X)),  # Keras 3's default slope
    (layers.LeakyReLU(alpha=0.1), np.where(X >= 0, X, 0.1 * X)),  # tf.keras 2's name
    (layers.ELU(alpha=0.5), np.where(X > 0, X, 0.5 * np.expm1(X))),
    (layers.Softmax(), np_softmax(X, -1)),
    (layers.Softmax(axis=(1, 2)), np_softmax(X, (1, 2))),
])
def test_activation_layer_matches_keras_formula(layer, expected):
    np.testing.assert_allclose(layer.apply({}, X), expected, rtol=1e-5, atol=1e-6)


def test_softmax_mask_gives_masked_positions_zero_and_renormalizes_the_rest():
    mask = np.array([[1, 1, 0, 1]], bool)
    out = np.asarray(layers.Softmax().apply({}, X[0], mask=mask))
    np.testing.assert_array_equal(out[:, 2], 0)
    np.testing.assert_allclose(out[:, [0, 1, 3]], np_softmax(X[0][:, [0, 1, 3]], -1), rtol=1e-5)


def test_prelu_alpha_shape_shared_axes_and_formula():
    layer = layers.PReLU(shared_axes=[1])
    variables = layer.init(jax.random.key(0), X)
    # Keras: the input shape without the batch axis, shared axes (1-based) set to 1; zeros.
    assert variables["params"]["alpha"].shape == (1, 4)
    np.testing.assert_array_equal(variables["params"]["alpha"], 0)
    alpha = RNG.normal(size=(1, 4)).astype(np.float32)
    out = layer.apply({"params": {"alpha": alpha}}, X)
    np.testing.assert_allclose(out, np.where(X > 0, X, alpha * X), rtol=1e-6)
    assert layers.PReLU().init(jax.random.key(0), X)["params"]["alpha"].size == 3 * 4
    # alpha_constraint goes where the step reads the built-in layers' constraints.
    assert layer_constraints(layers.PReLU(alpha_constraint="non_neg")) == {
        "alpha": mf.constraints.NonNeg()}


def test_activation_layers_reject_keras_invalid_arguments():
    with pytest.raises(ValueError, match="negative_slope"):
        layers.LeakyReLU(-1.0).apply({}, X)
    with pytest.raises(ValueError, match="max_value"):
        layers.ReLU(max_value=-1.0).apply({}, X)
    assert layers.LeakyReLU(alpha=0.1).get_config()["negative_slope"] == 0.1
