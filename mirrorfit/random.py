"""Keras 3's ``keras.random``: ``keras.random.normal(shape, seed=...)`` becomes
``mf.random.normal(shape, seed=...)``.

Draws on ``jax.random``, as Keras' JAX backend computes them. ``seed=`` is Keras': an int
(the same values on every call, equal to Keras' on JAX), ``None`` or a `SeedGenerator`
(new values on every draw), or a ``jax.random`` key.

With ``None`` or a `SeedGenerator`, the key comes from the current forward pass: inside
``fit``'s training step, the step's key for this replica, folded with a counter per draw,
so draws differ between draws, steps and replicas, as a Keras layer's
``self.seed_generator`` does. Outside a forward pass the key comes from a process-wide
stream that `mirrorfit.utils.set_random_seed` restarts; inside ``strategy.run`` the replica's
index is folded in, so replicas differ.

Differences from Keras:

- A `SeedGenerator` holds no state variable. Keras' holds ``[seed, counter]`` as a
  non-trainable variable that every draw increments (so a compiled step returns it updated)
  and that is saved with the layer. mirrorfit's folds its seed into the forward pass's key:
  two generators differ, draws repeat for the same training step's key, and nothing is
  saved.
- Inside ``strategy.run`` the key comes from the call: each call passes a new one (numbered
  per strategy, seeded by `mirrorfit.utils.set_random_seed`), folded with the replica index.
- ``shuffle`` moves whole slices along ``axis`` (rows stay rows), as TensorFlow and Keras'
  other backends; Keras' JAX backend shuffles each slice on its own.

Example:
    >>> x = mf.random.normal((2, 3), seed=42)
    >>> bool(jnp.all(x == mf.random.normal((2, 3), seed=42)))
    True
    >>> gen = mf.random.SeedGenerator(1337)
    >>> mf.random.dropout(jnp.ones((4, 4)), rate=0.5, seed=gen).shape
    (4, 4)
"""

from mirrorfit._src.random.random import beta as beta
from mirrorfit._src.random.random import binomial as binomial
from mirrorfit._src.random.random import categorical as categorical
from mirrorfit._src.random.random import dropout as dropout
from mirrorfit._src.random.random import gamma as gamma
from mirrorfit._src.random.random import normal as normal
from mirrorfit._src.random.random import randint as randint
from mirrorfit._src.random.random import shuffle as shuffle
from mirrorfit._src.random.random import truncated_normal as truncated_normal
from mirrorfit._src.random.random import uniform as uniform
from mirrorfit._src.random.seed_generator import SeedGenerator as SeedGenerator

__all__ = [
    "SeedGenerator",
    "beta",
    "binomial",
    "categorical",
    "dropout",
    "gamma",
    "normal",
    "randint",
    "shuffle",
    "truncated_normal",
    "uniform",
]
