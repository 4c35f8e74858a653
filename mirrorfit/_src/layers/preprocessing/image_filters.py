"""Keras 3's ``keras.ops.image`` colour conversions and filters (``mf.ops.image``): grayscale,
HSV, Gaussian blur, Sobel edges and SSIM, as Keras' JAX backend and ``keras/src/ops/image.py``
compute them; the geometry is in `mirrorfit._src.layers.preprocessing.image_ops`, with the
conventions stated there (channels_last or ``data_format="channels_first"``, one image or a
batch, a node recorded on symbolic tensors).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.layers.preprocessing.image_base import channels_last_batch, symbolic_op


@symbolic_op
def rgb_to_grayscale(images: Any, data_format: str | None = None) -> jax.Array:
    """RGB images to one channel, ``0.2989 R + 0.587 G + 0.114 B`` (TF's weights), in the
    images' dtype; one-channel images are returned as they are.

    Raises:
        ValueError: a rank other than 3 or 4, or not 1 or 3 channels.
    """
    x, restore = channels_last_batch(images, data_format)
    if x.shape[-1] not in (1, 3):
        raise ValueError("Invalid channel size: expected 3 (RGB) or 1 (grayscale). "
                         f"Received: images.shape={jnp.shape(images)}")
    if x.shape[-1] == 1:
        return jnp.asarray(images)
    weights = jnp.asarray([0.2989, 0.5870, 0.1140], jnp.result_type(x.dtype, float))
    gray = jnp.tensordot(x.astype(weights.dtype), weights, axes=(-1, -1))[..., None]
    return restore(gray.astype(x.dtype))


def _require_float(x: jax.Array) -> None:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError("Invalid images dtype: expected a float dtype (values in [0, 1]). "
                         f"Received: images.dtype={x.dtype}")


@symbolic_op
def rgb_to_hsv(images: Any, data_format: str | None = None) -> jax.Array:
    """RGB images in ``[0, 1]`` to hue, saturation and value in ``[0, 1]`` (dm_pix'
    formulas, as Keras).

    Raises:
        ValueError: a rank other than 3 or 4, or integer images.
    """
    x, restore = channels_last_batch(images, data_format)
    _require_float(x)
    x = jnp.where(jnp.abs(x) < jnp.finfo(x.dtype).eps, 0.0, x)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    value = jnp.maximum(jnp.maximum(r, g), b)
    spread = value - jnp.minimum(jnp.minimum(r, g), b)
    saturation = jnp.where(value > 0, spread / jnp.where(value > 0, value, 1.0), 0.0)
    norm = 1.0 / (6.0 * jnp.where(spread > 0, spread, 1.0))
    hue = jnp.where(value == g, norm * (b - r) + 2.0 / 6.0, norm * (r - g) + 4.0 / 6.0)
    hue = jnp.where(value == r, norm * (g - b), hue)
    hue = jnp.where(spread > 0, hue, 0.0) + (hue < 0.0).astype(hue.dtype)
    return restore(jnp.stack([hue, saturation, value], axis=-1))


@symbolic_op
def hsv_to_rgb(images: Any, data_format: str | None = None) -> jax.Array:
    """Hue, saturation and value in ``[0, 1]`` to RGB (dm_pix' formulas, as Keras).

    Raises:
        ValueError: a rank other than 3 or 4, or integer images.
    """
    x, restore = channels_last_batch(images, data_format)
    _require_float(x)
    hue, saturation, value = x[..., 0], x[..., 1], x[..., 2]
    dh = jnp.mod(hue, 1.0) * 6.0
    planes = [jnp.clip(jnp.abs(dh - 3.0) - 1.0, 0.0, 1.0),
              jnp.clip(2.0 - jnp.abs(dh - 2.0), 0.0, 1.0),
              jnp.clip(2.0 - jnp.abs(dh - 4.0), 0.0, 1.0)]
    return restore(jnp.stack([value * (1.0 - saturation + saturation * d) for d in planes],
                             axis=-1))


def _gaussian(size: int, sigma: Any, dtype: Any) -> jax.Array:
    x = jnp.arange(size, dtype=dtype) - (size - 1) / 2.0
    kernel = jnp.exp(-0.5 * (x / sigma) ** 2)
    return kernel / jnp.sum(kernel)


def _depthwise(x: jax.Array, kernel: jax.Array, padding: str = "SAME") -> jax.Array:
    """``[batch, h, w, c]`` cross-correlated with ``kernel`` ``[kh, kw]``, channel by
    channel (``padding="SAME"``: zeros around, the size kept)."""
    channels = x.shape[-1]
    weights = jnp.tile(kernel[:, :, None, None], (1, 1, 1, channels)).astype(x.dtype)
    return lax.conv_general_dilated(x, weights, (1, 1), padding,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=channels,
                                    precision=lax.Precision.HIGHEST)


@symbolic_op
def gaussian_blur(images: Any, kernel_size: Any = (3, 3), sigma: Any = (1.0, 1.0),
                  data_format: str | None = None) -> jax.Array:
    """Each channel convolved with a Gaussian of ``kernel_size`` and ``sigma`` (both
    ``(x, y)``, as Keras), zero-padded to keep the size.

    Raises:
        ValueError: a rank other than 3 or 4.
    """
    x, restore = channels_last_batch(images, data_format)
    dtype = jnp.result_type(x.dtype, float)
    kernel = jnp.outer(_gaussian(kernel_size[1], sigma[1], dtype),
                       _gaussian(kernel_size[0], sigma[0], dtype))
    return restore(_depthwise(x.astype(dtype), kernel).astype(x.dtype))


@symbolic_op
def sobel_edges(images: Any, data_format: str | None = None) -> jax.Array:
    """The Sobel gradients of each channel: ``[batch, height, width, channels, 2]``
    (channels first: ``[batch, channels, height, width, 2]``) holding ``[dy, dx]``.

    Raises:
        ValueError: a rank other than 3 or 4.
    """
    x, _ = channels_last_batch(images, data_format)
    sobel_x = jnp.asarray([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], x.dtype)
    edges = jnp.stack([_depthwise(x, sobel_x.T), _depthwise(x, sobel_x)], axis=-1)
    if data_format == "channels_first":
        edges = jnp.moveaxis(edges, 3, 1)
    return edges[0] if jnp.ndim(images) == 3 else edges


@symbolic_op
def ssim(image1: Any, image2: Any, max_val: float = 1.0, filter_size: int = 11,
         filter_sigma: float = 1.5, k1: float = 0.01, k2: float = 0.03,
         data_format: str | None = None) -> jax.Array:
    """The structural similarity of two images (or batches, ``[batch]``), with a
    ``filter_size`` Gaussian window of ``filter_sigma`` ("valid": no padding), averaged over
    pixels and channels, as ``keras.ops.image.ssim``.

    Raises:
        ValueError: a rank other than 3 or 4.
    """
    a, _ = channels_last_batch(image1, data_format)
    b, _ = channels_last_batch(image2, data_format)
    dtype = jnp.result_type(a.dtype, float)
    a, b = a.astype(dtype), b.astype(dtype)
    window = jnp.outer(_gaussian(filter_size, filter_sigma, dtype),
                       _gaussian(filter_size, filter_sigma, dtype))

    def mean(x: jax.Array) -> jax.Array:
        return _depthwise(x, window, "VALID")
    mu1, mu2 = mean(a), mean(b)
    c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2
    covariance = mean(a * b) - mu1 * mu2
    variances = mean(a * a) - mu1 ** 2 + mean(b * b) - mu2 ** 2
    value = ((2.0 * mu1 * mu2 + c1) * (2.0 * covariance + c2)
             / ((mu1 ** 2 + mu2 ** 2 + c1) * (variances + c2)))
    result = jnp.mean(value, axis=(1, 2, 3)).astype(jnp.asarray(image1).dtype)
    return result[0] if jnp.ndim(image1) == 3 else result
