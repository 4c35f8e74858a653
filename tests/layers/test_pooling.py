"""3D pooling and global pooling against NumPy (the 1D/2D ones: test_layers.py)."""

import warnings

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from mirrorfit._src.layers import pooling
from tests.helpers import mirrored_strategy

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


@pytest.mark.parametrize("replicas", [1, 8])
def test_an_all_masked_row_is_nan_as_keras_and_training_warns_once(monkeypatch, replicas):
    """Keras' masked mean is 0/0 for a row with no unmasked step; fit warns the first time."""
    monkeypatch.setattr(pooling, "_warned_all_masked", False)
    ids = np.arange(40).reshape(8, 5, 1) % 7 + 1
    ids[3] = 0  # every step of row 3 is padding
    with mirrored_strategy(replicas).scope():
        pool = mf.Sequential([layers.Masking(0.0), layers.GlobalAveragePooling1D()])
        model = mf.Sequential([mf.Input((5,), dtype="int32"),
                               layers.Embedding(8, 2, mask_zero=True),
                               layers.GlobalAveragePooling1D(), layers.Dense(1)])
        model.compile("sgd", "mse")
    np.testing.assert_array_equal(np.isnan(pool.predict(ids.astype(np.float32), verbose=0)),
                                  np.broadcast_to(np.arange(8)[:, None] == 3, (8, 1)))
    clean = np.delete(ids[..., 0], 3, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(clean[:4], np.zeros(4), batch_size=4, verbose=0)
    with pytest.warns(RuntimeWarning, match="every step is masked") as caught:
        model.fit(ids[..., 0], np.zeros(8), batch_size=8, epochs=2, verbose=0)
    assert len([w for w in caught if "every step is masked" in str(w.message)]) == 1
    assert np.isnan(model.get_weights()[-1]).all()
