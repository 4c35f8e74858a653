"""Keras activation functions by name (as ``keras.activations.get``), on ``jax.nn``, in the
registry `ACTIVATIONS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.utils import registry

Activation = Callable[[jax.Array], jax.Array]


def _linear(x: jax.Array) -> jax.Array:
    return x


def _hard_sigmoid(x: jax.Array) -> jax.Array:
    # keras.activations.hard_sigmoid: relu6(x + 3) / 6.
    return jax.nn.relu6(x + 3.0) / 6.0


ACTIVATIONS = registry.Registry("activation")
"""Keras 3's activation names and default arguments (keras/src/activations/activations.py)
-> functions; saved by name."""

for _name, _fn in {
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
}.items():
    ACTIVATIONS.register(_fn, name=_name)


def get(identifier: str | Activation | None) -> Activation:
    """The activation function for a name, a callable, or ``None`` (linear).

    Args:
        identifier: ``None``, a callable (returned as is) or a name: Keras' (any case), or
            one of your functions registered with ``mf.saving.register_serializable`` or
            given in ``custom_objects`` (within ``mf.saving.custom_object_scope``).

    Raises:
        ValueError: ``identifier`` is a string that names no activation.
        TypeError: ``identifier`` is neither a string, a callable nor ``None``.
    """
    if identifier is None:
        return _linear
    if isinstance(identifier, str):
        found = ACTIVATIONS.get(identifier)
        if found is None:
            raise ValueError(
                f"activation must be one of Keras' names {ACTIVATIONS.names()} or a callable; "
                "to use a function of yours by name, register it with "
                "@mf.saving.register_serializable() or, when loading, pass it in "
                f"custom_objects. Received: activation={identifier!r}")
        return found
    if callable(identifier):
        return identifier
    raise TypeError("activation must be a Keras activation name, a callable or None. "
                    f"Received: activation={identifier!r}")


def serialize(identifier: str | Callable[..., Any] | None) -> Any:
    """JSON form of an activation argument: its name (Keras' or its
    ``register_serializable`` name; other callables by ``__name__``).

    Raises:
        ValueError: a callable that is not a Keras activation and has no usable name.
    """
    if identifier is None or isinstance(identifier, str):
        return identifier
    name = ACTIVATIONS.name_of(identifier)
    if name is not None:
        return name
    name = getattr(identifier, "__name__", None)
    if not name or name == "<lambda>" or ACTIVATIONS.built_in(name) is not None:
        raise ValueError(
            "A custom activation callable can only be saved by name: pass a named function, "
            "and register it with @mf.saving.register_serializable() or give it to "
            f"custom_objects when loading. Received: activation={identifier!r}")
    return name


def deserialize(name: str) -> str | Activation:
    """A saved activation name as a layer argument: Keras' names stay names, and other
    names become the function `get` finds (yours, registered or in ``custom_objects``).

    Raises:
        ValueError: ``name`` names no activation.
    """
    return name if ACTIVATIONS.built_in(name) is not None else get(name)
