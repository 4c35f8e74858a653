"""RepeatVector, ZeroPadding1D/3D and UpSampling1D/3D against NumPy (the 2D ones:
test_layers.py)."""

import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(0)
X2 = RNG.normal(size=(2, 3)).astype(np.float32)
X3 = RNG.normal(size=(2, 4, 3)).astype(np.float32)
X5 = RNG.normal(size=(2, 2, 3, 4, 3)).astype(np.float32)


def pad(x, *pairs):
    return np.pad(x, ((0, 0), *pairs, (0, 0)))


def repeat(x, *sizes):
    for axis, s in enumerate(sizes, start=1):
        x = np.repeat(x, s, axis=axis)
    return x


@pytest.mark.parametrize("layer, x, expected", [
    (layers.RepeatVector(3), X2, np.stack([X2] * 3, axis=1)),
    (layers.ZeroPadding1D(), X3, pad(X3, (1, 1))),  # Keras' default 1
    (layers.ZeroPadding1D((2, 0)), X3, pad(X3, (2, 0))),
    (layers.ZeroPadding3D(), X5, pad(X5, (1, 1), (1, 1), (1, 1))),  # Keras' default
    (layers.ZeroPadding3D((1, 0, 2)), X5, pad(X5, (1, 1), (0, 0), (2, 2))),
    (layers.ZeroPadding3D(((0, 1), (2, 0), (1, 1))), X5, pad(X5, (0, 1), (2, 0), (1, 1))),
    (layers.UpSampling1D(), X3, repeat(X3, 2)),  # Keras' default 2
    (layers.UpSampling1D(3), X3, repeat(X3, 3)),
    (layers.UpSampling3D(), X5, repeat(X5, 2, 2, 2)),  # Keras' default (2, 2, 2)
    (layers.UpSampling3D((1, 2, 3)), X5, repeat(X5, 1, 2, 3)),
])
def test_shape_layer_matches_numpy(layer, x, expected):
    np.testing.assert_array_equal(layer.apply({}, x), expected)


def test_shape_layers_reject_bad_arguments():
    with pytest.raises(ValueError, match="RepeatVector expects"):
        layers.RepeatVector(2).apply({}, X3)
    with pytest.raises(ValueError, match="size"):
        layers.UpSampling1D(0).apply({}, X3)
    with pytest.raises(ValueError, match="padding"):
        layers.ZeroPadding3D((1, 2)).apply({}, X5)
