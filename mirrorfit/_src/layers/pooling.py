"""Pooling, as ``keras.layers``: Max/AveragePooling1D/2D/3D and
GlobalMax/GlobalAveragePooling1D/2D/3D.

``strides`` defaults to ``pool_size`` and ``padding`` to ``"valid"``. With ``"same"``,
average pooling divides by the number of real (unpadded) entries, as TensorFlow does.
A masked `GlobalAveragePooling1D` averages the unmasked steps; a row with none is 0/0 = NaN,
as in Keras, and training warns once when it meets one.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, as_tuple, register

ALL_MASKED = (
    "GlobalAveragePooling1D received a row whose every step is masked: its mean is 0/0 = NaN "
    "(as in Keras), and one training step on it makes the weights NaN. Drop such rows (e.g. "
    "sequences that are all padding) before fit, or give each row at least one unmasked step.")
_warned_all_masked = False


def _warn_all_masked(any_all_masked: Any) -> None:
    """Host side of the training-time check: warn the first time a batch has an all-masked
    row (once per process)."""
    global _warned_all_masked
    if bool(any_all_masked) and not _warned_all_masked:
        _warned_all_masked = True
        warnings.warn(ALL_MASKED, RuntimeWarning, stacklevel=2)


class _Pooling(FlaxLayer):
    rank: ClassVar[int]
    is_max: ClassVar[bool]

    pool_size: Any = 2
    strides: Any = None
    padding: str = "valid"
    data_format: str | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        if self.data_format not in (None, "channels_last"):
            raise ValueError("Only data_format='channels_last' is supported. "
                             f"Received: data_format={self.data_format!r}")
        if self.padding not in ("valid", "same"):
            raise ValueError(f"padding must be 'valid' or 'same'. Received: "
                             f"padding={self.padding!r}")
        window = as_tuple(self.pool_size, self.rank, "pool_size")
        strides = window if self.strides is None else as_tuple(self.strides, self.rank,
                                                               "strides")
        x = self.cast(inputs)
        # By keyword: jax2onnx's ONNX export replaces these functions with keyword-only ones.
        pool = {"window_shape": window, "strides": strides, "padding": self.padding.upper()}
        if self.is_max:
            return nn.max_pool(x, **pool)
        return nn.avg_pool(x, **pool, count_include_pad=False)


@register
class MaxPooling1D(_Pooling):
    """Max over windows: ``[batch, steps, channels] -> [batch, new_steps, channels]``."""

    rank: ClassVar[int] = 1
    is_max: ClassVar[bool] = True


@register
class AveragePooling1D(_Pooling):
    """Mean over windows: ``[batch, steps, channels] -> [batch, new_steps, channels]``."""

    rank: ClassVar[int] = 1
    is_max: ClassVar[bool] = False


@register
class MaxPooling2D(_Pooling):
    """Max over windows: ``[batch, rows, cols, channels] -> [batch, new_rows, new_cols,
    channels]``, ``new = floor((n - pool) / stride) + 1`` ("valid") or ``ceil(n / stride)``."""

    rank: ClassVar[int] = 2
    is_max: ClassVar[bool] = True
    pool_size: Any = (2, 2)


@register
class AveragePooling2D(_Pooling):
    """Mean over windows: ``[batch, rows, cols, channels] -> [batch, new_rows, new_cols,
    channels]``."""

    rank: ClassVar[int] = 2
    is_max: ClassVar[bool] = False
    pool_size: Any = (2, 2)


@register
class MaxPooling3D(_Pooling):
    """Max over windows: ``[batch, d1, d2, d3, channels] -> [batch, n1, n2, n3, channels]``."""

    rank: ClassVar[int] = 3
    is_max: ClassVar[bool] = True
    pool_size: Any = (2, 2, 2)


@register
class AveragePooling3D(_Pooling):
    """Mean over windows: ``[batch, d1, d2, d3, channels] -> [batch, n1, n2, n3, channels]``."""

    rank: ClassVar[int] = 3
    is_max: ClassVar[bool] = False
    pool_size: Any = (2, 2, 2)


class _GlobalPooling(FlaxLayer):
    rank: ClassVar[int]
    is_max: ClassVar[bool]

    data_format: str | None = None
    keepdims: bool = False

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        self._check_format()
        axes = tuple(range(1, 1 + self.rank))
        reduce = jnp.max if self.is_max else jnp.mean
        return reduce(self.cast(inputs), axis=axes, keepdims=self.keepdims)

    def _check_format(self) -> None:
        if self.data_format not in (None, "channels_last"):
            raise ValueError("Only data_format='channels_last' is supported. "
                             f"Received: data_format={self.data_format!r}")


@register
class GlobalAveragePooling1D(_GlobalPooling):
    """Mean over steps: ``[batch, steps, channels] -> [batch, channels]``.

    With a Keras mask (``mask`` bool ``[batch, steps]``, e.g. from ``Embedding(mask_zero=
    True)``), the mean of the unmasked steps, as Keras; the output has no mask. A row with no
    unmasked step gives NaN, as in Keras; in training the step checks for one (a host callback
    on one bool per replica) and warns once per process (`RuntimeWarning`).
    """

    rank: ClassVar[int] = 1
    is_max: ClassVar[bool] = False
    supports_masking: ClassVar[bool] = True

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> None:
        """``None``: the steps are averaged away, so the output has no mask (as Keras')."""

    def __call__(self, inputs: jax.Array, training: bool = False,
                 mask: jax.Array | None = None) -> jax.Array:
        if mask is None:
            return super().__call__(inputs, training)
        self._check_format()
        x = self.cast(inputs)
        weight = jnp.asarray(mask, x.dtype)[:, :, None]
        count = jnp.sum(weight, axis=1, keepdims=self.keepdims)
        if training and not _warned_all_masked:
            jax.debug.callback(_warn_all_masked, jnp.any(count == 0))
        return jnp.sum(x * weight, axis=1, keepdims=self.keepdims) / count


@register
class GlobalMaxPooling1D(_GlobalPooling):
    """Max over steps: ``[batch, steps, channels] -> [batch, channels]``."""

    rank: ClassVar[int] = 1
    is_max: ClassVar[bool] = True


@register
class GlobalAveragePooling2D(_GlobalPooling):
    """Mean over positions: ``[batch, rows, cols, channels] -> [batch, channels]``."""

    rank: ClassVar[int] = 2
    is_max: ClassVar[bool] = False


@register
class GlobalMaxPooling2D(_GlobalPooling):
    """Max over positions: ``[batch, rows, cols, channels] -> [batch, channels]``."""

    rank: ClassVar[int] = 2
    is_max: ClassVar[bool] = True


@register
class GlobalAveragePooling3D(_GlobalPooling):
    """Mean over positions: ``[batch, d1, d2, d3, channels] -> [batch, channels]``."""

    rank: ClassVar[int] = 3
    is_max: ClassVar[bool] = False


@register
class GlobalMaxPooling3D(_GlobalPooling):
    """Max over positions: ``[batch, d1, d2, d3, channels] -> [batch, channels]``."""

    rank: ClassVar[int] = 3
    is_max: ClassVar[bool] = True
