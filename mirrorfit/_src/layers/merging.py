"""Merging layers, as ``keras.layers``: Add, Subtract, Multiply, Average, Maximum, Minimum,
Concatenate and Dot, which take a list of tensors, and the functional helpers ``add``,
``subtract``, ``multiply``, ``average``, ``maximum``, ``minimum``, ``concatenate`` and ``dot``
(``layers.add([a, b])`` is ``layers.Add()([a, b])``)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

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


@register
class Subtract(_Merge):
    """``inputs[0] - inputs[1]`` for exactly 2 same-shape tensors, as
    ``keras.layers.Subtract``."""

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        xs = self._same_shape(self._inputs(inputs))
        if len(xs) != 2:
            raise ValueError("Subtract takes exactly 2 tensors (inputs[0] - inputs[1]). "
                             f"Received: {len(xs)} inputs")
        return xs[0] - xs[1]


@register
class Average(_Merge):
    """Element-wise mean of a list of same-shape tensors, as ``keras.layers.Average``."""

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        xs = self._same_shape(self._inputs(inputs))
        return functools.reduce(operator.add, xs) / len(xs)


@register
class Maximum(_Merge):
    """Element-wise maximum of a list of same-shape tensors, as ``keras.layers.Maximum``."""

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        return functools.reduce(jnp.maximum, self._same_shape(self._inputs(inputs)))


@register
class Minimum(_Merge):
    """Element-wise minimum of a list of same-shape tensors, as ``keras.layers.Minimum``."""

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        return functools.reduce(jnp.minimum, self._same_shape(self._inputs(inputs)))


def _dot_axes(axes: Any, ndims: tuple[int, int]) -> tuple[int, int]:
    pair = (axes, axes) if isinstance(axes, int) else tuple(axes)
    if len(pair) != 2 or not all(isinstance(a, int) for a in pair):
        raise ValueError("axes must be an int or a pair of ints (one axis per input). "
                         f"Received: axes={axes!r}")
    result = (pair[0] % ndims[0], pair[1] % ndims[1])
    if 0 in result:
        raise ValueError(f"axes cannot include the batch axis 0. Received: axes={axes!r}")
    return result


@register
class Dot(_Merge):
    """Per-sample dot product of 2 tensors along ``axes``, as ``keras.layers.Dot``.

    For ``x [batch, *a]`` and ``y [batch, *b]`` contracted over ``x``'s axis ``axes[0]`` and
    ``y``'s ``axes[1]`` (equal sizes), the output is ``[batch, *a', *b']`` (the rest of each,
    in order; ``[batch, 1]`` when nothing is left), as Keras' ``batch_dot``. ``normalize``
    first scales both to unit L2 norm along those axes (the output is then the cosine
    similarity).
    """

    axes: Any
    normalize: bool = False

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False) -> jax.Array:
        xs = self._inputs(inputs)
        if len(xs) != 2:
            raise ValueError(f"Dot takes exactly 2 tensors. Received: {len(xs)} inputs")
        x, y = xs
        ax, ay = _dot_axes(self.axes, (x.ndim, y.ndim))
        if x.shape[ax] != y.shape[ay]:
            raise ValueError(f"Dot contracts axes of equal size. Received: axes=({ax}, {ay}) "
                             f"of inputs of shapes {x.shape} and {y.shape}")
        if self.normalize:  # keras.ops.normalize with its default epsilon 1e-7
            x, y = (v * jnp.minimum(jax.lax.rsqrt(jnp.sum(v * v, axis=a, keepdims=True)), 1e7)
                    for v, a in ((x, ax), (y, ay)))
        letters = iter("cdefghijklmnopqrstuvwxyz")
        xs_sub = ["a"] + ["b" if i == ax else next(letters) for i in range(1, x.ndim)]
        ys_sub = ["a"] + ["b" if i == ay else next(letters) for i in range(1, y.ndim)]
        out = ["a"] + [c for c in xs_sub[1:] + ys_sub[1:] if c != "b"]
        z = jnp.einsum(f"{''.join(xs_sub)},{''.join(ys_sub)}->{''.join(out)}", x, y)
        return z[:, None] if z.ndim == 1 else z


def add(inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``Add(**kwargs)(inputs)``: the element-wise sum, as ``keras.layers.add``."""
    return Add(**kwargs)(inputs)


def subtract(inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``Subtract(**kwargs)(inputs)``: ``inputs[0] - inputs[1]``, as ``keras.layers.subtract``."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``Multiply(**kwargs)(inputs)``: the element-wise product, as ``keras.layers.multiply``."""
    return Multiply(**kwargs)(inputs)


def average(inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``Average(**kwargs)(inputs)``: the element-wise mean, as ``keras.layers.average``."""
    return Average(**kwargs)(inputs)


def maximum(inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``Maximum(**kwargs)(inputs)``: the element-wise maximum, as ``keras.layers.maximum``."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs: Sequence[Any], **kwargs: Any) -> Any:
    """``Minimum(**kwargs)(inputs)``: the element-wise minimum, as ``keras.layers.minimum``."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs: Sequence[Any], axis: int = -1, **kwargs: Any) -> Any:
    """``Concatenate(axis, **kwargs)(inputs)``, as ``keras.layers.concatenate``.

    Example:
        >>> a, b = mf.layers.Input((3,)), mf.layers.Input((2,))
        >>> mf.layers.concatenate([a, b]).shape
        (None, 5)
    """
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs: Sequence[Any], axes: Any = -1, **kwargs: Any) -> Any:
    """``Dot(axes, **kwargs)(inputs)``: the per-sample dot product, as ``keras.layers.dot``."""
    return Dot(axes=axes, **kwargs)(inputs)
