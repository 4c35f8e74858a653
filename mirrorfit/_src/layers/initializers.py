"""Keras initializer names (as ``keras.initializers.get``) mapped to ``jax.nn.initializers``,
in the registry `INITIALIZERS`.

Fans follow Keras' ``compute_fans``: the last axis is fan-out, the one before fan-in, and the
others multiply both (a receptive field), which is Flax's ``in_axis=-2, out_axis=-1``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.utils import registry
from mirrorfit._src.variables import call_context

Initializer = Callable[..., jax.Array]

INITIALIZERS = registry.Registry("initializer")
"""Keras' initializer names -> ``(key, shape, dtype) -> array`` functions; saved by name."""

for _name, _fn in {
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
}.items():
    INITIALIZERS.register(_fn, name=_name)


def get(identifier: str | Initializer) -> Initializer:
    """The initializer for a Keras name or a ``(key, shape, dtype) -> array`` callable.

    Args:
        identifier: a callable (returned as is) or a name: Keras' (any case), or one of
            your functions registered with ``mf.saving.register_serializable`` or given in
            ``custom_objects`` (within ``mf.saving.custom_object_scope``).

    Raises:
        ValueError: ``identifier`` names no initializer.
    """
    if callable(identifier):
        return identifier
    found = INITIALIZERS.get(identifier) if isinstance(identifier, str) else None
    if found is None:
        raise ValueError(f"initializer must be one of {INITIALIZERS.names()} or a callable "
                         "(key, shape, dtype); to use a function of yours by name, register "
                         "it with @mf.saving.register_serializable() or, when loading, pass "
                         f"it in custom_objects. Received: initializer={identifier!r}")
    return found


def variable_initializer(identifier: Any, dtype: Any) -> Callable[[Any, Any], jax.Array]:
    """``(shape, dtype) -> array`` for ``Layer.add_weight(initializer=identifier)``.

    Keras' initializers are ``(shape, dtype)``; these names (and ``jax.nn`` initializers)
    take a key first: a name, or a callable whose first parameter is ``key``, gets the next
    key of the init stream (`call_context.init_rng`). ``None`` is Keras' default:
    ``"glorot_uniform"`` for a floating ``dtype``, ``"zeros"`` otherwise.

    Raises:
        ValueError: ``identifier`` names no initializer.
    """
    if identifier is None:
        identifier = "glorot_uniform" if jnp.issubdtype(dtype, jnp.floating) else "zeros"
    fn = get(identifier)
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        first = None
    if isinstance(identifier, str) or first in ("key", "rng", "prng_key"):
        key = call_context.init_rng()
        return lambda shape, dtype: fn(key, shape, dtype)
    return fn


def serialize(identifier: Any) -> Any:
    """JSON form of an initializer argument: a name (Keras', or the registered name of a
    function registered with ``mf.saving.register_serializable``).

    Raises:
        ValueError: a callable that is neither Keras' nor registered, which has no JSON form.
    """
    if isinstance(identifier, str):
        return identifier
    name = INITIALIZERS.name_of(identifier)
    if name is None:
        raise ValueError("Only initializers given by Keras name, or functions registered "
                         "with mf.saving.register_serializable, can be saved in a config. "
                         f"Received: initializer={identifier!r}")
    return name


def deserialize(name: str) -> str | Initializer:
    """A saved initializer name as a layer argument: Keras' names stay names, and other
    names become the function `get` finds (yours, registered or in ``custom_objects``).

    Raises:
        ValueError: ``name`` names no initializer.
    """
    return name if INITIALIZERS.built_in(name) is not None else get(name)
