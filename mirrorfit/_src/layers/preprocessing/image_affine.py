"""Random geometric augmentation: RandomFlip, RandomRotation, RandomZoom, RandomTranslation,
with Keras 3's arguments, factor ranges and transform matrices.

Each runs on the device inside the step, on channels_last images ``[batch, height, width,
channels]`` (or one image ``[height, width, channels]``); in training each row draws its own
transform from the ``"dropout"`` RNG stream (per step and per replica), otherwise the layer
is the identity. Rotation, zoom and translation resample through `affine_transform`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, layer_field, register
from mirrorfit._src.layers.preprocessing import image_base
from mirrorfit._src.layers.preprocessing.image_base import (
    FILL_MODES,
    INTERPOLATION_ORDERS,
    check_choice,
    factor_range,
    on_batch,
    uniform_rows,
)

FLIP_MODES = ("horizontal", "vertical", "horizontal_and_vertical")


@register
class RandomFlip(FlaxLayer):
    """Flips each image with probability 1/2 in training, as ``keras.layers.RandomFlip``.

    ``mode`` is ``"horizontal"`` (left-right), ``"vertical"`` (up-down) or
    ``"horizontal_and_vertical"`` (Keras 3 flips both axes together, with one draw per image).
    Any float/int images ``[batch, h, w, c]`` or ``[h, w, c]``; same shape out.
    """

    mode: str = "horizontal_and_vertical"
    seed: int | None = None
    data_format: str | None = None

    def __post_init__(self) -> None:
        check_choice(self.mode, "mode", FLIP_MODES)
        image_base.check_data_format(self.data_format)
        super().__post_init__()

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, "RandomFlip")
        if not training:
            return x

        def flip(images: jax.Array) -> jax.Array:
            flips = (uniform_rows(self, images.shape[0], 0.0, 1.0) <= 0.5)[:, None, None, None]
            if self.mode in ("horizontal", "horizontal_and_vertical"):
                images = jnp.where(flips, jnp.flip(images, axis=2), images)
            if self.mode in ("vertical", "horizontal_and_vertical"):
                images = jnp.where(flips, jnp.flip(images, axis=1), images)
            return images

        return on_batch(flip, x)


class _AffineLayer(FlaxLayer):
    """The arguments and call of the resampling layers; subclasses give ``matrices``."""

    # Keyword-only, so that each subclass's factors come first, as Keras' positional order.
    fill_mode: str = layer_field(default="reflect", kw_only=True)
    interpolation: str = layer_field(default="bilinear", kw_only=True)
    seed: int | None = layer_field(default=None, kw_only=True)
    fill_value: float = layer_field(default=0.0, kw_only=True)
    data_format: str | None = layer_field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_choice(self.fill_mode, "fill_mode", FILL_MODES)
        check_choice(self.interpolation, "interpolation", tuple(INTERPOLATION_ORDERS))
        image_base.check_data_format(self.data_format)
        super().__post_init__()

    def matrices(self, batch: int, height: int, width: int) -> jax.Array:
        """``[batch, 8]`` transforms (see `affine_transform`), one random draw per row."""
        raise NotImplementedError

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, type(self).__name__)
        if not training:
            return x

        def transform(images: jax.Array) -> jax.Array:
            batch, height, width, _ = images.shape
            return image_base.affine_transform(
                images, self.matrices(batch, height, width), self.interpolation,
                self.fill_mode, self.fill_value)

        return on_batch(transform, x)


@register
class RandomRotation(_AffineLayer):
    """Rotates each image by a random angle about its center in training, as
    ``keras.layers.RandomRotation``.

    ``factor``: a fraction of a full turn: ``f`` draws the angle from
    ``U(-f, f) * 360`` degrees, ``(lo, hi)`` from ``U(lo, hi) * 360``; within [-1, 1].
    Points outside the input are filled per ``fill_mode`` (``"reflect"``, ``"wrap"``,
    ``"constant"`` with ``fill_value``, ``"nearest"``); ``interpolation`` is ``"bilinear"`` or
    ``"nearest"``.
    """

    factor: Any

    def __post_init__(self) -> None:
        factor_range(self.factor, "factor")
        super().__post_init__()

    def matrices(self, batch: int, height: int, width: int) -> jax.Array:
        """``[batch, 8]`` transforms rotating each image by an angle drawn uniformly from
        ``factor`` (a fraction of 360 degrees) about its center.
        """
        lower, upper = factor_range(self.factor, "factor")
        angle = uniform_rows(self, batch, lower * 360.0, upper * 360.0) * (math.pi / 180.0)
        return rotation_matrices(angle, height, width)


def rotation_matrices(angle: jax.Array, height: int, width: int) -> jax.Array:
    """``[batch, 8]`` transforms rotating by ``angle`` (``[batch]``, radians) about the image
    center ``((width - 1) / 2, (height - 1) / 2)``, as Keras' ``_compute_affine_matrix``."""
    cx, cy = 0.5 * (width - 1), 0.5 * (height - 1)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    zeros = jnp.zeros_like(angle)
    return jnp.stack([cos, -sin, cx - cx * cos + cy * sin,
                      sin, cos, cy - cx * sin - cy * cos, zeros, zeros], axis=1)


@register
class RandomZoom(_AffineLayer):
    """Zooms each image about its center in training, as ``keras.layers.RandomZoom``.

    ``height_factor``: ``f`` draws the vertical zoom from ``1 + U(-f, f)``, ``(lo, hi)``
    from ``1 + U(lo, hi)``, within (-1, 1]; a positive value zooms out (the image shrinks),
    a negative one zooms in. ``width_factor`` likewise; ``None`` keeps the aspect ratio (the
    width uses the height's zoom). Fill and interpolation as `RandomRotation`.
    """

    height_factor: Any
    width_factor: Any = None

    def __post_init__(self) -> None:
        for name in ("height_factor", "width_factor"):
            value = getattr(self, name)
            if value is not None:
                _zoom_range(value, name)
        super().__post_init__()

    def matrices(self, batch: int, height: int, width: int) -> jax.Array:
        """``[batch, 8]`` transforms zooming each image by factors drawn uniformly from
        ``height_factor`` and ``width_factor`` (the height's factor for both without
        ``width_factor``).
        """
        lower, upper = _zoom_range(self.height_factor, "height_factor")
        zoom_y = uniform_rows(self, batch, 1.0 + lower, 1.0 + upper)
        zoom_x = zoom_y
        if self.width_factor is not None:
            lower, upper = _zoom_range(self.width_factor, "width_factor")
            zoom_x = uniform_rows(self, batch, 1.0 + lower, 1.0 + upper)
        return zoom_matrices(zoom_y, zoom_x, height, width)


def _zoom_range(factor: Any, name: str) -> tuple[float, float]:
    lower, upper = factor_range(factor, name)
    if lower <= -1.0:  # Keras' RandomZoom accepts (-1, 1]
        raise ValueError(f"{name} must be a number or a pair of numbers in (-1, 1]. "
                         f"Received: {name}={factor!r}")
    return lower, upper


def zoom_matrices(zoom_y: jax.Array, zoom_x: jax.Array, height: int, width: int) -> jax.Array:
    """``[batch, 8]`` transforms scaling by ``zoom_y``/``zoom_x`` (``[batch]``) about the
    image center, as Keras' ``RandomZoom._get_zoom_matrix``."""
    zeros = jnp.zeros_like(zoom_y)
    return jnp.stack([zoom_x, zeros, (width - 1) / 2.0 * (1.0 - zoom_x),
                      zeros, zoom_y, (height - 1) / 2.0 * (1.0 - zoom_y), zeros, zeros], axis=1)


@register
class RandomTranslation(_AffineLayer):
    """Shifts each image in training, as ``keras.layers.RandomTranslation``.

    ``height_factor``: a fraction of the height: ``f`` draws the downward shift from
    ``U(-f, f) * height`` pixels, ``(lo, hi)`` from ``U(lo, hi) * height``; within [-1, 1].
    ``width_factor`` likewise for the shift to the right. Fill and interpolation as
    `RandomRotation`.
    """

    height_factor: Any
    width_factor: Any

    def __post_init__(self) -> None:
        factor_range(self.height_factor, "height_factor")
        factor_range(self.width_factor, "width_factor")
        super().__post_init__()

    def matrices(self, batch: int, height: int, width: int) -> jax.Array:
        """``[batch, 8]`` transforms shifting each image by fractions of its height and
        width drawn uniformly from ``height_factor`` and ``width_factor``.
        """
        lower, upper = factor_range(self.height_factor, "height_factor")
        dy = uniform_rows(self, batch, lower, upper) * height
        lower, upper = factor_range(self.width_factor, "width_factor")
        dx = uniform_rows(self, batch, lower, upper) * width
        return translation_matrices(dy, dx)


def translation_matrices(dy: jax.Array, dx: jax.Array) -> jax.Array:
    """``[batch, 8]`` transforms shifting by ``dy`` down and ``dx`` right (``[batch]``,
    pixels), as Keras' ``RandomTranslation._get_translation_matrix``."""
    ones, zeros = jnp.ones_like(dy), jnp.zeros_like(dy)
    return jnp.stack([ones, zeros, -dx, zeros, ones, -dy, zeros, zeros], axis=1)
