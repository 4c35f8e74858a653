"""Cropping1D/2D/3D against NumPy slicing, with Keras' forms of ``cropping``."""

import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(0)
X3 = RNG.normal(size=(2, 7, 3)).astype(np.float32)
X4 = RNG.normal(size=(2, 6, 7, 3)).astype(np.float32)
X5 = RNG.normal(size=(2, 5, 6, 7, 3)).astype(np.float32)


@pytest.mark.parametrize("layer, x, expected", [
    (layers.Cropping1D(), X3, X3[:, 1:-1]),  # Keras' default (1, 1)
    (layers.Cropping1D((2, 0)), X3, X3[:, 2:]),
    (layers.Cropping2D(), X4, X4),  # Keras' default ((0, 0), (0, 0))
    (layers.Cropping2D(1), X4, X4[:, 1:-1, 1:-1]),
    (layers.Cropping2D((1, 2)), X4, X4[:, 1:-1, 2:-2]),
    (layers.Cropping2D(((0, 2), (1, 0))), X4, X4[:, :-2, 1:]),
    (layers.Cropping3D(), X5, X5[:, 1:-1, 1:-1, 1:-1]),  # Keras' default
    (layers.Cropping3D(((0, 1), 2, (1, 3))), X5, X5[:, :-1, 2:-2, 1:-3]),
])
def test_cropping_matches_numpy_slicing(layer, x, expected):
    np.testing.assert_array_equal(layer.apply({}, x), expected)


def test_cropping_rejects_crops_as_large_as_the_axis_and_bad_forms():
    with pytest.raises(ValueError, match="larger than the cropping"):
        layers.Cropping1D((4, 3)).apply({}, X3)
    with pytest.raises(ValueError, match="cropping"):
        layers.Cropping2D((1, 2, 3)).apply({}, X4)
    with pytest.raises(ValueError, match="channels_last"):
        layers.Cropping2D(data_format="channels_first").apply({}, X4)
