"""Weight constraints, as ``keras.constraints``: `MaxNorm`, `NonNeg`, `UnitNorm`, `MinMaxNorm`.

A constraint is a callable ``w -> w`` that projects a weight back into its allowed set. As
Keras, it runs after every optimizer update inside the compiled step, on every replica's
(identical) copy of the weight, so the replicas stay equal. The built-in layers take one per
weight (``kernel_constraint=``, ``bias_constraint=``, ...): `CONSTRAINED_WEIGHTS` maps those
arguments to the weights they constrain, and `layer_constraints` reads them from a layer.
The formulas are Keras 3's (keras/src/constraints/constraints.py), with its ``epsilon`` of
``1e-7``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.utils import registry

EPSILON = 1e-7  # keras.backend.epsilon()

CONSTRAINED_WEIGHTS = {
    "kernel_constraint": "kernel",
    "bias_constraint": "bias",
    "embeddings_constraint": "embeddings",
    "depthwise_constraint": "depthwise_kernel",
    "pointwise_constraint": "pointwise_kernel",
    "gamma_constraint": "gamma",
    "beta_constraint": "beta",
    "alpha_constraint": "alpha",
}
"""A built-in layer's constraint argument -> the name of the weight it constrains."""


def _axis(axis: Any) -> Any:
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def _norms(w: jax.Array, axis: Any) -> jax.Array:
    return jnp.sqrt(jnp.sum(jnp.square(w), axis=_axis(axis), keepdims=True))


class Constraint:
    """Base class: ``constraint(w)`` returns the projected weight (here: ``w`` unchanged).

    Subclass it and override ``__call__`` (and ``get_config`` when ``__init__`` takes
    arguments), as ``keras.constraints.Constraint``; register the class with
    ``mf.saving.register_serializable()`` to save models that use it.
    """

    def __call__(self, w: jax.Array) -> jax.Array:
        return w

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, JSON-able (a dataclass's fields; else ``{}``)."""
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Constraint:
        """Rebuilds the constraint from `get_config`'s output."""
        return cls(**config)


@dataclasses.dataclass(frozen=True)
class MaxNorm(Constraint):
    """Rescales the slices along ``axis`` whose L2 norm exceeds ``max_value`` down to it:
    ``w * clip(norm, 0, max_value) / (1e-7 + norm)``, as ``keras.constraints.MaxNorm``.

    Args:
        max_value: the largest norm allowed.
        axis: the axis (or axes) the norms are taken over: ``0`` for a Dense kernel
            ``[input_dim, units]`` (one norm per unit), ``[0, 1, 2]`` for a Conv2D kernel
            ``[rows, cols, in, filters]`` (one per filter).

    Example:
        >>> np.asarray(mf.constraints.MaxNorm(1.0)(jnp.array([[3.0, 0.3], [4.0, 0.4]]))).round(4)
        array([[0.6, 0.3],
               [0.8, 0.4]], dtype=float32)
    """

    max_value: float = 2
    axis: Any = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "axis", _axis(self.axis))

    def __call__(self, w: jax.Array) -> jax.Array:
        norms = _norms(w, self.axis)
        return w * (jnp.clip(norms, 0, self.max_value) / (EPSILON + norms))


@dataclasses.dataclass(frozen=True)
class NonNeg(Constraint):
    """``maximum(w, 0)``, as ``keras.constraints.NonNeg``."""

    def __call__(self, w: jax.Array) -> jax.Array:
        return jnp.maximum(w, 0)


@dataclasses.dataclass(frozen=True)
class UnitNorm(Constraint):
    """``w / (1e-7 + norm)``: unit L2 norm along ``axis``, as ``keras.constraints.UnitNorm``.

    Args:
        axis: the axis (or axes) the norms are taken over; see `MaxNorm`.
    """

    axis: Any = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "axis", _axis(self.axis))

    def __call__(self, w: jax.Array) -> jax.Array:
        return w / (EPSILON + _norms(w, self.axis))


@dataclasses.dataclass(frozen=True)
class MinMaxNorm(Constraint):
    """Moves the L2 norms along ``axis`` into ``[min_value, max_value]``, as
    ``keras.constraints.MinMaxNorm``: ``w * desired / (1e-7 + norm)`` with ``desired =
    rate * clip(norm, min_value, max_value) + (1 - rate) * norm``.

    Args:
        min_value: the smallest norm allowed.
        max_value: the largest norm allowed.
        rate: ``1.0`` enforces the bounds at once; less moves the norms part of the way each
            step.
        axis: the axis (or axes) the norms are taken over; see `MaxNorm`.
    """

    min_value: float = 0.0
    max_value: float = 1.0
    rate: float = 1.0
    axis: Any = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "axis", _axis(self.axis))

    def __call__(self, w: jax.Array) -> jax.Array:
        norms = _norms(w, self.axis)
        desired = (self.rate * jnp.clip(norms, self.min_value, self.max_value)
                   + (1 - self.rate) * norms)
        return w * (desired / (EPSILON + norms))


CONSTRAINTS = registry.Registry("constraint", "mirrorfit.constraints", base=(Constraint,),
                                default=None, expected="None, a config dict or a callable w -> w",
                                error=ValueError, saves="names")
"""Keras' constraint classes, by class name and Keras' snake-case aliases."""
CONSTRAINTS.register(Constraint)
CONSTRAINTS.register(MaxNorm, aliases=("max_norm",))
CONSTRAINTS.register(NonNeg, aliases=("non_neg",))
CONSTRAINTS.register(UnitNorm, aliases=("unit_norm",))
CONSTRAINTS.register(MinMaxNorm, aliases=("min_max_norm",))


get = CONSTRAINTS.get
"""A constraint from ``None``, a name, a config dict or a callable, as ``keras.constraints.get``
(`Registry.get`): ``None`` and callables come back as they are; a name (``"max_norm"``,
``"NonNeg"``, ... any case) gives the class with its defaults; a config dict is rebuilt (your
classes from ``mf.saving.register_serializable`` or ``custom_objects``). An unknown name,
and anything else, raise a ValueError."""

serialize = CONSTRAINTS.serialize
"""A constraint argument's JSON form, as ``keras.constraints.serialize``: a `Constraint`'s
config ``{"module", "class_name", "config", "registered_name"}``; ``None`` and names as they
are; anything else (a function has no config) raises a ValueError."""

deserialize = CONSTRAINTS.deserialize
"""The constraint a saved config stands for, as ``keras.constraints.deserialize``; ``None``,
names and callables as `get` takes them. An unknown class or name raises a ValueError."""


def layer_constraints(layer: Any) -> dict[str, Callable[[jax.Array], jax.Array]]:
    """``{weight name: constraint}`` from a built-in layer's constraint arguments
    (`CONSTRAINED_WEIGHTS`); ``{}`` for a layer without any."""
    found = {}
    for argument, weight in CONSTRAINED_WEIGHTS.items():
        constraint = get(getattr(layer, argument, None))
        if constraint is not None:
            found[weight] = constraint
    return found
