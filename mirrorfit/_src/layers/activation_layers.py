"""Activation layers: ReLU, LeakyReLU, PReLU, ELU, Softmax (as ``keras.layers``).

Formulas as Keras 3's (``keras/src/layers/activations/`` and ``keras.activations.relu``);
any shape in and out.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, layer_field, register


def _non_negative(layer: str, name: str, value: Any) -> None:
    if value is None or value < 0:
        raise ValueError(f"{name} of a {layer} layer must be a non-negative float. "
                         f"Received: {name}={value!r}")


@register
class ReLU(FlaxLayer):
    """Rectified linear unit with Keras' options, as ``keras.layers.ReLU``:

    ``min(x, max_value)`` for ``x > threshold``, ``negative_slope * (x - threshold)``
    otherwise (``max_value=None``: no upper clip).
    """

    max_value: float | None = None
    negative_slope: float = 0.0
    threshold: float = 0.0

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        if self.max_value is not None and self.max_value < 0:
            raise ValueError("max_value of a ReLU layer must be None or non-negative. "
                             f"Received: max_value={self.max_value!r}")
        _non_negative("ReLU", "negative_slope", self.negative_slope)
        _non_negative("ReLU", "threshold", self.threshold)
        x = self.cast(inputs)
        # keras.activations.ReLU.static_call, step by step.
        if self.negative_slope != 0 and self.max_value is None and self.threshold == 0:
            return jax.nn.leaky_relu(x, self.negative_slope)
        negative_part = jax.nn.relu(self.threshold - x)
        y = jnp.where(x > self.threshold, x, 0) if self.threshold != 0 else jax.nn.relu(x)
        if self.max_value is not None:
            y = jnp.clip(y, 0, self.max_value)
        if self.negative_slope != 0:
            y = y - self.negative_slope * negative_part
        return y


@register
class LeakyReLU(FlaxLayer):
    """``x`` for ``x >= 0``, ``negative_slope * x`` otherwise, as ``keras.layers.LeakyReLU``
    (default slope 0.3). tf.keras 2's ``alpha=`` is accepted for ``negative_slope``."""

    negative_slope: float = 0.3
    alpha: float | None = layer_field(default=None, kw_only=True)  # tf.keras 2's name

    @property
    def slope(self) -> float:
        """The slope for ``x < 0``: ``alpha`` when given (tf.keras 2's name), else
        ``negative_slope``.
        """
        return self.negative_slope if self.alpha is None else self.alpha

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _non_negative("LeakyReLU", "negative_slope", self.slope)
        return jax.nn.leaky_relu(self.cast(inputs), self.slope)

    def get_config(self) -> dict[str, Any]:
        """Keras' config, with the slope under ``negative_slope`` (``alpha`` folded in)."""
        config = super().get_config()
        config["negative_slope"] = self.slope
        del config["alpha"]
        return config


@register
class PReLU(FlaxLayer):
    """Parametric ReLU ``relu(x) - alpha * relu(-x)``, as ``keras.layers.PReLU``.

    Weight ``alpha``: the input shape without the batch axis, with the (1-based)
    ``shared_axes`` set to 1 (zeros). ``alpha_constraint`` (`mirrorfit.constraints`)
    projects it after every optimizer update.
    """

    alpha_initializer: Any = "zeros"
    alpha_regularizer: Any = None
    alpha_constraint: Any = None
    shared_axes: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        shape = list(x.shape[1:])
        shared = self.shared_axes
        for axis in [] if shared is None else [shared] if isinstance(shared, int) else shared:
            shape[axis - 1] = 1
        alpha = self.weight("alpha", self.alpha_initializer, tuple(shape),
                            self.alpha_regularizer)
        return jax.nn.relu(x) - alpha * jax.nn.relu(-x)


@register
class ELU(FlaxLayer):
    """``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise, as ``keras.layers.ELU``."""

    alpha: float = 1.0

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        return jax.nn.elu(self.cast(inputs), self.alpha)


@register
class Softmax(FlaxLayer):
    """Softmax over ``axis`` (an int or a tuple of axes), as ``keras.layers.Softmax``.

    ``mask`` (broadcastable to the inputs; true or > 0.5 = keep) gives masked positions a
    logit of -1e9 (-3e4 in float16) and an output of 0, as Keras.
    """

    axis: Any = -1

    def __call__(self, inputs: jax.Array, mask: jax.Array | None = None,
                 training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        if mask is not None:
            mask = jnp.asarray(mask)
            if mask.dtype != jnp.bool_:
                mask = mask > 0.5
            x = jnp.where(mask, x, -3e4 if x.dtype == jnp.float16 else -1e9)
        axis = tuple(self.axis) if isinstance(self.axis, (list, tuple)) else self.axis
        y = jax.nn.softmax(x, axis=axis)
        return y if mask is None else jnp.where(mask, y, 0)
