"""Keras 3's ``keras.ops.image`` geometry (``mf.ops.image``): resizing, cropping, padding,
patches and resampling, on ``jax.image``, ``jax.lax`` and ``jax.scipy.ndimage``, as Keras'
JAX backend (``keras/src/backend/jax/image.py``, ``keras/src/ops/image.py``); the colour and
filter ops are in `mirrorfit._src.layers.preprocessing.image_filters`.

Images are ``[batch, height, width, channels]`` or one image ``[height, width, channels]``
(``data_format="channels_first"``: channels before height and width). Each function takes
Keras' arguments with Keras' defaults and, on a functional model's symbolic tensors, records
a node. They live beside the image layers, which are made of them (`resize`,
`affine_transform`), because ``layers`` and ``ops`` sit on one level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.layers.preprocessing import image_base, image_geometry
from mirrorfit._src.layers.preprocessing.image_base import (
    channels_last_batch,
    check_choice,
    symbolic_op,
)

FILL_MODES = ("constant", "nearest", "wrap", "mirror", "reflect")
INTERPOLATIONS = {"nearest": 0, "bilinear": 1}  # map_coordinates' spline order
_SCALE_METHODS = ("linear", "bilinear", "trilinear", "cubic", "bicubic", "tricubic",
                  "lanczos3", "lanczos5")


@symbolic_op
def resize(images: Any, size: Sequence[int], interpolation: str = "bilinear",
           antialias: bool = False, crop_to_aspect_ratio: bool = False,
           pad_to_aspect_ratio: bool = False, fill_mode: str = "constant",
           fill_value: float = 0.0, data_format: str | None = None) -> jax.Array:
    """Images resized to ``size = (height, width)`` by ``jax.image.resize``, first cropped to
    the target's aspect ratio (the centered box) or padded to it with ``fill_value``.

    Raises:
        ValueError: an unknown interpolation, a ``fill_mode`` other than ``"constant"``,
            both aspect-ratio options, or a ``size`` that is not two ints.
    """
    check_choice(interpolation, "interpolation", image_geometry.RESIZE_INTERPOLATIONS)
    check_choice(fill_mode, "fill_mode", ("constant",))
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError("Only one of pad_to_aspect_ratio and crop_to_aspect_ratio can be True."
                         " Received: both")
    if len(size) != 2:
        raise ValueError(f"size must be (height, width). Received: size={size!r}")
    x, restore = channels_last_batch(images, data_format)
    return restore(image_geometry.resize(x, int(size[0]), int(size[1]), interpolation,
                                         antialias, crop_to_aspect_ratio, pad_to_aspect_ratio,
                                         fill_value))


def _margins(before: int | None, after: int | None, target: int | None, size: int, what: str,
             names: tuple[str, str, str]) -> tuple[int, int]:
    """``(before, after)`` from exactly two of them and the target size, each ``>= 0``."""
    given = dict(zip(names, (before, after, target)))
    if [before, after, target].count(None) != 1:
        raise ValueError(f"Give exactly two of {', '.join(names)}. Received: "
                         + ", ".join(f"{k}={v}" for k, v in given.items()))
    sign = 1 if what == "pad" else -1
    if before is None:
        before = sign * (target - size) - after  # type: ignore[operator]
    if after is None:
        after = sign * (target - size) - before  # type: ignore[operator]
    if before < 0 or after < 0:
        raise ValueError(f"The {what}ding of each side must be >= 0. Received: "
                         + ", ".join(f"{k}={v}" for k, v in given.items())
                         + f" for images of size {size}")
    return before, after


@symbolic_op
def pad_images(images: Any, top_padding: int | None = None, left_padding: int | None = None,
               bottom_padding: int | None = None, right_padding: int | None = None,
               target_height: int | None = None, target_width: int | None = None,
               data_format: str | None = None) -> jax.Array:
    """Images zero-padded: give two of top, bottom and target height, and two of left,
    right and target width.

    Raises:
        ValueError: not exactly two per axis, or a negative padding.
    """
    x, restore = channels_last_batch(images, data_format)
    top, bottom = _margins(top_padding, bottom_padding, target_height, x.shape[1], "pad",
                           ("top_padding", "bottom_padding", "target_height"))
    left, right = _margins(left_padding, right_padding, target_width, x.shape[2], "pad",
                           ("left_padding", "right_padding", "target_width"))
    return restore(jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0))))


@symbolic_op
def crop_images(images: Any, top_cropping: int | None = None,
                left_cropping: int | None = None, bottom_cropping: int | None = None,
                right_cropping: int | None = None, target_height: int | None = None,
                target_width: int | None = None, data_format: str | None = None) -> jax.Array:
    """Images cropped: give two of top, bottom and target height, and two of left, right
    and target width.

    Raises:
        ValueError: not exactly two per axis, or a negative cropping.
    """
    x, restore = channels_last_batch(images, data_format)
    top, bottom = _margins(top_cropping, bottom_cropping, target_height, x.shape[1], "cropp",
                           ("top_cropping", "bottom_cropping", "target_height"))
    left, right = _margins(left_cropping, right_cropping, target_width, x.shape[2], "cropp",
                           ("left_cropping", "right_cropping", "target_width"))
    return restore(x[:, top:x.shape[1] - bottom, left:x.shape[2] - right, :])


def _patches(x: jax.Array, size: Sequence[int], strides: Any, dilation_rate: Any,
             padding: str) -> jax.Array:
    """Channels-last patches ``[batch, *out, prod(size) * channels]`` of a channels-last
    batch, as Keras: a convolution with the identity kernel, so each patch lists its pixels
    row by row with their channels innermost."""
    spatial, channels = len(size), x.shape[-1]
    out = channels
    for s in size:
        out *= s
    kernel = jnp.eye(out, dtype=x.dtype).reshape(*size, channels, out)
    strides = tuple(size) if not strides else (
        (strides,) * spatial if isinstance(strides, int) else tuple(strides))
    dilation = (dilation_rate,) * spatial if isinstance(dilation_rate, int) else tuple(
        dilation_rate)
    letters = "DHW"[-spatial:]
    return lax.conv_general_dilated(
        x, kernel, strides, padding.upper(), rhs_dilation=dilation,
        dimension_numbers=(f"N{letters}C", f"{letters}IO", f"N{letters}C"),
        precision=lax.Precision.HIGHEST)


@symbolic_op
def extract_patches(images: Any, size: int | Sequence[int], strides: Any = None,
                    dilation_rate: Any = 1, padding: str = "valid",
                    data_format: str | None = None) -> jax.Array:
    """Patches of ``size`` (an int or ``(h, w)``; ``(d, h, w)`` for volumes, as
    `extract_patches_3d`), every ``strides`` (default: ``size``, no overlap), each flattened:
    ``[batch, rows, cols, h * w * channels]``.

    Raises:
        TypeError, ValueError: a ``size`` that is not an int or a tuple of 2 or 3 ints.
    """
    if not isinstance(size, int):
        if not isinstance(size, (tuple, list)):
            raise TypeError(f"size must be an int or a tuple. Received: size={size!r}")
        if len(size) not in (2, 3):
            raise ValueError(f"size must be a tuple of length 2 or 3. Received: size={size!r}")
        if len(size) == 3:
            return extract_patches_3d(images, size, strides, dilation_rate, padding,
                                      data_format)
    size = (size, size) if isinstance(size, int) else tuple(size)
    x, restore = channels_last_batch(images, data_format)
    return restore(_patches(x, size, strides, dilation_rate, padding))


@symbolic_op
def extract_patches_3d(volumes: Any, size: int | Sequence[int], strides: Any = None,
                       dilation_rate: Any = 1, padding: str = "valid",
                       data_format: str | None = None) -> jax.Array:
    """Patches of volumes ``[batch, depth, height, width, channels]`` (or one volume), as
    `extract_patches` in three dimensions.

    Raises:
        ValueError: volumes of rank other than 4 or 5.
    """
    v = jnp.asarray(volumes)
    if v.ndim not in (4, 5):
        raise ValueError("Invalid volumes rank: expected rank 4 (one volume) or 5 (a batch). "
                         f"Received: volumes.shape={v.shape}")
    size = (size,) * 3 if isinstance(size, int) else tuple(size)
    check_choice(data_format, "data_format", (None, "channels_last", "channels_first"))
    batch = v[None] if v.ndim == 4 else v
    first = data_format == "channels_first"
    patches = _patches(jnp.moveaxis(batch, 1, -1) if first else batch, size, strides,
                       dilation_rate, padding)
    patches = jnp.moveaxis(patches, -1, 1) if first else patches
    return patches[0] if v.ndim == 4 else patches


@symbolic_op
def affine_transform(images: Any, transform: Any, interpolation: str = "bilinear",
                     fill_mode: str = "constant", fill_value: float = 0,
                     data_format: str | None = None) -> jax.Array:
    """Each image resampled through its transform ``[a0, a1, a2, b0, b1, b2, c0, c1]``
    (``[8]`` or ``[batch, 8]``): output ``(x, y)`` reads the input at ``(a0 x + a1 y + a2,
    b0 x + b1 y + b2)``, TF's ``ImageProjectiveTransformV3`` convention.

    Raises:
        ValueError: an unknown interpolation or fill mode, or a transform rank other than 1
            or 2.
    """
    check_choice(interpolation, "interpolation", tuple(INTERPOLATIONS))
    check_choice(fill_mode, "fill_mode", FILL_MODES)
    t = jnp.asarray(transform)
    if t.ndim not in (1, 2):
        raise ValueError("Invalid transform rank: expected rank 1 (single transform) or rank 2 "
                         f"(batch of transforms). Received: transform.shape={t.shape}")
    x, restore = channels_last_batch(images, data_format)
    t = jnp.broadcast_to(t, (x.shape[0], t.shape[-1]))
    return restore(image_base.affine_transform(x, t, interpolation, fill_mode, fill_value))


@symbolic_op
def perspective_transform(images: Any, start_points: Any, end_points: Any,
                          interpolation: str = "bilinear", fill_value: float = 0,
                          data_format: str | None = None) -> jax.Array:
    """Images warped so that the four ``start_points`` (``[4, 2]`` or ``[batch, 4, 2]``,
    ``(x, y)``) move to ``end_points``; outside points are ``fill_value``.

    Raises:
        ValueError: an unknown interpolation, or points not both ``[(batch,) 4, 2]``.
    """
    check_choice(interpolation, "interpolation", tuple(INTERPOLATIONS))
    start, end = jnp.asarray(start_points, jnp.float32), jnp.asarray(end_points, jnp.float32)
    if start.shape[-2:] != (4, 2) or start.ndim not in (2, 3) or start.shape != end.shape:
        raise ValueError("start_points and end_points must both be [4, 2] (one image) or "
                         f"[batch, 4, 2]. Received: start_points.shape={start.shape}, "
                         f"end_points.shape={end.shape}")
    x, restore = channels_last_batch(images, data_format)
    start, end = (jnp.broadcast_to(p, (x.shape[0], 4, 2)) for p in (start, end))
    zeros, ones = jnp.zeros_like(end[..., 0]), jnp.ones_like(end[..., 0])
    ex, ey, sx, sy = end[..., 0], end[..., 1], start[..., 0], start[..., 1]
    rows = jnp.concatenate([  # the homography taking end points to start points
        jnp.stack([ex, ey, ones, zeros, zeros, zeros, -sx * ex, -sx * ey], axis=-1),
        jnp.stack([zeros, zeros, zeros, ex, ey, ones, -sy * ex, -sy * ey], axis=-1)], axis=1)
    homography = jnp.linalg.solve(rows, jnp.concatenate([sx, sy], axis=-1)[..., None])[..., 0]
    gx, gy = jnp.meshgrid(jnp.arange(x.shape[2], dtype=jnp.float32),
                          jnp.arange(x.shape[1], dtype=jnp.float32), indexing="xy")

    def one(image: jax.Array, t: jax.Array) -> jax.Array:
        denominator = t[6] * gx + t[7] * gy + 1.0
        coords = [(t[3] * gx + t[4] * gy + t[5]) / denominator,
                  (t[0] * gx + t[1] * gy + t[2]) / denominator]
        return jax.vmap(lambda channel: jax.scipy.ndimage.map_coordinates(
            channel, coords, order=INTERPOLATIONS[interpolation], mode="constant",
            cval=fill_value), in_axes=-1, out_axes=-1)(image)
    return restore(jax.vmap(one)(x, homography).astype(x.dtype))


@symbolic_op
def map_coordinates(inputs: Any, coordinates: Any, order: int, fill_mode: str = "constant",
                    fill_value: float = 0.0) -> jax.Array:
    """``inputs`` read at ``coordinates`` (``[inputs.ndim, ...]``) by spline ``order`` 0 or
    1, as ``jax.scipy.ndimage.map_coordinates``.

    Raises:
        ValueError: coordinates of the wrong rank, an unknown fill mode or another order.
    """
    x, coords = jnp.asarray(inputs), jnp.asarray(coordinates)
    if coords.ndim < 2 or coords.shape[0] != x.ndim:
        raise ValueError("coordinates must be [inputs.ndim, ...] (rank 2 at least). Received: "
                         f"inputs.shape={x.shape}, coordinates.shape={coords.shape}")
    check_choice(fill_mode, "fill_mode", FILL_MODES)
    check_choice(order, "order", (0, 1))
    return jax.scipy.ndimage.map_coordinates(x, list(coords), order, fill_mode, fill_value)


@symbolic_op
def scale_and_translate(images: Any, output_shape: Sequence[int], scale: Any,
                        translation: Any, spatial_dims: Sequence[int], method: str,
                        antialias: bool = True) -> jax.Array:
    """``jax.image.scale_and_translate`` with Keras' argument order.

    Raises:
        ValueError: an unknown ``method``.
    """
    check_choice(method, "method", _SCALE_METHODS)
    return jax.image.scale_and_translate(jnp.asarray(images), tuple(output_shape),
                                         tuple(spatial_dims), jnp.asarray(scale),
                                         jnp.asarray(translation), method, antialias)
