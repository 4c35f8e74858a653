"""RandomContrast and RandomBrightness by their formulas."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.layers.preprocessing.helpers import apply, images


def test_random_contrast_scales_about_the_channel_mean_by_one_factor_per_row():
    x = images(8, 3, 3, 2) % 7 + 100.0  # far from value_range's ends: no clipping
    out = apply(mf.layers.RandomContrast((0.3, 0.5)), x, training=True)
    mean = x.mean(axis=(1, 2), keepdims=True)
    factors = (out[:, 0, 0, 0] - mean[:, 0, 0, 0]) / (x[:, 0, 0, 0] - mean[:, 0, 0, 0])
    np.testing.assert_allclose(out, (x - mean) * factors[:, None, None, None] + mean, rtol=1e-5)
    assert np.all((factors >= 0.7) & (factors <= 1.5)) and len(np.unique(factors)) == 8


def test_random_contrast_of_a_number_only_raises_contrast_as_keras_3_and_clips():
    x = np.tile(np.eye(2, dtype=np.float32)[None, :, :, None], (8, 1, 1, 1))  # mean 0.5
    out = apply(mf.layers.RandomContrast(0.9, value_range=(0, 1)), x, training=True)
    np.testing.assert_array_equal(out, x)  # 0.5 -+ 0.5 * f with f in [1, 1.9], clipped
    x = x * 10.0 + 100.0
    mean = x.mean(axis=(1, 2), keepdims=True)
    out = apply(mf.layers.RandomContrast(0.2), x, training=True)
    factors = (out[:, 0, 0, 0] - mean[:, 0, 0, 0]) / (x[:, 0, 0, 0] - mean[:, 0, 0, 0])
    assert np.all((factors >= 1.0 - 1e-6) & (factors <= 1.2 + 1e-6))


def test_random_brightness_adds_one_delta_per_row_within_the_range_and_clips():
    x = images(8, 2, 2, 1) % 4 + 100.0
    out = apply(mf.layers.RandomBrightness((-0.1, 0.2), value_range=(0, 255)), x, training=True)
    delta = (out - x)[:, 0, 0, 0]
    np.testing.assert_allclose(out, x + delta[:, None, None, None], rtol=1e-6)
    assert np.all((delta >= -25.5) & (delta <= 51.0)) and len(np.unique(delta)) == 8
    clipped = apply(mf.layers.RandomBrightness((0.5, 0.5), value_range=(0, 1)),
                    np.full((1, 2, 2, 1), 0.8, np.float32), training=True)
    np.testing.assert_array_equal(clipped, 1.0)


@pytest.mark.parametrize("make", [lambda: mf.layers.RandomContrast(0.3),
                                  lambda: mf.layers.RandomBrightness(0.3)])
def test_color_layers_are_the_identity_at_inference(make):
    x = images(2, 2, 2, 3)
    np.testing.assert_array_equal(apply(make(), x, training=False), x)


@pytest.mark.parametrize("make", [lambda: mf.layers.RandomContrast(-0.5),
                                  lambda: mf.layers.RandomBrightness(0.1, value_range=(0,)),
                                  lambda: mf.layers.RandomBrightness(2.0)])
def test_bad_arguments_raise_naming_them(make):
    with pytest.raises(ValueError, match="Received"):
        make()
