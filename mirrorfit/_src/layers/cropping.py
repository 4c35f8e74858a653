"""Cropping layers: Cropping1D/2D/3D (as ``keras.layers``), channels_last.

``cropping`` is read as Keras reads it: an int (every side), or per spatial axis an int (both
sides) or a ``(before, after)`` pair (Cropping1D: one pair).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax

from mirrorfit._src.layers.base import FlaxLayer, check_channels_last, register, spatial_pairs


class _Cropping(FlaxLayer):
    rank: ClassVar[int]

    cropping: Any = None  # each subclass sets Keras' default

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        check_channels_last(getattr(self, "data_format", None))
        crops = spatial_pairs(self.cropping, self.rank, "cropping")
        x = self.cast(inputs)
        if x.ndim != self.rank + 2 or any(
                a + b >= n for (a, b), n in zip(crops, x.shape[1:-1])):
            raise ValueError(f"{type(self).__name__} expects inputs of rank {self.rank + 2} "
                             "[batch, ..., channels] larger than the cropping on every spatial "
                             f"axis. Received: inputs.shape={x.shape}, cropping={crops}")
        index = tuple(slice(a, n - b) for (a, b), n in zip(crops, x.shape[1:-1]))
        return x[(slice(None), *index, slice(None))]


@register
class Cropping1D(_Cropping):
    """Removes steps at both ends: ``[batch, steps, features] -> [batch, steps - before -
    after, features]``, as ``keras.layers.Cropping1D``."""

    rank: ClassVar[int] = 1

    cropping: Any = (1, 1)


@register
class Cropping2D(_Cropping):
    """Removes rows and columns: ``[batch, rows, cols, channels] -> [batch, rows - top -
    bottom, cols - left - right, channels]``, as ``keras.layers.Cropping2D``."""

    rank: ClassVar[int] = 2

    cropping: Any = ((0, 0), (0, 0))
    data_format: str | None = None


@register
class Cropping3D(_Cropping):
    """Removes planes on each of the 3 spatial axes of ``[batch, d1, d2, d3, channels]``, as
    ``keras.layers.Cropping3D``."""

    rank: ClassVar[int] = 3

    cropping: Any = ((1, 1), (1, 1), (1, 1))
    data_format: str | None = None
