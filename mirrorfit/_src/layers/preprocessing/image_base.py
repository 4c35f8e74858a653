"""What the image layers and ``mf.ops.image`` share: argument checks as Keras', float images,
unbatched and channels_first images, per-row random draws, `affine_transform` (Keras 3's JAX
``ops.image.affine_transform``), and `symbolic_op` (an image op on a functional model's
symbolic tensors records a node, as ``mf.ops`` functions do).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer
from mirrorfit._src.layers.graph.symbolic import Operation, is_symbolic, symbolic_call

RNG_STREAM = "dropout"  # the trainer seeds it per step and per replica
FILL_MODES = ("reflect", "wrap", "constant", "nearest")
INTERPOLATION_ORDERS = {"nearest": 0, "bilinear": 1}  # map_coordinates' spline order


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> None:
    """Raises ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}. Received: {name}={value!r}")


def check_data_format(data_format: Any) -> None:
    """Raises ValueError for data_format other than None/"channels_last" (NHWC only)."""
    if data_format not in (None, "channels_last"):
        raise ValueError("The image layers take channels_last images [batch, height, width, "
                         "channels]; transpose channels_first images first. "
                         f"Received: data_format={data_format!r}")


def factor_range(factor: Any, name: str, bounds: tuple[float, float] = (-1.0, 1.0),
                 ) -> tuple[float, float]:
    """``(lower, upper)`` from a number or a pair, as Keras' ``_set_factor``: a number ``f``
    gives ``(max(-|f|, bounds[0]), |f|)``, a pair is sorted.

    Raises:
        ValueError: not a number or a pair of numbers within ``bounds``.
    """
    message = (f"{name} must be a number or a pair of numbers in [{bounds[0]}, {bounds[1]}]. "
               f"Received: {name}={factor!r}")
    if isinstance(factor, (tuple, list)):
        if len(factor) != 2 or not all(isinstance(f, (int, float)) for f in factor):
            raise ValueError(message)
        lower, upper = sorted(float(f) for f in factor)
        if lower < bounds[0] or upper > bounds[1]:
            raise ValueError(message)
        return lower, upper
    if not isinstance(factor, (int, float)) or not bounds[0] <= factor <= bounds[1]:
        raise ValueError(message)
    return max(-abs(float(factor)), bounds[0]), abs(float(factor))


def to_float(layer: FlaxLayer, images: Any) -> jax.Array:
    """``images`` in the layer's compute dtype (integer images become floats first)."""
    x = jnp.asarray(images)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return layer.cast(x)


def check_rank(images: jax.Array, name: str) -> None:
    """Raises ValueError unless ``images`` is ``[batch, h, w, c]`` or ``[h, w, c]``."""
    if images.ndim not in (3, 4):
        raise ValueError(f"{name} takes images [batch, height, width, channels] or one image "
                         f"[height, width, channels]. Received: inputs.shape={images.shape}")


def on_batch(fn: Callable[[jax.Array], jax.Array], images: jax.Array) -> jax.Array:
    """``fn`` (of ``[batch, h, w, c]`` images) applied to ``images``, one image ``[h, w, c]``
    being a batch of one."""
    if images.ndim == 3:
        return fn(images[None])[0]
    return fn(images)


def symbolic_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, recording a node when given a functional model's symbolic tensor."""
    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        if is_symbolic((args, kwargs)):
            return symbolic_call(Operation(fn), args, kwargs)
        return fn(*args, **kwargs)
    return op


def channels_last_batch(images: Any, data_format: str | None
                        ) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]]:
    """``images`` (``[batch, h, w, c]``, ``[h, w, c]``, or channels first) as a channels_last
    batch, and the function that gives a result of that form the images' form again.

    Raises:
        ValueError: an image rank other than 3 or 4, or an unknown ``data_format``.
    """
    x = jnp.asarray(images)
    if x.ndim not in (3, 4):
        raise ValueError("Invalid images rank: expected rank 3 (single image) or rank 4 "
                         f"(batch of images). Received: images.shape={x.shape}")
    check_choice(data_format, "data_format", (None, "channels_last", "channels_first"))
    first, single = data_format == "channels_first", x.ndim == 3
    batch = x[None] if single else x
    batch = jnp.moveaxis(batch, 1, -1) if first else batch

    def restore(result: jax.Array) -> jax.Array:
        result = jnp.moveaxis(result, -1, 1) if first else result
        return result[0] if single else result
    return batch, restore


def uniform_rows(layer: FlaxLayer, batch: int, lower: float, upper: float) -> jax.Array:
    """``[batch]`` float32 draws from U(lower, upper), from the layer's RNG stream."""
    return jax.random.uniform(layer.make_rng(RNG_STREAM), (batch,), jnp.float32, lower, upper)


def affine_transform(images: jax.Array, transforms: jax.Array, interpolation: str,
                     fill_mode: str, fill_value: float) -> jax.Array:
    """Each image resampled through its transform, as Keras 3's ``ops.image.affine_transform``.

    Output pixel ``(y, x)`` of image ``i`` reads the input at ``(b0 x + b1 y + b2,
    a0 x + a1 y + a2)`` with ``[a0, a1, a2, b0, b1, b2, 0, 0] = transforms[i]`` (TF's
    ``ImageProjectiveTransform`` layout, the inverse mapping), by
    ``jax.scipy.ndimage.map_coordinates``.

    Args:
        images: ``[batch, height, width, channels]``, floating.
        transforms: ``[batch, 8]`` float32.
        interpolation: ``"nearest"`` or ``"bilinear"``.
        fill_mode: ``"reflect"``, ``"wrap"``, ``"constant"`` or ``"nearest"`` (points outside).
        fill_value: the value outside the image for ``fill_mode="constant"``.

    Returns:
        ``[batch, height, width, channels]``, the dtype of ``images``.
    """
    _, height, width, channels = images.shape
    y, x, c = jnp.meshgrid(jnp.arange(height, dtype=jnp.float32),
                           jnp.arange(width, dtype=jnp.float32),
                           jnp.arange(channels, dtype=jnp.float32), indexing="ij")

    def one(image: jax.Array, t: jax.Array) -> jax.Array:
        source_x = t[0] * x + t[1] * y + t[2]
        source_y = t[3] * x + t[4] * y + t[5]
        return jax.scipy.ndimage.map_coordinates(
            image, [source_y, source_x, c], order=INTERPOLATION_ORDERS[interpolation],
            mode=fill_mode, cval=fill_value)

    return jax.vmap(one)(images, transforms.astype(jnp.float32)).astype(images.dtype)
