"""Resizing, CenterCrop, RandomCrop against NumPy crops and block means."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.layers.preprocessing.helpers import apply, images


def _block_mean(x):  # [b, 2h, 2w, c] -> [b, h, w, c]
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def test_resizing_bilinear_halving_is_the_block_mean_and_nearest_doubling_repeats():
    x = images(2, 4, 6, 3)
    np.testing.assert_allclose(apply(mf.layers.Resizing(2, 3), x, training=False),
                               _block_mean(x), rtol=1e-6)
    small = images(1, 2, 2, 1)
    doubled = apply(mf.layers.Resizing(4, 4, interpolation="nearest"), small, training=False)
    np.testing.assert_array_equal(doubled, small.repeat(2, axis=1).repeat(2, axis=2))


def test_resizing_crop_to_aspect_ratio_takes_the_centered_box_first():
    x = images(2, 4, 6, 1)
    out = apply(mf.layers.Resizing(2, 2, crop_to_aspect_ratio=True), x, training=False)
    np.testing.assert_allclose(out, _block_mean(x[:, :, 1:5]), rtol=1e-6)


def test_resizing_takes_one_image_and_integer_images():
    x = images(1, 4, 4, 2)
    out = apply(mf.layers.Resizing(2, 2), x[0].astype(np.uint8), training=False)
    assert out.shape == (2, 2, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out, _block_mean(x)[0], rtol=1e-6)


def test_center_crop_slices_the_center_and_resizes_a_smaller_image():
    x = images(2, 5, 6, 1)
    np.testing.assert_array_equal(apply(mf.layers.CenterCrop(3, 2), x, training=False),
                                  x[:, 1:4, 2:4])
    small = images(1, 4, 4, 1)
    out = apply(mf.layers.CenterCrop(8, 4), small, training=False)  # box 4x2, then resize
    expected = apply(mf.layers.Resizing(8, 4), small[:, :, 1:3], training=False)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_random_crop_takes_a_window_per_row_in_training_and_the_center_in_inference():
    x = np.broadcast_to(images(1, 6, 6, 1), (16, 6, 6, 1))
    layer = mf.layers.RandomCrop(3, 3)
    out = apply(layer, x, training=True)
    windows = {(t, left): x[0, t:t + 3, left:left + 3] for t in range(4) for left in range(4)}
    found = [next(k for k, w in windows.items() if np.array_equal(w, row)) for row in out]
    assert len(set(found)) > 1  # rows draw their own boxes
    np.testing.assert_allclose(apply(layer, x[:2], training=False),
                               apply(mf.layers.Resizing(3, 3), x[:2], training=False))


@pytest.mark.parametrize("make", [lambda: mf.layers.Resizing(0, 2),
                                  lambda: mf.layers.Resizing(2, 2, interpolation="cubic"),
                                  lambda: mf.layers.CenterCrop(2, 2, data_format="channels_first")])
def test_bad_arguments_raise_naming_them(make):
    with pytest.raises(ValueError, match="Received"):
        make()
