"""`ConvLSTM2D`: an LSTM whose input and recurrent transforms are 2-D convolutions, as
``keras.layers.ConvLSTM2D`` (``keras/src/layers/rnn/conv_lstm.py``), channels_last.

Weights as Keras: ``kernel [kh, kw, channels, 4 * filters]``, ``recurrent_kernel [kh, kw,
filters, 4 * filters]`` (orthogonal) and ``bias [4 * filters]``, gates ordered ``i, f, c, o``.
The input convolution takes ``strides``, ``padding`` and ``dilation_rate``; the recurrent one
is stride 1, ``"same"``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.activations import activations
from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers.base import FlaxLayer, as_tuple, check_channels_last, register

_DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def _gated(x: jax.Array, masks: jax.Array | None, kernel: jax.Array, conv: Any) -> jax.Array:
    """``conv(x, kernel)``; with dropout ``masks [4, ...]``, gate ``g`` sees ``x * masks[g]``
    and its quarter of the kernel's output channels, as Keras' cell (one grouped
    convolution over the 4 masked copies)."""
    if masks is None:
        return conv(x, kernel, 1)
    return conv(jnp.concatenate([x * m for m in masks], axis=-1), kernel, 4)


@register
class ConvLSTM2D(FlaxLayer):
    """Convolutional LSTM, as ``keras.layers.ConvLSTM2D``.

    Input ``[batch, timesteps, rows, cols, channels]``; output ``[batch, new_rows, new_cols,
    filters]`` (the last step), or ``[batch, timesteps, new_rows, new_cols, filters]`` with
    ``return_sequences``; ``return_state`` appends the final ``h`` and ``c`` (a list, as
    Keras). Per step: ``z = conv(x_t, kernel) + bias + conv_same(h, recurrent_kernel)`` split
    into ``i, f, c~, o``; ``c = sig(f) * c + sig(i) * tanh(c~)``, ``h = sig(o) * tanh(c)``.
    ``dropout`` / ``recurrent_dropout`` draw one mask per gate and sequence, as Keras.
    ``unit_forget_bias`` starts the forget bias at one.
    """

    filters: int
    kernel_size: Any
    strides: Any = 1
    padding: str = "valid"
    data_format: str | None = None
    dilation_rate: Any = 1
    activation: Any = "tanh"
    recurrent_activation: Any = "sigmoid"
    use_bias: bool = True
    kernel_initializer: Any = "glorot_uniform"
    recurrent_initializer: Any = "orthogonal"
    bias_initializer: Any = "zeros"
    unit_forget_bias: bool = True
    kernel_regularizer: Any = None
    recurrent_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    dropout: float = 0.0
    recurrent_dropout: float = 0.0
    seed: int | None = None
    return_sequences: bool = False
    return_state: bool = False
    go_backwards: bool = False

    def _bias_init(self, key: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        bias = initializers.get(self.bias_initializer)(key, shape, dtype)
        if self.unit_forget_bias:
            bias = bias.at[self.filters:2 * self.filters].set(1.0)
        return bias

    def _masks(self, shape: tuple[int, ...], rate: float, training: bool) -> jax.Array | None:
        if not training or not 0 < rate < 1:
            return None
        keep = jax.random.bernoulli(self.make_rng("dropout"), 1 - rate, (4, *shape))
        return keep.astype(self.compute_dtype) / (1 - rate)

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False,
                 initial_state: Any = None) -> Any:
        check_channels_last(self.data_format)
        if self.padding not in ("valid", "same"):
            raise ValueError(f"padding must be 'valid' or 'same'. Received: "
                             f"padding={self.padding!r}")
        x = self.cast(inputs)
        if x.ndim != 5:
            raise ValueError("ConvLSTM2D expects inputs [batch, timesteps, rows, cols, "
                             f"channels]. Received shape {x.shape}")
        kernel_size = as_tuple(self.kernel_size, 2, "kernel_size")
        strides = as_tuple(self.strides, 2, "strides")
        dilation = as_tuple(self.dilation_rate, 2, "dilation_rate")
        width = 4 * self.filters
        kernel = self.weight("kernel", self.kernel_initializer,
                             (*kernel_size, x.shape[-1], width), self.kernel_regularizer)
        recurrent = self.weight("recurrent_kernel", self.recurrent_initializer,
                                (*kernel_size, self.filters, width), self.recurrent_regularizer)
        bias = (self.weight("bias", self._bias_init, (width,), self.bias_regularizer)
                if self.use_bias else None)

        def input_conv(v, k, groups):
            return lax.conv_general_dilated(v, k, strides, self.padding.upper(),
                                            rhs_dilation=dilation, dimension_numbers=_DIMENSIONS,
                                            feature_group_count=groups)

        def recurrent_conv(v, k, groups):
            return lax.conv_general_dilated(v, k, (1, 1), "SAME", dimension_numbers=_DIMENSIONS,
                                            feature_group_count=groups)

        batch, steps = x.shape[:2]
        input_masks = self._masks((batch, 1, *x.shape[2:]), self.dropout, training)
        flat = x.reshape(batch * steps, *x.shape[2:])
        masks = None if input_masks is None else jnp.repeat(input_masks, steps, axis=1).reshape(
            4, batch * steps, *x.shape[2:])
        z_in = _gated(flat, masks, kernel, input_conv)
        z_in = z_in.reshape(batch, steps, *z_in.shape[1:])
        if bias is not None:
            z_in = z_in + bias
        if initial_state is None:
            zeros = jnp.zeros((batch, *z_in.shape[2:-1], self.filters), self.compute_dtype)
            carry = (zeros, zeros)
        else:
            carry = tuple(s.astype(self.compute_dtype) for s in initial_state)
        recurrent_masks = self._masks(carry[0].shape, self.recurrent_dropout, training)
        gate = activations.get(self.recurrent_activation)
        act = activations.get(self.activation)

        def step(state, z_t):
            h, c = state
            i, f, g, o = jnp.split(z_t + _gated(h, recurrent_masks, recurrent, recurrent_conv),
                                   4, axis=-1)
            c = gate(f) * c + gate(i) * act(g)
            h = gate(o) * act(c)
            return (h, c), h

        time_major = jnp.moveaxis(z_in, 1, 0)
        (h, c), outputs = lax.scan(step, carry, time_major[::-1] if self.go_backwards
                                   else time_major)
        y = jnp.moveaxis(outputs, 0, 1) if self.return_sequences else h
        y = self.activity(y)
        return [y, h, c] if self.return_state else y
