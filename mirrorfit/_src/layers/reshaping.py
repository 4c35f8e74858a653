"""Shape layers: Flatten, Reshape, Permute, ZeroPadding2D, UpSampling2D (as ``keras.layers``)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, as_tuple, register


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
