"""Merging layers, as ``keras.layers``: Add, Subtract, Multiply, Average, Maximum, Minimum,
Concatenate and Dot, which take a list of tensors, and the functional helpers ``add``,
``subtract``, ``multiply``, ``average``, ``maximum``, ``minimum``, ``concatenate`` and ``dot``
(``layers.add([a, b])`` is ``layers.Add()([a, b])``).

Keras masks (bool ``[batch, timesteps]``, one per input or ``None``) combine as in Keras 3
(``keras/src/layers/merging/``): the element-wise merges OR their inputs' masks, and give
none unless every input has one; `Concatenate` joins them along ``axis`` (an input without
a mask counts as all kept) and gives one if any input has one; `Dot` gives none. `Maximum`,
`Minimum` and `Multiply` also read the masks for their values (``mask=``, filled in by a
model from the inputs' masks, as Keras reads each input's ``_keras_mask``): a masked
position takes the other inputs' value instead (Maximum/Minimum), or 1 in the product and 0
where every input is masked (Multiply).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, register

MERGE_SHAPES = (
    "{layer} combines tensors element-wise, so its inputs must have one shape (or shapes "
    "that broadcast). Make the layers feeding it output the same width, e.g. the same "
    "Dense(features), or use Concatenate to join different widths. Received: inputs of "
    "shapes {shapes}"
)


MaskList = Sequence[jax.Array | None] | None


def _mask_list(layer: FlaxLayer, inputs: Any, mask: Any) -> list[Any] | None:
    """``mask`` as a list with one entry per input (``None`` for no masks at all), checked
    as Keras' ``Merge.compute_mask`` checks it."""
    if mask is None:
        return None
    name = type(layer).__name__
    if not isinstance(mask, (list, tuple)):
        raise ValueError(f"{name}'s mask must be a list with one mask (or None) per input. "
                         f"Received: mask={mask!r}")
    if not isinstance(inputs, (list, tuple)) or len(inputs) != len(mask):
        count = len(inputs) if isinstance(inputs, (list, tuple)) else "not a list"
        raise ValueError(f"{name} needs one mask (or None) per input. Received: "
                         f"{len(mask)} masks for inputs ({count})")
    return list(mask)


def _broadcast(mask: jax.Array, x: jax.Array) -> jax.Array:
    """A ``[batch, timesteps]`` mask broadcast over ``x``'s last axis (Keras'
    ``broadcast_to(expand_dims(mask, -1), shape(x))``)."""
    return jnp.broadcast_to(jnp.expand_dims(mask, -1), x.shape)


def _step_mask(mask: jax.Array | None, x: jax.Array) -> jax.Array | None:
    return None if mask is None else _broadcast(mask, x)


def _or_merge(op: Any, xs: list[jax.Array], masks: list[Any]) -> jax.Array:
    """``op`` folded over ``xs`` where a masked position takes the value merged so far (or
    the next input's), as Keras' ``Merge._apply_merge_op_and_or_mask``."""
    output, output_mask = xs[0], _step_mask(masks[0], xs[0])
    for x, m in zip(xs[1:], masks[1:]):
        mask = _step_mask(m, x)
        if mask is not None:
            x = jnp.where(mask, x, output)
        if output_mask is not None:
            output = jnp.where(output_mask, output, x)
        output_mask = (None if mask is None or output_mask is None
                       else jnp.logical_or(output_mask, mask))
        output = op(output, x)
    return output


class _Merge(FlaxLayer):
    supports_masking: ClassVar[bool] = True

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> jax.Array | None:
        """The OR of the inputs' masks (bool ``[batch, timesteps]``), ``None`` unless every
        input has one, as Keras' ``Merge.compute_mask``.

        Args:
            inputs: the list of input arrays.
            mask: a list with each input's mask or ``None``, or ``None``.
        """
        masks = _mask_list(self, inputs, mask)
        if masks is None or any(m is None for m in masks):
            return None
        return functools.reduce(jnp.logical_or, masks)

    def _masks(self, inputs: list[jax.Array], mask: MaskList) -> list[Any]:
        masks = _mask_list(self, inputs, mask)
        return [None] * len(inputs) if masks is None else masks

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
    """Element-wise product of a list of same-shape tensors, as ``keras.layers.Multiply``.

    With ``mask`` (one bool ``[batch, timesteps]`` mask or ``None`` per input), a masked
    position counts as 1 in the product; when every input has a mask, positions masked in
    all of them are 0 (Keras' ``Multiply._merge_function``).
    """

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False,
                 mask: MaskList = None) -> jax.Array:
        xs = self._same_shape(self._inputs(inputs))
        masks = [_step_mask(m, x) for m, x in zip(self._masks(xs, mask), xs)]
        output = functools.reduce(operator.mul, [
            x if m is None else jnp.where(m, x, jnp.ones((), x.dtype)) for x, m in zip(xs, masks)])
        present = [m for m in masks if m is not None]
        if len(present) < len(masks):
            return output
        return jnp.where(functools.reduce(jnp.logical_or, present), output,
                         jnp.zeros((), output.dtype))


@register
class Concatenate(_Merge):
    """Joins a list of tensors along ``axis`` (default -1), as ``keras.layers.Concatenate``."""

    axis: int = -1

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> jax.Array | None:
        """The inputs' masks joined along ``axis``, as Keras' ``Concatenate.compute_mask``:
        each mask broadcast over its input's last axis (all True for an input without one),
        concatenated, then ``any`` over the last axis: bool ``[batch, timesteps]`` (the
        timesteps add up when ``axis`` is the time axis), or ``None`` when no input has a
        mask.

        Args:
            inputs: the list of input arrays.
            mask: a list with each input's mask or ``None``, or ``None``.
        """
        masks = _mask_list(self, inputs, mask)
        if masks is None or all(m is None for m in masks):
            return None
        full = [jnp.ones(x.shape, bool) if m is None
                else _broadcast(m, x) if m.ndim < x.ndim else m
                for x, m in zip(inputs, masks)]
        return jnp.any(jnp.concatenate(full, axis=self.axis), axis=-1)

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
    """Element-wise maximum of a list of same-shape tensors, as ``keras.layers.Maximum``.

    With ``mask`` (one bool ``[batch, timesteps]`` mask or ``None`` per input), a masked
    position of an input takes the other inputs' value (Keras'
    ``_apply_merge_op_and_or_mask``).
    """

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False,
                 mask: MaskList = None) -> jax.Array:
        xs = self._same_shape(self._inputs(inputs))
        return _or_merge(jnp.maximum, xs, self._masks(xs, mask))


@register
class Minimum(_Merge):
    """Element-wise minimum of a list of same-shape tensors, as ``keras.layers.Minimum``.

    With ``mask`` (one bool ``[batch, timesteps]`` mask or ``None`` per input), a masked
    position of an input takes the other inputs' value (Keras'
    ``_apply_merge_op_and_or_mask``).
    """

    def __call__(self, inputs: Sequence[jax.Array], training: bool = False,
                 mask: MaskList = None) -> jax.Array:
        xs = self._same_shape(self._inputs(inputs))
        return _or_merge(jnp.minimum, xs, self._masks(xs, mask))


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

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> None:
        """``None``: the product has no timesteps of its inputs' (Keras' ``Dot``)."""
        del inputs, mask

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
