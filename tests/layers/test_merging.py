"""Average, Maximum, Minimum, Subtract and Dot against NumPy, and the functional merge helpers
(``layers.add([a, b])``) in a model (Add, Multiply, Concatenate: test_layers.py)."""

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy

RNG = np.random.default_rng(0)
A, B, C = (RNG.normal(size=(2, 3, 4)).astype(np.float32) for _ in range(3))


@pytest.mark.parametrize("layer, expected", [
    (layers.Average(), (A + B + C) / 3),
    (layers.Maximum(), np.maximum(np.maximum(A, B), C)),
    (layers.Minimum(), np.minimum(np.minimum(A, B), C)),
])
def test_elementwise_merge_matches_numpy(layer, expected):
    np.testing.assert_allclose(layer.apply({}, [A, B, C]), expected, rtol=1e-6)


def test_subtract_takes_exactly_two_inputs():
    np.testing.assert_array_equal(layers.Subtract().apply({}, [A, B]), A - B)
    with pytest.raises(ValueError, match="exactly 2"):
        layers.Subtract().apply({}, [A, B, C])


def unit(x, axis):
    return x / np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=axis, keepdims=True))


Y = RNG.normal(size=(2, 5, 3)).astype(np.float32)


@pytest.mark.parametrize("x, y, axes, normalize, expected", [
    (A[:, 0], B[:, 0], 1, False, np.sum(A[:, 0] * B[:, 0], 1, keepdims=True)),  # [batch, 1]
    (A[:, 0], B[:, 0], -1, True, np.sum(unit(A[:, 0], 1) * unit(B[:, 0], 1), 1, keepdims=True)),
    (A, B, 2, False, np.einsum("bik,bjk->bij", A, B)),
    (A, Y, (1, 2), False, np.einsum("bki,bjk->bij", A, Y)),
    (A, B[:, :, 0], (1, 1), False, np.einsum("bki,bk->bi", A, B[:, :, 0])),
    (A, Y, (1, 2), True, np.einsum("bki,bjk->bij", unit(A, 1), unit(Y, 2))),
])
def test_dot_matches_keras_batch_dot(x, y, axes, normalize, expected):
    out = layers.Dot(axes=axes, normalize=normalize).apply({}, [x, y])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_dot_rejects_the_batch_axis_and_unequal_sizes():
    with pytest.raises(ValueError, match="batch axis"):
        layers.Dot(axes=0).apply({}, [A, B])
    with pytest.raises(ValueError, match="equal size"):
        layers.Dot(axes=(1, 1)).apply({}, [A, Y])


def test_merge_helpers_build_a_functional_model():
    a, b = layers.Input((4,)), layers.Input((4,))
    helpers = [layers.add, layers.subtract, layers.multiply, layers.average, layers.maximum,
               layers.minimum, layers.concatenate, layers.dot]
    with mirrored_strategy(2).scope():
        model = mf.Model([a, b], layers.concatenate([merge([a, b]) for merge in helpers]))
    assert [type(layer).__name__ for layer in model.layers] == [
        "Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "Dot",
        "Concatenate"]
    x, y = A[:, 0], B[:, 0]
    expected = np.concatenate([x + y, x - y, x * y, (x + y) / 2, np.maximum(x, y),
                               np.minimum(x, y), x, y, np.sum(x * y, -1, keepdims=True)], -1)
    np.testing.assert_allclose(model.predict([x, y], verbose=0), expected, rtol=1e-5, atol=1e-6)
