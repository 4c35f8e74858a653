"""``mf.ops.image`` (image_ops.py, image_filters.py) against NumPy and colorsys: patches,
crops, pads, resampling, colours and filters; channels_first and one image; a node on the
symbolic tensors of a functional model. (The Keras 3 comparison of every op is
benchmarks/keras_parity_models.py.)"""

import colorsys

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import ops
from tests.helpers import mirrored_strategy

RNG = np.random.default_rng(0)
IMAGES = RNG.uniform(size=(2, 12, 10, 3)).astype(np.float32)


def _patches(x, ph, pw, sh, sw):
    rows = (x.shape[1] - ph) // sh + 1
    cols = (x.shape[2] - pw) // sw + 1
    out = np.zeros((x.shape[0], rows, cols, ph * pw * x.shape[3]), x.dtype)
    for i in range(rows):
        for j in range(cols):
            out[:, i, j] = x[:, i * sh:i * sh + ph, j * sw:j * sw + pw].reshape(len(x), -1)
    return out


@pytest.mark.parametrize("size, strides", [(3, None), ((4, 2), (1, 3))])
def test_extract_patches_lists_each_patch_row_by_row_with_channels_innermost(size, strides):
    ph, pw = (size, size) if isinstance(size, int) else size
    sh, sw = (ph, pw) if strides is None else strides
    got = ops.image.extract_patches(IMAGES, size, strides)
    np.testing.assert_array_equal(got, _patches(IMAGES, ph, pw, sh, sw))
    first = ops.image.extract_patches(IMAGES.transpose(0, 3, 1, 2), size, strides,
                                      data_format="channels_first")
    np.testing.assert_array_equal(first, np.asarray(got).transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(ops.image.extract_patches(IMAGES[0], size, strides), got[0])


def test_crop_and_pad_images_take_two_of_each_axis():
    cropped = ops.image.crop_images(IMAGES, top_cropping=2, bottom_cropping=1, left_cropping=3,
                                    target_width=4)
    np.testing.assert_array_equal(cropped, IMAGES[:, 2:11, 3:7])
    padded = ops.image.pad_images(IMAGES[0], top_padding=2, target_height=16, left_padding=1,
                                  right_padding=0)
    np.testing.assert_array_equal(padded, np.pad(IMAGES[0], ((2, 2), (1, 0), (0, 0))))
    with pytest.raises(ValueError, match="exactly two of top_padding, bottom_padding, "
                                         "target_height.*top_padding=1"):
        ops.image.pad_images(IMAGES, top_padding=1, left_padding=1, right_padding=1)
    with pytest.raises(ValueError, match=r"must be >= 0.*target_height=14"):
        ops.image.crop_images(IMAGES, top_cropping=0, target_height=14, left_cropping=0,
                              right_cropping=0)


def test_affine_transform_by_a_whole_pixel_shift_moves_the_image():
    # Output (x, y) reads the input at (x + 2, y - 1): zero fill where that is outside.
    shift = np.array([1, 0, 2, 0, 1, -1, 0, 0], np.float32)
    got = np.asarray(ops.image.affine_transform(IMAGES[0], shift))
    want = np.zeros_like(IMAGES[0])
    want[1:, :-2] = IMAGES[0][:-1, 2:]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_map_coordinates_reads_between_pixels_linearly():
    image = IMAGES[0, :, :, 0]
    coordinates = np.array([[1.5, 3.25], [2.0, 0.5]], np.float32)  # (y, x) of two points
    want = [0.5 * (image[1, 2] + image[2, 2]),
            0.75 * (0.5 * image[3, 0] + 0.5 * image[3, 1])
            + 0.25 * (0.5 * image[4, 0] + 0.5 * image[4, 1])]
    np.testing.assert_allclose(ops.image.map_coordinates(image, coordinates, 1), want,
                               rtol=1e-5)


def test_colour_conversions_match_colorsys_and_tf_weights():
    hsv = np.asarray(ops.image.rgb_to_hsv(IMAGES))
    want = np.array([colorsys.rgb_to_hsv(*p) for p in IMAGES.reshape(-1, 3)]).reshape(hsv.shape)
    np.testing.assert_allclose(hsv, want, atol=1e-5)
    np.testing.assert_allclose(ops.image.hsv_to_rgb(hsv), IMAGES, atol=1e-5)
    gray = IMAGES @ np.array([0.2989, 0.5870, 0.1140], np.float32)
    np.testing.assert_allclose(ops.image.rgb_to_grayscale(IMAGES), gray[..., None], rtol=1e-6)
    with pytest.raises(ValueError, match="expected a float dtype"):
        ops.image.rgb_to_hsv(np.zeros((2, 2, 3), np.uint8))


def _correlate_same(image, kernel):
    kh, kw = kernel.shape
    padded = np.pad(image, ((kh // 2, kh // 2), (kw // 2, kw // 2)))
    return np.array([[np.sum(padded[i:i + kh, j:j + kw] * kernel)
                      for j in range(image.shape[1])] for i in range(image.shape[0])])


def test_gaussian_blur_and_sobel_edges_are_the_kernels_correlated():
    image = IMAGES[0, :, :, 1]
    ky, kx = (np.exp(-0.5 * (np.arange(n) - (n - 1) / 2) ** 2 / s ** 2) for n, s in
              [(3, 0.7), (5, 1.5)])
    kernel = np.outer(ky / ky.sum(), kx / kx.sum())  # kernel_size and sigma are (x, y)
    blurred = ops.image.gaussian_blur(IMAGES, (5, 3), (1.5, 0.7))
    np.testing.assert_allclose(blurred[0, :, :, 1], _correlate_same(image, kernel), atol=1e-5)
    sobel_x = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float32)
    edges = np.asarray(ops.image.sobel_edges(IMAGES))
    assert edges.shape == (2, 12, 10, 3, 2)
    np.testing.assert_allclose(edges[0, :, :, 1, 0], _correlate_same(image, sobel_x.T),
                               atol=1e-5)
    np.testing.assert_allclose(edges[0, :, :, 1, 1], _correlate_same(image, sobel_x), atol=1e-5)


def test_ssim_is_one_for_equal_images_and_lower_for_noisy_ones():
    big = RNG.uniform(size=(2, 16, 14, 3)).astype(np.float32)
    np.testing.assert_allclose(ops.image.ssim(big, big), [1.0, 1.0], rtol=1e-5)
    noisy = np.clip(big + RNG.normal(scale=0.2, size=big.shape), 0, 1).astype(np.float32)
    assert np.all(np.asarray(ops.image.ssim(big, noisy)) < 0.9)


def test_image_ops_record_nodes_on_symbolic_tensors():
    inputs = mf.Input((12, 10, 3))
    patches = ops.image.extract_patches(inputs, 2)  # (None, 6, 5, 12)
    assert patches.shape == (None, 6, 5, 12)
    outputs = ops.image.resize(patches, (3, 3))
    with mirrored_strategy(1).scope():
        model = mf.Model(inputs, outputs)
    want = ops.image.resize(_patches(IMAGES, 2, 2, 2, 2), (3, 3))
    np.testing.assert_allclose(model.predict(IMAGES, verbose=0), want, rtol=1e-5, atol=1e-6)
