"""Weight penalties, as ``keras.regularizers``: `L1`, `L2` and `L1L2`.

A regularizer is a callable from weights (an array, or a pytree such as ``model.params``) to a
scalar penalty. Sow its value from a Flax module (``self.sow("losses", "kernel_l2",
L2(1e-4)(kernel))``) and fit adds it to the training loss once per step, as Keras adds
``model.losses``; or add it yourself in an overridden ``Model.compute_loss``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.utils import registry


def _sum_over(weights: Any, fn) -> jax.Array:
    leaves = jax.tree.leaves(weights)
    return sum((jnp.sum(fn(jnp.asarray(leaf))) for leaf in leaves), jnp.zeros((), jnp.float32))


class Regularizer:
    """Base class: ``penalty = regularizer(weights)``, a float32 scalar."""

    def __call__(self, x: Any) -> jax.Array:
        raise NotImplementedError

    def get_config(self) -> dict[str, float]:
        """The constructor arguments, JSON-able (``keras.regularizers.Regularizer``)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Regularizer:
        """Rebuilds the regularizer from `get_config`'s output."""
        return cls(**config)


@dataclasses.dataclass(frozen=True)
class L1(Regularizer):
    """``l1 * sum(|x|)`` over every leaf of ``x``, as ``keras.regularizers.L1`` (``l1=0.01``).

    Example:
        >>> float(mf.regularizers.L1(0.5)(jnp.array([1.0, -2.0])))
        1.5
    """

    l1: float = 0.01

    def __call__(self, x: Any) -> jax.Array:
        return self.l1 * _sum_over(x, jnp.abs)


@dataclasses.dataclass(frozen=True)
class L2(Regularizer):
    """``l2 * sum(x ** 2)`` over every leaf of ``x``, as ``keras.regularizers.L2`` (``l2=0.01``).

    Example:
        >>> float(mf.regularizers.L2(0.5)(jnp.array([1.0, -2.0])))
        2.5
    """

    l2: float = 0.01

    def __call__(self, x: Any) -> jax.Array:
        return self.l2 * _sum_over(x, jnp.square)


@dataclasses.dataclass(frozen=True)
class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x ** 2)``, as ``keras.regularizers.L1L2``.

    The class defaults are ``l1=0.0, l2=0.0`` as in Keras; the name ``"l1_l2"`` gives
    ``0.01`` for both, as tf.keras' ``regularizers.l1_l2()``.
    """

    l1: float = 0.0
    l2: float = 0.0

    def __call__(self, x: Any) -> jax.Array:
        return self.l1 * _sum_over(x, jnp.abs) + self.l2 * _sum_over(x, jnp.square)


REGULARIZERS = registry.Registry("regularizer", "mirrorfit.regularizers", base=(Regularizer,),
                                 default=None, expected="None, a config dict or a callable",
                                 error=ValueError, saves="names")
"""Keras' regularizer classes by name (any case), and ``"l1_l2"``: tf.keras' ``l1_l2()``,
`L1L2` with both factors 0.01."""
REGULARIZERS.register(L1)
REGULARIZERS.register(L2)
REGULARIZERS.register(L1L2)
REGULARIZERS.register(L1L2(0.01, 0.01), name="l1_l2")

get = REGULARIZERS.get
"""A regularizer from ``None``, a name, a config dict or a callable, as
``keras.regularizers.get`` (`Registry.get`): ``None`` and callables come back as they are; a
name (``"l1"``, ``"l2"``, ``"l1_l2"``, any case, or the registered name of your class) gives
the regularizer with its defaults; a config dict is rebuilt (your classes from
``mf.saving.register_serializable`` or ``custom_objects``). An unknown name, and anything
else, raise a ValueError."""

serialize = REGULARIZERS.serialize
"""A regularizer argument's JSON form, as ``keras.regularizers.serialize``: a `Regularizer`'s
config ``{"module", "class_name", "config", "registered_name"}``; ``None`` and names as they
are; anything else (a function has no config) raises a ValueError."""
