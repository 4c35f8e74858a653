"""Keras activation functions by name (as ``keras.activations.get``), on ``jax.nn``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Activation = Callable[[jax.Array], jax.Array]


def _linear(x: jax.Array) -> jax.Array:
    return x


def _hard_sigmoid(x: jax.Array) -> jax.Array:
    # keras.activations.hard_sigmoid: relu6(x + 3) / 6.
    return jax.nn.relu6(x + 3.0) / 6.0


# Keras 3's names and default arguments (keras/src/activations/activations.py).
_ACTIVATIONS: dict[str, Activation] = {
    "linear": _linear,
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "leaky_relu": lambda x: jax.nn.leaky_relu(x, negative_slope=0.2),
    "elu": jax.nn.elu,
    "selu": jax.nn.selu,
    "celu": jax.nn.celu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "sigmoid": jax.nn.sigmoid,
    "hard_sigmoid": _hard_sigmoid,
    "hard_silu": jax.nn.hard_silu,
    "hard_swish": jax.nn.hard_silu,
    "log_sigmoid": jax.nn.log_sigmoid,
    "tanh": jnp.tanh,
    "softmax": jax.nn.softmax,
    "log_softmax": jax.nn.log_softmax,
    "softplus": jax.nn.softplus,
    "softsign": jax.nn.soft_sign,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "exponential": jnp.exp,
}


def get(identifier: str | Activation | None) -> Activation:
    """The activation function for a Keras name, a callable, or ``None`` (linear).

    Raises:
        ValueError: ``identifier`` is a string that is not a Keras activation name.
        TypeError: ``identifier`` is neither a string, a callable nor ``None``.
    """
    if identifier is None:
        return _linear
    if isinstance(identifier, str):
        if identifier not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of Keras' names {sorted(_ACTIVATIONS)} or a callable; "
                f"register a custom one with a callable. Received: activation={identifier!r}")
        return _ACTIVATIONS[identifier]
    if callable(identifier):
        return identifier
    raise TypeError("activation must be a Keras activation name, a callable or None. "
                    f"Received: activation={identifier!r}")


def serialize(identifier: str | Callable[..., Any] | None) -> Any:
    """JSON form of an activation argument: its name (callables by ``__name__``).

    Raises:
        ValueError: a callable that is not a Keras activation and has no usable name.
    """
    if identifier is None or isinstance(identifier, str):
        return identifier
    for name, fn in _ACTIVATIONS.items():
        if fn is identifier:
            return name
    name = getattr(identifier, "__name__", None)
    if name in _ACTIVATIONS or not name or name == "<lambda>":
        raise ValueError(
            "A custom activation callable can only be saved by name: pass a named function "
            "and give it to custom_objects when loading. Received: activation="
            f"{identifier!r}")
    return name
