"""Weight and activity penalties, as ``keras.regularizers`` (L1, L2, L1L2).

Layers ``sow`` each penalty into the ``"losses"`` collection; the training loss adds their sum,
as Keras adds ``model.losses``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp


class Regularizer:
    """Base class: ``penalty = regularizer(weights)``, a scalar."""

    def __call__(self, x: jax.Array) -> jax.Array:
        raise NotImplementedError

    def get_config(self) -> dict[str, float]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclasses.dataclass(frozen=True)
class L1(Regularizer):
    """``l1 * sum(|x|)``, as ``keras.regularizers.L1`` (default ``l1=0.01``)."""

    l1: float = 0.01

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l1 * jnp.sum(jnp.abs(x))


@dataclasses.dataclass(frozen=True)
class L2(Regularizer):
    """``l2 * sum(x**2)``, as ``keras.regularizers.L2`` (default ``l2=0.01``)."""

    l2: float = 0.01

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2 * jnp.sum(jnp.square(x))


@dataclasses.dataclass(frozen=True)
class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x**2)``, as ``keras.regularizers.L1L2``.

    The class defaults are ``l1=0.0, l2=0.0`` as in Keras; the string ``"l1_l2"`` gives
    ``0.01`` for both, as Keras' ``regularizers.get("l1_l2")``.
    """

    l1: float = 0.0
    l2: float = 0.0

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l1 * jnp.sum(jnp.abs(x)) + self.l2 * jnp.sum(jnp.square(x))


_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(0.01, 0.01)}
_CLASSES = {"L1": L1, "L2": L2, "L1L2": L1L2}


def get(identifier: Any) -> Regularizer | None:
    """A regularizer from ``None``, a Keras name, a config dict or an instance/callable.

    Raises:
        ValueError: an unknown name or config.
    """
    if identifier is None or callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    if isinstance(identifier, dict) and identifier.get("class_name") in _CLASSES:
        return _CLASSES[identifier["class_name"]](**identifier.get("config", {}))
    raise ValueError(f"regularizer must be None, one of {sorted(_BY_NAME)}, a config dict "
                     f"or a callable. Received: regularizer={identifier!r}")


def serialize(regularizer: Any) -> Any:
    """JSON form of a regularizer argument.

    Raises:
        ValueError: a callable that is not one of this module's classes.
    """
    if regularizer is None or isinstance(regularizer, str):
        return regularizer
    if type(regularizer).__name__ in _CLASSES:
        return {"class_name": type(regularizer).__name__, "config": regularizer.get_config()}
    raise ValueError("Only L1, L2 and L1L2 regularizers (or their names) can be saved in a "
                     f"config. Received: regularizer={regularizer!r}")
