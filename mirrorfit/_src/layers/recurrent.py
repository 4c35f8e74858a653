"""Recurrent layers with Keras' weight layout, on ``flax.linen.scan``: LSTM, GRU, SimpleRNN.

Each layer keeps its cell's weights under ``"cell"`` (Keras' ``lstm_cell`` etc.) with Keras'
names and shapes: ``kernel [input_dim, gates * units]``, ``recurrent_kernel [units, gates *
units]`` (orthogonal) and ``bias``. Gates are ordered as Keras: LSTM ``i, f, c, o``; GRU
``z, r, h``. Input ``[batch, timesteps, features]``; output ``[batch, units]``, or ``[batch,
timesteps, units]`` with ``return_sequences``; ``return_state`` appends the final states
(LSTM ``h, c``; GRU and SimpleRNN ``h``), as a list like Keras. A Keras mask (``mask``
bool ``[batch, timesteps]``) skips steps as Keras' JAX ``rnn`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.activations import activations
from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers.base import FlaxLayer, layer_field, register
from mirrorfit._src.layers.flax_bridge import SOWN_LOSSES
from mirrorfit._src.regularizers import regularizers


@dataclasses.dataclass(frozen=True)
class _CellSpec:
    """What a cell needs from its layer (a plain object, so Flax does not adopt the layer)."""

    units: int
    gates: int
    state_count: int
    kernel_initializer: Any
    recurrent_initializer: Any
    bias_shape: tuple[int, ...] | None  # None: no bias
    bias_init: Callable[..., jax.Array]
    step: Callable[..., Any]  # (carry, x, kernel, recurrent, bias) -> (carry, h)
    compute_dtype: Any


class _Cell(nn.Module):
    """One step ``(carry, x_t) -> (carry, h_t)`` with Keras' weight names."""

    spec: _CellSpec

    @nn.nowrap
    def initialize_carry(self, rng: jax.Array, input_shape: tuple[int, ...]) -> Any:
        zeros = jnp.zeros((*input_shape[:-1], self.spec.units), self.spec.compute_dtype)
        return (zeros, zeros) if self.spec.state_count == 2 else zeros

    @property
    def num_feature_axes(self) -> int:
        return 1

    @nn.compact
    def __call__(self, carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        spec = self.spec
        width = spec.gates * spec.units
        kernel = self.param("kernel", initializers.get(spec.kernel_initializer),
                            (x.shape[-1], width), jnp.float32)
        recurrent = self.param("recurrent_kernel", initializers.get(spec.recurrent_initializer),
                               (spec.units, width), jnp.float32)
        bias = (None if spec.bias_shape is None else
                self.param("bias", spec.bias_init, spec.bias_shape, jnp.float32))
        cast = lambda w: None if w is None else w.astype(spec.compute_dtype)
        return spec.step(carry, x, cast(kernel), cast(recurrent), cast(bias))


def _scan(cell: _Cell, carry: Any, x: jax.Array, mask: jax.Array | None, backwards: bool,
          zero_output_for_mask: bool) -> tuple[Any, jax.Array]:
    """Runs ``cell`` over the steps of ``x [batch, timesteps, features]``, as Keras' JAX
    ``rnn`` (``lax.scan``): with ``mask`` (bool ``[batch, timesteps]``) a masked step keeps
    the states and outputs the previous output (zeros with ``zero_output_for_mask``).
    ``backwards`` runs from the last step; outputs are then in that (reversed) order.

    Returns:
        ``(final_carry, outputs [batch, timesteps, units])``.
    """

    def step(cell: _Cell, carry: Any, inputs: Any) -> tuple[Any, jax.Array]:
        x_t, mask_t = inputs
        new_carry, y = cell(carry, x_t)
        if mask_t is None:
            return new_carry, y
        keep = mask_t[:, None]
        previous = jax.tree.leaves(carry)[0]  # h, the previous output
        y = jnp.where(keep, y, jnp.zeros_like(y) if zero_output_for_mask else previous)
        return jax.tree.map(lambda new, old: jnp.where(keep, new, old), new_carry, carry), y

    scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False},
                   in_axes=1, out_axes=1, reverse=backwards)
    xs = (x, None if mask is None else jnp.asarray(mask, bool))
    final, outputs = scan(cell, carry, xs)
    return final, jnp.flip(outputs, axis=1) if backwards else outputs


class _RNN(FlaxLayer):
    gate_count: ClassVar[int]
    state_count: ClassVar[int] = 1

    def step(self, carry, x, kernel, recurrent, bias):
        """One time step: ``(new carry, output)`` from the ``carry`` and the step's input
        ``x`` ``[batch, features]``, with the layer's ``kernel``, ``recurrent`` kernel
        and ``bias`` (``None`` without ``use_bias``). The layer scans it over the
        steps.
        """
        raise NotImplementedError

    @property
    def bias_shape(self) -> tuple[int, ...]:
        """The shape of the ``bias`` weight: ``(gates * units,)``, the gates' biases side
        by side, as Keras'.
        """
        return (self.gate_count * self.units,)

    def bias_init(self, key: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        """The initial ``bias``, from ``bias_initializer``."""
        return initializers.get(self.bias_initializer)(key, shape, dtype)

    # Keras' RNN argument: masked steps output zeros instead of the previous output.
    zero_output_for_mask: bool = layer_field(default=False, kw_only=True)
    supports_masking: ClassVar[bool] = True

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> Any:
        """As Keras' ``RNN.compute_mask``: the input mask for ``return_sequences`` outputs
        (reversed outputs of ``go_backwards`` included, as Keras), none for the states."""
        del inputs
        mask = jax.tree.leaves(mask)[0] if jax.tree.leaves(mask) else None
        output_mask = mask if self.return_sequences else None
        return [output_mask] + [None] * self.state_count if self.return_state else output_mask

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False,
                 initial_state: Any = None, mask: jax.Array | None = None) -> Any:
        if not isinstance(self.units, int) or self.units <= 0:
            raise ValueError(f"units must be a positive int. Received: units={self.units!r}")
        x = self.cast(inputs)
        if x.ndim != 3:
            raise ValueError(f"{type(self).__name__} expects inputs [batch, timesteps, "
                             f"features]. Received shape {x.shape}")
        if training and 0 < self.dropout < 1:
            # Keras' dropout: one mask per sequence, shared by all timesteps.
            keep = jax.random.bernoulli(self.make_rng("dropout"), 1 - self.dropout,
                                        (x.shape[0], 1, x.shape[2]))
            x = jnp.where(keep, x / (1 - self.dropout), 0)
        spec = _CellSpec(self.units, self.gate_count, self.state_count,
                         self.kernel_initializer, self.recurrent_initializer,
                         self.bias_shape if self.use_bias else None, self.bias_init, self.step,
                         self.compute_dtype)
        cell = _Cell(spec, name="cell")
        if initial_state is not None:
            states = [s.astype(self.compute_dtype) for s in initial_state]
            carry = tuple(states) if self.state_count == 2 else states[0]
        else:
            carry = cell.initialize_carry(jax.random.key(0), x[:, 0].shape)
        final, outputs = _scan(cell, carry, x, mask, self.go_backwards,
                               self.zero_output_for_mask)
        self._sow_penalties()
        y = self.activity(outputs if self.return_sequences else outputs[:, -1])
        if not self.return_state:
            return y
        return [y, *final] if self.state_count == 2 else [y, final]

    def _sow_penalties(self) -> None:
        weights = self.variables.get("params", {}).get("cell", {})
        for name, reg in (("kernel", self.kernel_regularizer),
                          ("recurrent_kernel", self.recurrent_regularizer),
                          ("bias", self.bias_regularizer)):
            penalty = regularizers.get(reg)
            if penalty is not None and name in weights and not self.is_initializing():
                self.sow(SOWN_LOSSES, f"{name}_regularizer", penalty(weights[name]))


_COMMON_DOC = """
    Arguments as Keras: ``units``, ``activation="tanh"``, ``use_bias=True``,
    ``kernel_initializer="glorot_uniform"``, ``recurrent_initializer="orthogonal"``,
    ``bias_initializer="zeros"``, the three weight regularizers and ``activity_regularizer``,
    ``dropout`` (one input mask per sequence), ``return_sequences``, ``return_state``,
    ``go_backwards``, ``zero_output_for_mask`` (keyword).
    ``__call__(inputs, training=False, initial_state=None, mask=None)``: ``mask`` bool
    ``[batch, timesteps]`` (from `Embedding` ``mask_zero`` or `Masking`) skips steps: a
    masked step keeps the states and repeats the previous output, as Keras.
"""


@register
class LSTM(_RNN):
    """Long short-term memory, as ``keras.layers.LSTM``.

    ``z = x @ kernel + h @ recurrent_kernel + bias``, split into ``i, f, c~, o``;
    ``c = sig(f) * c + sig(i) * tanh(c~)``, ``h = sig(o) * tanh(c)`` (``sig`` is
    ``recurrent_activation``). ``unit_forget_bias`` starts the forget bias at one.
    """

    __doc__ = (__doc__ or "") + _COMMON_DOC  # None under python -OO
    gate_count: ClassVar[int] = 4
    state_count: ClassVar[int] = 2

    units: int
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
    return_sequences: bool = False
    return_state: bool = False
    go_backwards: bool = False

    def bias_init(self, key, shape, dtype):
        """The initial ``bias`` from ``bias_initializer``, with the forget gate's set to 1
        when ``unit_forget_bias`` (as Keras').
        """
        bias = super().bias_init(key, shape, dtype)
        if self.unit_forget_bias:
            bias = bias.at[self.units:2 * self.units].set(1.0)
        return bias

    def step(self, carry, x, kernel, recurrent, bias):
        """One step of Keras' LSTM cell: the carry ``(h, c)`` (each ``[batch, units]``)
        and the step's input ``x`` to the new carry and the output ``h``; the kernels
        hold the gates in Keras' order (input, forget, cell, output).
        """
        h, c = carry
        z = x @ kernel + h @ recurrent
        if bias is not None:
            z = z + bias
        i, f, g, o = jnp.split(z, 4, axis=-1)
        gate = activations.get(self.recurrent_activation)
        act = activations.get(self.activation)
        c = gate(f) * c + gate(i) * act(g)
        h = gate(o) * act(c)
        return (h, c), h


@register
class GRU(_RNN):
    """Gated recurrent unit, as ``keras.layers.GRU`` (``reset_after=True`` by default).

    ``z, r = sig(x @ W_zr + b_zr + h @ U_zr + b'_zr)``; with ``reset_after``
    ``h~ = tanh(x @ W_h + b_h + r * (h @ U_h + b'_h))`` and ``bias [2, 3 * units]``
    (input and recurrent biases), else ``h~ = tanh(x @ W_h + b_h + (r * h) @ U_h)`` and
    ``bias [3 * units]``; ``h = z * h + (1 - z) * h~``.
    """

    __doc__ = (__doc__ or "") + _COMMON_DOC  # None under python -OO
    gate_count: ClassVar[int] = 3

    units: int
    activation: Any = "tanh"
    recurrent_activation: Any = "sigmoid"
    use_bias: bool = True
    kernel_initializer: Any = "glorot_uniform"
    recurrent_initializer: Any = "orthogonal"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    recurrent_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    dropout: float = 0.0
    return_sequences: bool = False
    return_state: bool = False
    go_backwards: bool = False
    reset_after: bool = True

    @property
    def bias_shape(self) -> tuple[int, ...]:
        """``(2, 3 * units)`` (input and recurrent biases) with ``reset_after``, else ``(3
        * units,)``, as Keras'.
        """
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def step(self, h, x, kernel, recurrent, bias):
        """One step of Keras' GRU cell: the state ``h`` ``[batch, units]`` and the step's
        input ``x`` to the new state and the output (the same); the kernels hold the
        gates in Keras' order (update, reset, candidate).
        """
        u = self.units
        input_bias, recurrent_bias = ((bias[0], bias[1]) if bias is not None and
                                      self.reset_after else (bias, None))
        xw = x @ kernel if input_bias is None else x @ kernel + input_bias
        gate = activations.get(self.recurrent_activation)
        if self.reset_after:
            hu = h @ recurrent if recurrent_bias is None else h @ recurrent + recurrent_bias
            z = gate(xw[..., :u] + hu[..., :u])
            r = gate(xw[..., u:2 * u] + hu[..., u:2 * u])
            candidate = xw[..., 2 * u:] + r * hu[..., 2 * u:]
        else:
            hu = h @ recurrent[:, :2 * u]
            z = gate(xw[..., :u] + hu[..., :u])
            r = gate(xw[..., u:2 * u] + hu[..., u:])
            candidate = xw[..., 2 * u:] + (r * h) @ recurrent[:, 2 * u:]
        h = z * h + (1 - z) * activations.get(self.activation)(candidate)
        return h, h


@register
class SimpleRNN(_RNN):
    """Fully connected recurrence ``h = tanh(x @ kernel + bias + h @ recurrent_kernel)``, as
    ``keras.layers.SimpleRNN``."""

    __doc__ = (__doc__ or "") + _COMMON_DOC  # None under python -OO
    gate_count: ClassVar[int] = 1

    units: int
    activation: Any = "tanh"
    use_bias: bool = True
    kernel_initializer: Any = "glorot_uniform"
    recurrent_initializer: Any = "orthogonal"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    recurrent_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    dropout: float = 0.0
    return_sequences: bool = False
    return_state: bool = False
    go_backwards: bool = False

    def step(self, h, x, kernel, recurrent, bias):
        """One step of Keras' SimpleRNN cell: ``h = activation(x @ kernel + h @ recurrent
        + bias)``, the new state and the output.
        """
        z = x @ kernel + h @ recurrent
        if bias is not None:
            z = z + bias
        h = activations.get(self.activation)(z)
        return h, h
