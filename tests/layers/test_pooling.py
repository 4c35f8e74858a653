"""3D pooling and global pooling against NumPy (the 1D/2D ones: test_layers.py)."""

import numpy as np
import pytest

from mirrorfit import layers

RNG = np.random.default_rng(0)
X5 = RNG.normal(size=(2, 4, 4, 6, 3)).astype(np.float32)


def np_pool3d(x, reduce):
    """2x2x2 windows, stride 2, "valid" (Keras' defaults)."""
    b, d1, d2, d3, c = x.shape
    blocks = x.reshape(b, d1 // 2, 2, d2 // 2, 2, d3 // 2, 2, c)
    return reduce(blocks, axis=(2, 4, 6))


@pytest.mark.parametrize("layer, expected", [
    (layers.MaxPooling3D(), np_pool3d(X5, np.max)),
    (layers.AveragePooling3D(), np_pool3d(X5, np.mean)),
    (layers.MaxPooling3D(pool_size=(4, 4, 3), strides=(4, 4, 3)), np.stack(
        [X5[:, :, :, :3].max((1, 2, 3)), X5[:, :, :, 3:].max((1, 2, 3))], axis=1)[:, None, None]),
    (layers.GlobalMaxPooling3D(), X5.max((1, 2, 3))),
    (layers.GlobalAveragePooling3D(), X5.mean((1, 2, 3))),
    (layers.GlobalAveragePooling3D(keepdims=True), X5.mean((1, 2, 3), keepdims=True)),
])
def test_3d_pooling_matches_numpy(layer, expected):
    np.testing.assert_allclose(layer.apply({}, X5), expected, rtol=1e-5, atol=1e-6)


def test_3d_average_pooling_same_divides_by_real_entries():
    x = np.ones((1, 3, 3, 3, 1), np.float32)
    out = np.asarray(layers.AveragePooling3D(padding="same").apply({}, x))
    assert out.shape == (1, 2, 2, 2, 1)  # ceil(3 / 2)
    np.testing.assert_allclose(out, 1.0)  # padding never counts toward the mean
