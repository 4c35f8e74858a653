"""Shape layers: Flatten, Reshape, Permute, RepeatVector, ZeroPadding1D/2D/3D and
UpSampling1D/2D/3D (as ``keras.layers``)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import (
    FlaxLayer,
    as_tuple,
    check_channels_last,
    register,
    spatial_pairs,
)


@register
class Flatten(FlaxLayer):
    """``[batch, d1, ..., dn] -> [batch, d1 * ... * dn]``, as ``keras.layers.Flatten``."""

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        return x.reshape(x.shape[0], math.prod(x.shape[1:]))


@register
class Reshape(FlaxLayer):
    """``[batch, ...] -> [batch, *target_shape]`` (one entry may be -1), as
    ``keras.layers.Reshape``."""

    target_shape: tuple[int, ...]

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        return x.reshape(x.shape[0], *tuple(self.target_shape))


@register
class Permute(FlaxLayer):
    """Permutes the non-batch axes by ``dims`` (1-based), as ``keras.layers.Permute``:
    ``Permute((2, 1))`` maps ``[batch, a, b] -> [batch, b, a]``."""

    dims: tuple[int, ...]

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        dims = tuple(self.dims)
        if sorted(dims) != list(range(1, len(dims) + 1)):
            raise ValueError("dims must be a permutation of 1..n (the batch axis is 0 and "
                             f"stays). Received: dims={self.dims!r}")
        return jnp.transpose(self.cast(inputs), (0, *dims))


def _pairs(padding: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    if isinstance(padding, int):
        return ((padding, padding), (padding, padding))
    if len(padding) == 2 and all(isinstance(p, int) for p in padding):
        return ((padding[0], padding[0]), (padding[1], padding[1]))
    if len(padding) == 2 and all(len(p) == 2 for p in padding):
        return (tuple(padding[0]), tuple(padding[1]))  # type: ignore[return-value]
    raise ValueError("padding must be an int, 2 ints or 2 pairs of ints "
                     f"((top, bottom), (left, right)). Received: padding={padding!r}")


@register
class ZeroPadding2D(FlaxLayer):
    """Zero rows and columns around images, as ``keras.layers.ZeroPadding2D``.

    Input ``[batch, rows, cols, channels]``; output
    ``[batch, rows + top + bottom, cols + left + right, channels]``.
    """

    padding: Any = (1, 1)

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        rows, cols = _pairs(self.padding)
        return jnp.pad(self.cast(inputs), ((0, 0), rows, cols, (0, 0)))


@register
class UpSampling2D(FlaxLayer):
    """Repeats rows and columns ``size`` times, as ``keras.layers.UpSampling2D``.

    Input ``[batch, rows, cols, channels]``; output
    ``[batch, rows * size[0], cols * size[1], channels]``. ``interpolation`` is
    ``"nearest"`` or ``"bilinear"`` (half-pixel centres, no antialiasing).
    """

    size: Any = (2, 2)
    interpolation: str = "nearest"

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        sr, sc = as_tuple(self.size, 2, "size")
        x = self.cast(inputs)
        if self.interpolation == "nearest":
            return jnp.repeat(jnp.repeat(x, sr, axis=1), sc, axis=2)
        if self.interpolation == "bilinear":
            b, r, c, ch = x.shape
            return jax.image.resize(x, (b, r * sr, c * sc, ch), "bilinear", antialias=False)
        raise ValueError("interpolation must be 'nearest' or 'bilinear'. "
                         f"Received: interpolation={self.interpolation!r}")


@register
class RepeatVector(FlaxLayer):
    """``[batch, features] -> [batch, n, features]``, as ``keras.layers.RepeatVector``."""

    n: int

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        if x.ndim != 2:
            raise ValueError("RepeatVector expects inputs [batch, features]. "
                             f"Received shape {x.shape}")
        return jnp.repeat(x[:, None, :], self.n, axis=1)


@register
class ZeroPadding1D(FlaxLayer):
    """Zeros before and after the steps, as ``keras.layers.ZeroPadding1D``:
    ``[batch, steps, channels] -> [batch, steps + before + after, channels]``; ``padding``
    is an int or ``(before, after)``."""

    padding: Any = 1
    data_format: str | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        check_channels_last(self.data_format)
        pads = spatial_pairs(self.padding, 1, "padding")
        return jnp.pad(self.cast(inputs), ((0, 0), *pads, (0, 0)))


@register
class ZeroPadding3D(FlaxLayer):
    """Zeros around volumes, as ``keras.layers.ZeroPadding3D``: ``[batch, d1, d2, d3,
    channels]``, each ``d`` grows by its ``before + after``; ``padding`` is an int, 3 ints or
    3 ``(before, after)`` pairs."""

    padding: Any = ((1, 1), (1, 1), (1, 1))
    data_format: str | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        check_channels_last(self.data_format)
        pads = spatial_pairs(self.padding, 3, "padding")
        return jnp.pad(self.cast(inputs), ((0, 0), *pads, (0, 0)))


@register
class UpSampling1D(FlaxLayer):
    """Repeats each step ``size`` times, as ``keras.layers.UpSampling1D``:
    ``[batch, steps, features] -> [batch, steps * size, features]``."""

    size: int = 2

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        if not isinstance(self.size, int) or self.size <= 0:
            raise ValueError(f"size must be a positive int. Received: size={self.size!r}")
        return jnp.repeat(self.cast(inputs), self.size, axis=1)


@register
class UpSampling3D(FlaxLayer):
    """Repeats each voxel ``size`` times per axis, as ``keras.layers.UpSampling3D``:
    ``[batch, d1, d2, d3, channels] -> [batch, d1 * s1, d2 * s2, d3 * s3, channels]``."""

    size: Any = (2, 2, 2)
    data_format: str | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        check_channels_last(self.data_format)
        x = self.cast(inputs)
        for axis, s in enumerate(as_tuple(self.size, 3, "size"), start=1):
            x = jnp.repeat(x, s, axis=axis)
        return x
