"""Keras initializer names (as ``keras.initializers.get``) mapped to ``jax.nn.initializers``.

Fans follow Keras' ``compute_fans``: the last axis is fan-out, the one before fan-in, and the
others multiply both (a receptive field), which is Flax's ``in_axis=-2, out_axis=-1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

Initializer = Callable[..., jax.Array]

_INITIALIZERS: dict[str, Initializer] = {
    "glorot_uniform": jax.nn.initializers.glorot_uniform(),
    "glorot_normal": jax.nn.initializers.glorot_normal(),
    "he_uniform": jax.nn.initializers.he_uniform(),
    "he_normal": jax.nn.initializers.he_normal(),
    "lecun_uniform": jax.nn.initializers.lecun_uniform(),
    "lecun_normal": jax.nn.initializers.lecun_normal(),
    "orthogonal": jax.nn.initializers.orthogonal(),
    "zeros": jax.nn.initializers.zeros,
    "ones": jax.nn.initializers.ones,
    # keras.initializers.RandomUniform/RandomNormal/TruncatedNormal defaults.
    "uniform": lambda key, shape, dtype=float: jax.random.uniform(
        key, shape, dtype, minval=-0.05, maxval=0.05),
    "random_uniform": lambda key, shape, dtype=float: jax.random.uniform(
        key, shape, dtype, minval=-0.05, maxval=0.05),
    "random_normal": jax.nn.initializers.normal(0.05),
    "truncated_normal": jax.nn.initializers.truncated_normal(0.05),
}


def get(identifier: str | Initializer) -> Initializer:
    """The initializer for a Keras name or a ``(key, shape, dtype) -> array`` callable.

    Raises:
        ValueError: ``identifier`` names no Keras initializer.
    """
    if callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _INITIALIZERS:
        return _INITIALIZERS[identifier]
    raise ValueError(f"initializer must be one of {sorted(_INITIALIZERS)} or a callable "
                     f"(key, shape, dtype). Received: initializer={identifier!r}")


def serialize(identifier: Any) -> Any:
    """JSON form of an initializer argument (Keras names only).

    Raises:
        ValueError: a callable initializer, which has no JSON form.
    """
    if isinstance(identifier, str):
        return identifier
    raise ValueError("Only initializers given by Keras name can be saved in a config. "
                     f"Received: initializer={identifier!r}")
