"""RandomFlip, RandomRotation, RandomZoom, RandomTranslation: fixed transforms against NumPy,
the identity at inference, a transform per row."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.layers.preprocessing.helpers import apply, images


def _bilinear(image, y, x):
    """``image`` ``[h, w]`` at the in-bounds point ``(y, x)``, by hand."""
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    dy, dx = y - y0, x - x0
    return ((1 - dy) * (1 - dx) * image[y0, x0] + (1 - dy) * dx * image[y0, x0 + 1]
            + dy * (1 - dx) * image[y0 + 1, x0] + dy * dx * image[y0 + 1, x0 + 1])


@pytest.mark.parametrize("make", [
    lambda: mf.layers.RandomFlip(), lambda: mf.layers.RandomRotation(0.3),
    lambda: mf.layers.RandomZoom(0.3), lambda: mf.layers.RandomTranslation(0.3, 0.3)])
def test_random_layers_are_the_identity_at_inference(make):
    x = images(2, 5, 5, 2)
    np.testing.assert_array_equal(apply(make(), x, training=False), x)


@pytest.mark.parametrize("mode, flipped", [
    ("horizontal", lambda x: x[:, :, ::-1]), ("vertical", lambda x: x[:, ::-1]),
    ("horizontal_and_vertical", lambda x: x[:, ::-1, ::-1])])
def test_random_flip_flips_some_rows_and_keeps_the_others(mode, flipped):
    x = np.broadcast_to(images(1, 3, 3, 2), (16, 3, 3, 2))
    out = apply(mf.layers.RandomFlip(mode), x, training=True)
    same = [np.array_equal(row, x[0]) for row in out]
    flip = [np.array_equal(row, flipped(x[:1])[0]) for row in out]
    assert all(s != f for s, f in zip(same, flip)) and any(same) and any(flip)


def test_random_rotation_by_a_quarter_turn_is_rot90():
    x = images(2, 5, 5, 1)
    out = apply(mf.layers.RandomRotation((0.25, 0.25)), x, training=True)
    np.testing.assert_allclose(out, np.rot90(x, k=1, axes=(1, 2)), atol=1e-4)


def test_random_zoom_in_by_half_interpolates_bilinearly_about_the_center():
    x = images(1, 5, 7, 1)
    out = apply(mf.layers.RandomZoom((-0.5, -0.5)), x, training=True)[0, ..., 0]
    expected = [[_bilinear(x[0, ..., 0], 0.5 * y + 1.0, 0.5 * c + 1.5) for c in range(7)]
                for y in range(5)]  # source = zoom * out + (size - 1) / 2 * (1 - zoom)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    nearest = apply(mf.layers.RandomZoom((-0.5, -0.5), interpolation="nearest"), x,
                    training=True)[0, ..., 0]
    assert nearest[2, 3] == x[0, 2, 3, 0]  # the center stays


@pytest.mark.parametrize("fill_mode, top_row", [
    ("constant", lambda x: np.full_like(x[:, :1], -1.0)), ("wrap", lambda x: x[:, -1:]),
    ("nearest", lambda x: x[:, :1])])
def test_random_translation_by_one_row_fills_the_top_per_fill_mode(fill_mode, top_row):
    x = images(2, 4, 3, 2)
    layer = mf.layers.RandomTranslation((0.25, 0.25), 0.0, fill_mode=fill_mode, fill_value=-1.0)
    out = apply(layer, x, training=True)
    np.testing.assert_allclose(out, np.concatenate([top_row(x), x[:, :-1]], axis=1), atol=1e-5)


def test_random_rotation_draws_per_row_and_per_key():
    x = np.broadcast_to(images(1, 6, 6, 1), (4, 6, 6, 1))
    layer = mf.layers.RandomRotation(0.2)
    out = apply(layer, x, training=True, seed=0)
    assert not np.allclose(out[0], out[1])
    assert not np.allclose(out, apply(layer, x, training=True, seed=1))


@pytest.mark.parametrize("make", [
    lambda: mf.layers.RandomFlip("diagonal"), lambda: mf.layers.RandomRotation(1.5),
    lambda: mf.layers.RandomZoom(-1.0), lambda: mf.layers.RandomTranslation(0.1, (0.1,)),
    lambda: mf.layers.RandomRotation(0.1, fill_mode="mirror"),
    lambda: mf.layers.RandomRotation(0.1, interpolation="bicubic")])
def test_bad_arguments_raise_naming_them(make):
    with pytest.raises(ValueError, match="Received"):
        make()
