"""UnitNormalization against NumPy (the other normalization layers: test_layers.py)."""

import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_unit_normalization_scales_to_unit_l2_norm(axis):
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    out = layers.UnitNormalization(axis=axis).apply({}, x)
    norm = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=axis, keepdims=True))
    np.testing.assert_allclose(out, x / norm, rtol=1e-5, atol=1e-7)
    # Keras' epsilon: a zero row stays zero instead of NaN.
    np.testing.assert_array_equal(layers.UnitNormalization().apply({}, np.zeros((1, 3))), 0)
