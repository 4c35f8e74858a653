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
    ``0.01`` for both, as Keras' ``regularizers.get("l1_l2")``.
    """

    l1: float = 0.0
    l2: float = 0.0

    def __call__(self, x: Any) -> jax.Array:
        return self.l1 * _sum_over(x, jnp.abs) + self.l2 * _sum_over(x, jnp.square)


_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(0.01, 0.01)}
_CLASSES = {"L1": L1, "L2": L2, "L1L2": L1L2}


def get(identifier: Any) -> Any:
    """A regularizer from ``None``, a Keras name, a `serialize` dict or a callable.

    Raises:
        ValueError: for an unknown name or config.
    """
    if identifier is None or callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    if isinstance(identifier, dict) and identifier.get("class_name") in _CLASSES:
        return _CLASSES[identifier["class_name"]].from_config(identifier.get("config", {}))
    raise ValueError(f"regularizer must be None, one of {sorted(_BY_NAME)}, a config dict "
                     f"or a callable. Received: regularizer={identifier!r}")


def serialize(regularizer: Any) -> Any:
    """``{"class_name": ..., "config": ...}`` for a regularizer (names and None pass through).

    Raises:
        ValueError: for a callable that is not `L1`, `L2` or `L1L2`.
    """
    if regularizer is None or isinstance(regularizer, str):
        return regularizer
    if type(regularizer).__name__ in _CLASSES:
        return {"class_name": type(regularizer).__name__, "config": regularizer.get_config()}
    raise ValueError("Only L1, L2 and L1L2 regularizers (or their names) can be saved in a "
                     f"config. Received: regularizer={regularizer!r}")
