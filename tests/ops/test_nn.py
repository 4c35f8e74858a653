"""The neural-network ops of ``mf.ops`` against Keras' formulas written in NumPy (the formulas
of the ``keras.ops`` docstrings, with Keras' default arguments)."""

import math

import numpy as np
import pytest

from mirrorfit import ops
from mirrorfit._src.ops import nn

RTOL, ATOL = 1e-5, 1e-6  # float32 activations of values in [-4, 4]
X = np.linspace(-4.0, 4.0, 17, dtype=np.float32).reshape(1, 17)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _hard_sigmoid(x):
    return np.clip(x + 3, 0, 6) / 6


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805
# name -> (Keras arguments after x, the formula)
ACTIVATIONS = {
    "celu": ((0.5,), lambda x: np.maximum(0, x) + 0.5 * np.minimum(0, np.exp(x / 0.5) - 1)),
    "elu": ((), lambda x: np.where(x > 0, x, np.exp(x) - 1)),
    "gelu": ((), lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))),
    "hard_sigmoid": ((), _hard_sigmoid),
    "hard_silu": ((), lambda x: x * _hard_sigmoid(x)),
    "hard_swish": ((), lambda x: x * _hard_sigmoid(x)),
    "hard_tanh": ((), lambda x: np.clip(x, -1, 1)),
    "leaky_relu": ((), lambda x: np.where(x > 0, x, 0.2 * x)),
    "log_sigmoid": ((), lambda x: np.log(_sigmoid(x))),
    "log_softmax": ((), lambda x: np.log(_softmax(x))),
    "relu": ((), lambda x: np.maximum(x, 0)),
    "relu6": ((), lambda x: np.clip(x, 0, 6)),
    "selu": ((), lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1))),
    "sigmoid": ((), _sigmoid),
    "silu": ((), lambda x: x * _sigmoid(x)),
    "softmax": ((), _softmax),
    "softplus": ((), lambda x: np.log1p(np.exp(x))),
    "softsign": ((), lambda x: x / (np.abs(x) + 1)),
    "sparse_plus": ((), lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4))),
    "sparse_sigmoid": ((), lambda x: np.clip((x + 1) / 2, 0, 1)),
    "squareplus": ((), lambda x: (x + np.sqrt(x**2 + 4)) / 2),
    "swish": ((), lambda x: x * _sigmoid(x)),
}


def test_every_nn_op_has_a_case():
    table = {name for name, value in vars(nn).items()
             if getattr(value, "__wrapped__", None) is not None}
    assert table == {*ACTIVATIONS, "glu", "one_hot", "dot_product_attention"}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_keras_formula(name):
    args, formula = ACTIVATIONS[name]
    np.testing.assert_allclose(getattr(ops, name)(X, *args), formula(X), rtol=RTOL, atol=ATOL)


def test_gelu_exact_matches_erf_formula():
    erf = np.vectorize(math.erf)
    expected = 0.5 * X * (1 + erf(X / np.sqrt(2)))
    np.testing.assert_allclose(ops.gelu(X, approximate=False), expected, rtol=RTOL, atol=ATOL)


def test_softmax_over_another_axis():
    x = X.reshape(17, 1) * np.ones((1, 3), np.float32)
    np.testing.assert_allclose(ops.softmax(x, axis=0), _softmax(x, 0), rtol=RTOL, atol=ATOL)


def test_glu_gates_the_first_half_with_the_second():
    a, b = X[:, :8], X[:, 8:16]
    np.testing.assert_allclose(ops.glu(X[:, :16]), a * _sigmoid(b), rtol=RTOL, atol=ATOL)


def test_one_hot_with_axis_and_dtype():
    labels = np.array([2, 0, 1])
    out = ops.one_hot(labels, 4, axis=0, dtype="int32")
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.eye(4, dtype=np.int32)[labels].T)


def test_dot_product_attention_matches_numpy():
    rng = np.random.default_rng(0)
    # [batch, seq, heads, head_dim], Keras' layout
    q, k, v = (rng.normal(size=(2, 4, 3, 5)).astype(np.float32) for _ in range(3))
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(5)
    causal = np.tril(np.ones((4, 4), bool))
    weights = _softmax(np.where(causal, logits, -np.inf))
    expected = np.einsum("bnts,bsnh->btnh", weights, v)
    np.testing.assert_allclose(ops.dot_product_attention(q, k, v, is_causal=True), expected,
                               rtol=1e-4, atol=1e-5)
