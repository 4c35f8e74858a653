"""Convolutions with Keras' defaults: ``padding="valid"``, channels_last, glorot_uniform kernels.

Conv1D/2D/3D, Conv1D/2D/3DTranspose, DepthwiseConv2D and SeparableConv2D, as
``keras.layers``; on ``jax.lax`` convolutions (XLA's ``"SAME"`` padding is TensorFlow's). Their
``*_constraint`` arguments (`mirrorfit.constraints`) project the weights after every optimizer
update.
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.layers.base import FlaxLayer, as_tuple, register

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _dimension_numbers(rank: int) -> tuple[str, str, str]:
    s = _SPATIAL[rank]
    return (f"N{s}C", f"{s}IO", f"N{s}C")


def _check_data_format(data_format: Any) -> None:
    if data_format not in (None, "channels_last"):
        raise ValueError("Only data_format='channels_last' (inputs [batch, ..., channels]) is "
                         "supported; transpose channels_first inputs with Permute. "
                         f"Received: data_format={data_format!r}")


def _padding(padding: str, rank: int, kernel: tuple[int, ...], dilation: tuple[int, ...],
             causal_ok: bool) -> Any:
    mode = padding.lower() if isinstance(padding, str) else padding
    if mode == "valid":
        return "VALID"
    if mode == "same":
        return "SAME"
    if mode == "causal" and causal_ok:
        return [((k - 1) * d, 0) for k, d in zip(kernel, dilation)]
    allowed = "'valid', 'same' or 'causal'" if causal_ok else "'valid' or 'same'"
    raise ValueError(f"padding must be {allowed}. Received: padding={padding!r}")


class _Conv(FlaxLayer):
    """``activation(conv(inputs, kernel) + bias)``; kernel ``[*kernel_size, in / groups,
    filters]``, as ``keras.layers.Conv{1,2,3}D``."""

    rank: ClassVar[int]

    filters: int
    kernel_size: Any
    strides: Any = 1
    padding: str = "valid"
    data_format: str | None = None
    dilation_rate: Any = 1
    groups: int = 1
    activation: Any = None
    use_bias: bool = True
    kernel_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    kernel_constraint: Any = None
    bias_constraint: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _check_data_format(self.data_format)
        kernel_size = as_tuple(self.kernel_size, self.rank, "kernel_size")
        strides = as_tuple(self.strides, self.rank, "strides")
        dilation = as_tuple(self.dilation_rate, self.rank, "dilation_rate")
        x = self.cast(inputs)
        if x.ndim != self.rank + 2 or x.shape[-1] % self.groups:
            raise ValueError(f"{type(self).__name__} expects inputs [batch, "
                             f"{', '.join(_SPATIAL[self.rank])}, channels] with channels "
                             f"divisible by groups={self.groups}. Received shape {x.shape}")
        kernel = self.weight("kernel", self.kernel_initializer,
                             (*kernel_size, x.shape[-1] // self.groups, self.filters),
                             self.kernel_regularizer)
        y = lax.conv_general_dilated(
            x, kernel, strides, _padding(self.padding, self.rank, kernel_size, dilation,
                                         self.rank == 1),
            rhs_dilation=dilation, dimension_numbers=_dimension_numbers(self.rank),
            feature_group_count=self.groups)
        return self.bias_and_activation(y)


@register
class Conv1D(_Conv):
    """1-D convolution: ``[batch, steps, channels] -> [batch, new_steps, filters]``;
    ``padding`` also takes ``"causal"``."""

    rank: ClassVar[int] = 1


@register
class Conv2D(_Conv):
    """2-D convolution: ``[batch, rows, cols, channels] -> [batch, new_rows, new_cols,
    filters]``, with ``new = ceil((n - (k - 1) * d) / s)`` for ``"valid"`` and
    ``ceil(n / s)`` for ``"same"``."""

    rank: ClassVar[int] = 2


@register
class Conv3D(_Conv):
    """3-D convolution: ``[batch, d1, d2, d3, channels] -> [batch, n1, n2, n3, filters]``."""

    rank: ClassVar[int] = 3


def _transpose_padding(kernel: int, stride: int, dilation: int, padding: str,
                       output_padding: int | None) -> tuple[int, int]:
    """Keras' conversion of transposed-conv padding to JAX's (keras/src/backend/common/
    backend_utils.py): output ``(n - 1) * s + max(k, s)`` for "valid", ``n * s`` for "same"."""
    k = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(k, stride) - k if output_padding is None else output_padding
        return k - 1, k - 1 + extra
    total = stride + k - 2 if output_padding is None else k + k % 2 - 2 + output_padding
    left = min(total // 2 + total % 2, k - 1)
    return left, total - left


class _ConvTranspose(FlaxLayer):
    """Transposed convolution, as ``keras.layers.Conv{1,2,3}DTranspose``: output
    ``(n - 1) * s + max(k, s)`` per spatial axis for ``"valid"``, ``n * s`` for ``"same"``.
    Kernel ``[*kernel_size, filters, channels]`` as Keras stores it."""

    rank: ClassVar[int]

    filters: int
    kernel_size: Any
    strides: Any = 1
    padding: str = "valid"
    output_padding: Any = None
    data_format: str | None = None
    dilation_rate: Any = 1
    activation: Any = None
    use_bias: bool = True
    kernel_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    kernel_constraint: Any = None
    bias_constraint: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _check_data_format(self.data_format)
        if self.padding not in ("valid", "same"):
            raise ValueError(f"padding must be 'valid' or 'same'. Received: "
                             f"padding={self.padding!r}")
        rank = self.rank
        kernel_size = as_tuple(self.kernel_size, rank, "kernel_size")
        strides = as_tuple(self.strides, rank, "strides")
        dilation = as_tuple(self.dilation_rate, rank, "dilation_rate")
        out_pad = ((None,) * rank if self.output_padding is None
                   else as_tuple(self.output_padding, rank, "output_padding"))
        x = self.cast(inputs)
        kernel = self.weight("kernel", self.kernel_initializer,
                             (*kernel_size, self.filters, x.shape[-1]), self.kernel_regularizer)
        pads = [_transpose_padding(k, s, d, self.padding, p)
                for k, s, d, p in zip(kernel_size, strides, dilation, out_pad)]
        y = lax.conv_transpose(x, kernel, strides, pads, rhs_dilation=dilation,
                               dimension_numbers=_dimension_numbers(rank), transpose_kernel=True)
        return self.bias_and_activation(y)


@register
class Conv1DTranspose(_ConvTranspose):
    """Transposed 1-D convolution: ``[batch, steps, channels] -> [batch, new_steps,
    filters]``; kernel ``[k, filters, channels]``."""

    rank: ClassVar[int] = 1


@register
class Conv2DTranspose(_ConvTranspose):
    """Transposed 2-D convolution: ``[batch, rows, cols, channels] -> [batch, new_rows,
    new_cols, filters]``; kernel ``[kh, kw, filters, channels]``."""

    rank: ClassVar[int] = 2


@register
class Conv3DTranspose(_ConvTranspose):
    """Transposed 3-D convolution: ``[batch, d1, d2, d3, channels] -> [batch, n1, n2, n3,
    filters]``; kernel ``[k1, k2, k3, filters, channels]``."""

    rank: ClassVar[int] = 3


def _depthwise_conv(layer: DepthwiseConv2D | SeparableConv2D,
                    inputs: jax.Array) -> tuple[jax.Array, int]:
    """The depthwise half of DepthwiseConv2D and SeparableConv2D, inside their ``__call__``.

    Checks ``data_format``, makes the layer's ``depthwise_kernel [kh, kw, channels,
    depth_multiplier]`` and convolves the cast ``inputs [batch, rows, cols, channels]`` with
    it per channel: output channel ``c * depth_multiplier + m`` comes from input channel ``c``
    and multiplier ``m``, as Keras. Returns ``([batch, new_rows, new_cols, channels *
    depth_multiplier], channels)``.
    """
    _check_data_format(layer.data_format)
    kernel_size = as_tuple(layer.kernel_size, 2, "kernel_size")
    dilation = as_tuple(layer.dilation_rate, 2, "dilation_rate")
    x = layer.cast(inputs)
    c, m = x.shape[-1], layer.depth_multiplier
    kernel = layer.weight("depthwise_kernel", layer.depthwise_initializer,
                          (*kernel_size, c, m), layer.depthwise_regularizer)
    y = lax.conv_general_dilated(
        x, kernel.reshape(*kernel_size, 1, c * m), as_tuple(layer.strides, 2, "strides"),
        _padding(layer.padding, 2, kernel_size, dilation, False), rhs_dilation=dilation,
        dimension_numbers=_dimension_numbers(2), feature_group_count=c)
    return y, c


@register
class DepthwiseConv2D(FlaxLayer):
    """Per-channel 2-D convolution, as ``keras.layers.DepthwiseConv2D``.

    Input ``[batch, rows, cols, channels]``; output ``[batch, new_rows, new_cols,
    channels * depth_multiplier]``. Weights ``depthwise_kernel [kh, kw, channels,
    depth_multiplier]``, ``bias [channels * depth_multiplier]``.
    """

    kernel_size: Any
    strides: Any = (1, 1)
    padding: str = "valid"
    depth_multiplier: int = 1
    data_format: str | None = None
    dilation_rate: Any = (1, 1)
    activation: Any = None
    use_bias: bool = True
    depthwise_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    depthwise_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    depthwise_constraint: Any = None
    bias_constraint: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        y, _ = _depthwise_conv(self, inputs)
        return self.bias_and_activation(y)


@register
class SeparableConv2D(FlaxLayer):
    """Depthwise then 1x1 pointwise convolution, as ``keras.layers.SeparableConv2D``.

    Input ``[batch, rows, cols, channels]``; output ``[batch, new_rows, new_cols, filters]``.
    Weights ``depthwise_kernel [kh, kw, channels, depth_multiplier]``, ``pointwise_kernel
    [1, 1, channels * depth_multiplier, filters]``, ``bias [filters]``.
    """

    filters: int
    kernel_size: Any
    strides: Any = (1, 1)
    padding: str = "valid"
    data_format: str | None = None
    dilation_rate: Any = (1, 1)
    depth_multiplier: int = 1
    activation: Any = None
    use_bias: bool = True
    depthwise_initializer: Any = "glorot_uniform"
    pointwise_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    depthwise_regularizer: Any = None
    pointwise_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    depthwise_constraint: Any = None
    pointwise_constraint: Any = None
    bias_constraint: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        y, c = _depthwise_conv(self, inputs)
        pointwise = self.weight("pointwise_kernel", self.pointwise_initializer,
                                (1, 1, c * self.depth_multiplier, self.filters),
                                self.pointwise_regularizer)
        y = jnp.einsum("...c,cf->...f", y, pointwise[0, 0])
        return self.bias_and_activation(y)
