"""Merging layers: Add, Multiply, Concatenate (as ``keras.layers``); they take a list."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, register

MERGE_SHAPES = (
    "{layer} combines tensors element-wise, so its inputs must have one shape (or shapes "
    "that broadcast). Make the layers feeding it output the same width, e.g. the same "
    "Dense(features), or use Concatenate to join different widths. Received: inputs of "
    "shapes {shapes}"
)


class _Merge(FlaxLayer):
    def _inputs(self, inputs: Sequence[jax.Array]) -> list[jax.Array]:
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise ValueError(f"{type(self).__name__} takes a list of at least 2 tensors. "
                             f"Received: inputs={inputs!r}")
        return [self.cast(x) for x in inputs]

    def _same_shape(self, inputs: list[jax.Array]) -> list[jax.Array]:
        shapes = [tuple(x.shape) for x in inputs]
        try:
            jnp.broadcast_shapes(*shapes)
        except ValueError:
            raise ValueError(MERGE_SHAPES.format(layer=type(self).__name__, shapes=shapes)
                             ) from None
        return inputs


@register
class Add(_Merge):
    """Element-wise sum of a list of same-shape tensors, as ``keras.layers.Add``."""

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        return functools.reduce(operator.add, self._same_shape(self._inputs(inputs)))


@register
class Multiply(_Merge):
    """Element-wise product of a list of same-shape tensors, as ``keras.layers.Multiply``."""

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        return functools.reduce(operator.mul, self._same_shape(self._inputs(inputs)))


@register
class Concatenate(_Merge):
    """Joins a list of tensors along ``axis`` (default -1), as ``keras.layers.Concatenate``."""

    axis: int = -1

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        return jnp.concatenate(self._inputs(inputs), axis=self.axis)
