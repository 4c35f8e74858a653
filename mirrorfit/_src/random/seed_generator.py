"""Where ``mf.random``'s draws get their keys: Keras' ``seed=`` (an int, ``None`` or a
`SeedGenerator`) resolved to a ``jax.random`` key, and `set_random_seed`.

- An int seed gives the same key every time: ``[seed, 0]`` (uint32), Keras' JAX backend's
  key, so a draw with ``seed=42`` equals Keras' on JAX.
- ``None`` and a `SeedGenerator` take the next key of the call context
  (`mirrorfit._src.variables.call_context.next_rng`): inside a compiled step, the step's
  per-replica key folded with a per-draw counter, so draws differ between draws, steps and
  replicas; outside any forward pass, the process-wide stream that `set_random_seed`
  restarts. The replica's index in ``strategy.run`` is folded in as well, so replicas
  differ there too. A `SeedGenerator` folds in its own seed, so two generators differ.
- A ``jax.random`` key passes through, as in Keras' JAX backend.

Unlike Keras, a `SeedGenerator` holds no state variable (Keras' ``[seed, counter]``, which
each draw increments and which is saved with the layer): it is a seed folded into the
keys of the call context, and nothing of it is saved. So its draws are reproducible through
`set_random_seed` and the training state's key, not through its own seed alone.
"""

from __future__ import annotations

import random as python_random
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.distribute.replica_context import get_replica_context
from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import call_context

_UINT32 = 0xFFFFFFFF


class SeedGenerator:
    """A source of different keys for repeated draws, as ``keras.random.SeedGenerator``.

    Pass it as the ``seed`` of ``mf.random`` draws (usually held by a layer as
    ``self.seed_generator``): every draw gets a new key. The keys come from the current
    forward pass (in ``fit``: per step and per replica) with ``seed`` folded in; see the
    module docstring for how this differs from Keras' stateful generator.

    Args:
        seed: an int folded into every key (``None``: nothing folded in).
        name: the generator's name (default ``"seed_generator"``).

    Raises:
        ValueError: ``seed`` is not an int or ``None``, or an unknown keyword argument.

    Example:
        >>> gen = mf.random.SeedGenerator(seed=42)
        >>> a = mf.random.normal((2,), seed=gen)
        >>> b = mf.random.normal((2,), seed=gen)
        >>> bool(jnp.all(a == b))
        False
    """

    def __init__(self, seed: int | None = None, name: str | None = None, **kwargs: Any):
        if kwargs:
            raise ValueError(f"Unrecognized keyword arguments: {kwargs}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"Argument `seed` must be an integer. Received: seed={seed!r}")
        self.seed = seed
        self.name = name or snake_case(type(self).__name__)

    def next(self, ordered: bool = True) -> jax.Array:
        """The next key: the call context's next key, with ``seed`` folded in.

        Args:
            ordered: accepted for Keras' signature; every key is new either way.
        """
        del ordered
        key = _context_key()
        return key if self.seed is None else jax.random.fold_in(key, self.seed & _UINT32)

    def get_config(self) -> dict[str, Any]:
        """``{"seed": ..., "name": ...}``, as Keras."""
        return {"seed": self.seed, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SeedGenerator:
        """The generator of `get_config`'s output."""
        return cls(**config)

    def __repr__(self) -> str:
        return f"<SeedGenerator name={self.name}, seed={self.seed}>"


def draw_seed(seed: Any) -> jax.Array:
    """The ``jax.random`` key for Keras' ``seed=`` argument (see the module docstring).

    Raises:
        ValueError: ``seed`` is none of an int, ``None``, a `SeedGenerator` or a key.
    """
    if isinstance(seed, SeedGenerator):
        return seed.next()
    if seed is None:
        return _context_key()
    if isinstance(seed, int) and not isinstance(seed, bool):
        return jnp.array([seed & _UINT32, 0], dtype=jnp.uint32)
    if isinstance(seed, jax.Array):
        return seed
    raise ValueError("Argument `seed` must be either an integer or an instance of "
                     f"`SeedGenerator` (or a jax.random key). Received: seed={seed!r} (of "
                     f"type {type(seed).__name__})")


def _context_key() -> jax.Array:
    replica = get_replica_context().replica_id_in_sync_group
    return jax.random.fold_in(call_context.next_rng(), replica)


def set_random_seed(seed: int) -> None:
    """Seeds every source of randomness, as ``keras.utils.set_random_seed``.

    Restarts mirrorfit's process-wide key stream at ``seed`` (the keys of ``mf.random``
    draws with ``seed=None`` or a `SeedGenerator` outside a forward pass, and of weights
    built outside a model's own seed), and seeds Python's ``random`` and NumPy's global
    generator. Inside ``fit``'s steps the keys come from the training state's key instead.

    Args:
        seed: an int.

    Raises:
        ValueError: ``seed`` is not an int.

    Example:
        >>> mf.utils.set_random_seed(7)
        >>> a = mf.random.uniform((3,))
        >>> mf.utils.set_random_seed(7)
        >>> bool(jnp.all(a == mf.random.uniform((3,))))
        True
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError("Expected `seed` argument to be an integer. "
                         f"Received: seed={seed!r} (of type {type(seed).__name__})")
    call_context.restart_stream(seed)
    python_random.seed(seed)
    np.random.seed(seed)
