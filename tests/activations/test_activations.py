"""`mf.activations`: Keras 3's functions against NumPy formulas, and their saved names."""

import jax
import numpy as np
import pytest
from scipy.special import erf

import mirrorfit as mf
from mirrorfit._src.activations import activations

X = np.array([[-6.0, -1.5, -0.25, 0.0, 0.3, 2.0, 7.0]], np.float32)
A = mf.activations


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("fn, expected", [
    (A.relu, np.maximum(X, 0)),
    (lambda x: A.relu(x, negative_slope=0.5, max_value=5.0, threshold=1.0),
     np.where(X > 1, np.minimum(X, 5), 0) - 0.5 * np.maximum(1 - X, 0)),
    (A.leaky_relu, np.where(X > 0, X, 0.2 * X)),
    (A.elu, np.where(X > 0, X, np.exp(X) - 1)),
    (A.gelu, 0.5 * X * (1 + erf(X / np.sqrt(2)))),
    (A.hard_sigmoid, np.clip(X + 3, 0, 6) / 6),
    (A.hard_swish, X * np.clip(X + 3, 0, 6) / 6),
    (A.swish, X * _sigmoid(X)),
    (A.mish, X * np.tanh(np.log1p(np.exp(X)))),
    (A.softsign, X / (np.abs(X) + 1)),
    (A.soft_shrink, np.where(X > 0.5, X - 0.5, np.where(X < -0.5, X + 0.5, 0))),
    (A.hard_shrink, np.where(np.abs(X) > 0.5, X, 0)),
    (lambda x: A.threshold(x, 0.2, -1.0), np.where(X > 0.2, X, -1.0)),
    (A.tanh_shrink, X - np.tanh(X)),
    (A.squareplus, (X + np.sqrt(X ** 2 + 4)) / 2),
    (A.softmax, np.exp(X) / np.exp(X).sum(-1, keepdims=True)),
    (A.linear, X),
])
def test_activation_matches_keras_formula(fn, expected):
    np.testing.assert_allclose(np.asarray(fn(X)), expected, rtol=1e-5, atol=1e-6)


def test_activations_save_by_keras_name():
    assert A.serialize(A.swish) == "silu" and A.serialize(A.gelu) == "gelu"
    assert A.serialize(jax.nn.relu) == "relu"  # a jax.nn function in a layer list
    assert A.get("hard_swish") is A.hard_silu and A.get(None) is A.linear
    assert mf.layers.Dense(2, activation=A.leaky_relu).get_config()["activation"] == "leaky_relu"
    assert activations.deserialize("gelu") == "gelu"
    # A layer's config keeps Keras' names as names (the layer resolves them when it runs).
    assert mf.layers.Dense.from_config(mf.layers.Dense(2, activation="gelu").get_config()
                                       ).activation == "gelu"
