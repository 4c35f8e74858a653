"""Image size: Resizing, CenterCrop, RandomCrop, with Keras 3's arguments and crop boxes.

They run on the device inside the step, on channels_last images ``[batch, height, width,
channels]`` (or one image ``[height, width, channels]``); resizing is ``jax.image.resize``,
as Keras 3's JAX backend.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.layers.base import FlaxLayer, register
from mirrorfit._src.layers.preprocessing import image_base
from mirrorfit._src.layers.preprocessing.image_base import check_choice, on_batch

RESIZE_INTERPOLATIONS = ("bilinear", "nearest", "lanczos3", "lanczos5", "bicubic")


def _check_size(layer: FlaxLayer) -> None:
    for name in ("height", "width"):
        value = getattr(layer, name)
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int (pixels). "
                             f"Received: {name}={value!r}")
    image_base.check_data_format(getattr(layer, "data_format", None))


def aspect_crop_box(height: int, width: int, target_height: int, target_width: int,
                    ) -> tuple[int, int, int, int]:
    """``(top, left, crop_height, crop_width)``: the largest centered box of the target's
    aspect ratio, as Keras' ``crop_to_aspect_ratio`` (and ``smart_resize``)."""
    crop_height = max(min(height, int(float(width * target_height) / target_width)), 1)
    crop_width = max(min(width, int(float(height * target_width) / target_height)), 1)
    return (int(float(height - crop_height) / 2), int(float(width - crop_width) / 2),
            crop_height, crop_width)


def _crop(images: jax.Array, top: int, left: int, height: int, width: int) -> jax.Array:
    return images[:, top:top + height, left:left + width, :]


def resize(images: jax.Array, height: int, width: int, interpolation: str = "bilinear",
           antialias: bool = False, crop_to_aspect_ratio: bool = False,
           pad_to_aspect_ratio: bool = False, fill_value: float = 0.0) -> jax.Array:
    """``[batch, h, w, c]`` images resized to ``[batch, height, width, c]``, as Keras 3's
    ``ops.image.resize`` on JAX (``jax.image.resize``): first cropped to the target's aspect
    ratio (the centered box), or padded to it with ``fill_value`` on both sides, if asked."""
    _, h, w, _ = images.shape
    if crop_to_aspect_ratio:
        images = _crop(images, *aspect_crop_box(h, w, height, width))
    elif pad_to_aspect_ratio:
        pad_h = int((max(h, int(float(w * height) / width)) - h) / 2)
        pad_w = int((max(w, int(float(h * width) / height)) - w) / 2)
        if pad_h > 0 or pad_w > 0:  # Keras pads one of the two axes
            widths = ((0, 0), (pad_h, pad_h), (0, 0), (0, 0)) if pad_h > 0 else (
                (0, 0), (0, 0), (pad_w, pad_w), (0, 0))
            images = jnp.pad(images, widths, constant_values=fill_value)
    shape = (images.shape[0], height, width, images.shape[3])
    return jax.image.resize(images, shape, method=interpolation, antialias=antialias)


@register
class Resizing(FlaxLayer):
    """Resizes images to ``[height, width]``, as ``keras.layers.Resizing``.

    Input ``[batch, h, w, c]`` or ``[h, w, c]``; output ``[batch, height, width, c]`` (or
    ``[height, width, c]``), floating. ``crop_to_aspect_ratio`` first takes the largest
    centered box of the target's aspect ratio; ``pad_to_aspect_ratio`` pads to it with
    ``fill_value`` instead (``fill_mode`` is ``"constant"`` only, as Keras).
    """

    height: int
    width: int
    interpolation: str = "bilinear"
    crop_to_aspect_ratio: bool = False
    pad_to_aspect_ratio: bool = False
    fill_mode: str = "constant"
    fill_value: float = 0.0
    antialias: bool = False
    data_format: str | None = None

    def __post_init__(self) -> None:
        _check_size(self)
        check_choice(self.interpolation, "interpolation", RESIZE_INTERPOLATIONS)
        check_choice(self.fill_mode, "fill_mode", ("constant",))
        if self.crop_to_aspect_ratio and self.pad_to_aspect_ratio:
            raise ValueError("Only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be "
                             "True. Received: crop_to_aspect_ratio=True, "
                             "pad_to_aspect_ratio=True")
        super().__post_init__()

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, "Resizing")
        return on_batch(lambda images: resize(
            images, self.height, self.width, self.interpolation, self.antialias,
            self.crop_to_aspect_ratio, self.pad_to_aspect_ratio, self.fill_value), x)


def _center_crop(images: jax.Array, height: int, width: int) -> jax.Array:
    """The centered ``[height, width]`` box, or (when the image is smaller) Keras'
    ``smart_resize``: the centered box of the target's aspect ratio, resized bilinearly."""
    _, h, w, _ = images.shape
    if h >= height and w >= width:
        return _crop(images, (h - height) // 2, (w - width) // 2, height, width)
    return resize(images, height, width, crop_to_aspect_ratio=True)


@register
class CenterCrop(FlaxLayer):
    """The central ``[height, width]`` box of each image, as ``keras.layers.CenterCrop``.

    Input ``[batch, h, w, c]`` or ``[h, w, c]``; output ``[batch, height, width, c]``. An
    image smaller than the target is cropped to the target's aspect ratio and resized
    (bilinear), as Keras.
    """

    height: int
    width: int
    data_format: str | None = None

    def __post_init__(self) -> None:
        _check_size(self)
        super().__post_init__()

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, "CenterCrop")
        return on_batch(lambda images: _center_crop(images, self.height, self.width), x)


@register
class RandomCrop(FlaxLayer):
    """A random ``[height, width]`` box of each image in training, as
    ``keras.layers.RandomCrop``.

    In training each row draws its own box (Keras 3 draws one box per batch), uniformly among
    the boxes inside the image. In inference, and in training when the image is smaller than
    the target, the image is cropped to the target's aspect ratio (the centered box) and
    resized, as Keras documents (Keras 3.15's code returns inference inputs uncropped).
    Input ``[batch, h, w, c]`` or ``[h, w, c]``; output ``[batch, height, width, c]``.
    """

    height: int
    width: int
    seed: int | None = None
    data_format: str | None = None

    def __post_init__(self) -> None:
        _check_size(self)
        super().__post_init__()

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, "RandomCrop")
        return on_batch(lambda images: self._crop(images, training), x)

    def _crop(self, images: jax.Array, training: bool) -> jax.Array:
        batch, h, w, channels = images.shape
        if not training or h < self.height or w < self.width:
            return resize(images, self.height, self.width, crop_to_aspect_ratio=True)
        tops = jnp.floor(image_base.uniform_rows(self, batch, 0.0, h - self.height + 1.0))
        lefts = jnp.floor(image_base.uniform_rows(self, batch, 0.0, w - self.width + 1.0))

        def one(image: jax.Array, top: jax.Array, left: jax.Array) -> jax.Array:
            start = (top.astype(jnp.int32), left.astype(jnp.int32), jnp.int32(0))
            return lax.dynamic_slice(image, start, (self.height, self.width, channels))

        return jax.vmap(one)(images, tops, lefts)
