"""Keras' initializers (as ``keras.initializers``): the classes (`GlorotUniform`, `HeNormal`,
`Constant`, ...) and Keras' names (as ``keras.initializers.get``) mapped to
``jax.nn.initializers``, all in the registry `INITIALIZERS`.

An initializer here is a ``(key, shape, dtype) -> array`` callable, as ``jax.nn.initializers``
(Keras' take ``(shape, dtype)`` and hold a seed): the layer passes the next key of its init
stream. A class given a ``seed`` uses ``jax.random.PRNGKey(seed)`` instead, so it draws the
same values every call, as a seeded Keras initializer.

Fans follow Keras' ``compute_fans``: the last axis is fan-out, the one before fan-in, and the
others multiply both (a receptive field), which is Flax's ``in_axis=-2, out_axis=-1``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from mirrorfit._src.utils import registry
from mirrorfit._src.variables import call_context

InitFn = Callable[..., jax.Array]  # (key, shape, dtype) -> array


@dataclasses.dataclass(frozen=True)
class Initializer:
    """Base class: ``initializer(key, shape, dtype=float32)`` -> an array of ``shape``, as
    ``keras.initializers.Initializer`` (whose ``__call__`` takes no key).

    Subclass it, override ``__call__``, and register the class with
    ``mf.saving.register_serializable()`` to save models that use it.
    """

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, JSON-able (the dataclass fields)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Initializer:
        """Rebuilds the initializer from `get_config`'s output."""
        return cls(**config)


@dataclasses.dataclass(frozen=True)
class Constant(Initializer):
    """Every entry ``value``, as ``keras.initializers.Constant``.

    Example:
        >>> mf.initializers.Constant(0.5)(jax.random.PRNGKey(0), (2,))
        Array([0.5, 0.5], dtype=float32)
    """

    value: float = 0.0

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return jnp.full(shape, self.value, dtype)


@dataclasses.dataclass(frozen=True)
class Zeros(Initializer):
    """All zeros, as ``keras.initializers.Zeros``."""

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return jnp.zeros(shape, dtype)


@dataclasses.dataclass(frozen=True)
class Ones(Initializer):
    """All ones, as ``keras.initializers.Ones``."""

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return jnp.ones(shape, dtype)


@dataclasses.dataclass(frozen=True)
class Identity(Initializer):
    """``gain`` times the identity matrix, for a 2-D ``shape``, as
    ``keras.initializers.Identity``.

    Raises:
        ValueError: at the call, for a shape that is not 2-D.
    """

    gain: float = 1.0

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        if len(shape) != 2:
            raise ValueError("Identity initializes 2-D weights only ([rows, cols]). "
                             f"Received: shape={tuple(shape)}")
        return self.gain * jnp.eye(*shape, dtype=dtype)


@dataclasses.dataclass(frozen=True)
class _Seeded(Initializer):
    seed: int | None = dataclasses.field(default=None, kw_only=True)

    def key(self, key: jax.Array) -> jax.Array:
        """The stream's ``key``, or ``PRNGKey(seed)`` for a seeded initializer."""
        return key if self.seed is None else jax.random.PRNGKey(self.seed)


@dataclasses.dataclass(frozen=True)
class RandomNormal(_Seeded):
    """``N(mean, stddev ** 2)``, as ``keras.initializers.RandomNormal``."""

    mean: float = 0.0
    stddev: float = 0.05

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return self.mean + self.stddev * jax.random.normal(self.key(key), shape, dtype)


@dataclasses.dataclass(frozen=True)
class RandomUniform(_Seeded):
    """``U(minval, maxval)``, as ``keras.initializers.RandomUniform``."""

    minval: float = -0.05
    maxval: float = 0.05

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(self.key(key), shape, dtype, self.minval, self.maxval)


@dataclasses.dataclass(frozen=True)
class TruncatedNormal(_Seeded):
    """``N(mean, stddev ** 2)`` redrawn beyond two ``stddev`` of the mean, as
    ``keras.initializers.TruncatedNormal``."""

    mean: float = 0.0
    stddev: float = 0.05

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        draw = jax.random.truncated_normal(self.key(key), -2.0, 2.0, shape, dtype)
        return self.mean + self.stddev * draw


_DISTRIBUTIONS: dict[str, Any] = {  # Keras' names -> jax.nn.initializers'
    "truncated_normal": "truncated_normal", "untruncated_normal": "normal", "uniform": "uniform"}


@dataclasses.dataclass(frozen=True)
class VarianceScaling(_Seeded):
    """Variance ``scale / n`` (``n``: fan-in, fan-out or their mean, by ``mode``), drawn
    from ``distribution``, as ``keras.initializers.VarianceScaling``.

    Raises:
        ValueError: at the call, for an unknown ``mode`` or ``distribution``.
    """

    scale: float = 1.0
    mode: str = "fan_in"
    distribution: str = "truncated_normal"

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        if self.mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError("mode must be 'fan_in', 'fan_out' or 'fan_avg'. "
                             f"Received: mode={self.mode!r}")
        if self.distribution not in _DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {sorted(_DISTRIBUTIONS)}. "
                             f"Received: distribution={self.distribution!r}")
        fn = variance_scaling(self.scale, self.mode, _DISTRIBUTIONS[self.distribution])
        return fn(self.key(key), shape, dtype)


def variance_scaling(scale: float, mode: str, distribution: str) -> InitFn:
    """``jax.nn.initializers.variance_scaling`` with Keras' fans for shapes of rank below 2
    too (``compute_fans``: both fans are a 1-D shape's size, 1 for a scalar), so that
    ``add_weight(shape=(n,))`` takes Keras' default ``"glorot_uniform"`` as Keras does."""
    full = jax.nn.initializers.variance_scaling(scale, mode, distribution)  # type: ignore[arg-type]

    def init(key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        shape = tuple(shape)
        if len(shape) >= 2:
            return full(key, shape, dtype)
        n = shape[0] if shape else 1
        # Both axes 0 make jax's fans 1, so the variance is scale / n, Keras' for both fans n.
        flat = jax.nn.initializers.variance_scaling(scale / n, mode, distribution,  # type: ignore[arg-type]
                                                    in_axis=0, out_axis=0)
        return flat(key, (n,), dtype).reshape(shape)
    return init


@dataclasses.dataclass(frozen=True)
class _Scaled(_Seeded):
    """A `VarianceScaling` with Keras' fixed arguments; its config is the seed only."""

    scaling: ClassVar[tuple[float, str, str]]

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return VarianceScaling(*self.scaling, seed=self.seed)(key, shape, dtype)


@dataclasses.dataclass(frozen=True)
class GlorotUniform(_Scaled):
    """``U(-limit, limit)``, ``limit = sqrt(6 / (fan_in + fan_out))``, as
    ``keras.initializers.GlorotUniform``."""

    scaling: ClassVar[tuple[float, str, str]] = (1.0, "fan_avg", "uniform")


@dataclasses.dataclass(frozen=True)
class GlorotNormal(_Scaled):
    """Truncated normal, ``stddev = sqrt(2 / (fan_in + fan_out))``, as
    ``keras.initializers.GlorotNormal``."""

    scaling: ClassVar[tuple[float, str, str]] = (1.0, "fan_avg", "truncated_normal")


@dataclasses.dataclass(frozen=True)
class HeUniform(_Scaled):
    """``U(-limit, limit)``, ``limit = sqrt(6 / fan_in)``, as ``keras.initializers.HeUniform``."""

    scaling: ClassVar[tuple[float, str, str]] = (2.0, "fan_in", "uniform")


@dataclasses.dataclass(frozen=True)
class HeNormal(_Scaled):
    """Truncated normal, ``stddev = sqrt(2 / fan_in)``, as ``keras.initializers.HeNormal``."""

    scaling: ClassVar[tuple[float, str, str]] = (2.0, "fan_in", "truncated_normal")


@dataclasses.dataclass(frozen=True)
class LecunUniform(_Scaled):
    """``U(-limit, limit)``, ``limit = sqrt(3 / fan_in)``, as
    ``keras.initializers.LecunUniform``."""

    scaling: ClassVar[tuple[float, str, str]] = (1.0, "fan_in", "uniform")


@dataclasses.dataclass(frozen=True)
class LecunNormal(_Scaled):
    """Truncated normal, ``stddev = sqrt(1 / fan_in)``, as ``keras.initializers.LecunNormal``."""

    scaling: ClassVar[tuple[float, str, str]] = (1.0, "fan_in", "truncated_normal")


@dataclasses.dataclass(frozen=True)
class Orthogonal(_Seeded):
    """An orthogonal matrix (of the last axis against the others) times ``gain``, as
    ``keras.initializers.Orthogonal``, on ``jax.nn.initializers.orthogonal``."""

    gain: float = 1.0

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return jax.nn.initializers.orthogonal(self.gain)(self.key(key), shape, dtype)


INITIALIZERS = registry.Registry("initializer", "mirrorfit.initializers", base=(Initializer,),
                                 expected="a config dict or a callable (key, shape, dtype)",
                                 error=ValueError, saves="functions")
"""Keras' initializer classes, then Keras' snake-case names -> ``(key, shape, dtype) ->
array`` functions (which win a lookup that ignores case: ``"zeros"`` is the function); a
name is saved as a name, a class instance as its config."""

for _cls, _aliases in ((Constant, ("constant",)), (Zeros, ()), (Ones, ()),
                       (Identity, ("identity",)), (RandomNormal, ()), (RandomUniform, ()),
                       (TruncatedNormal, ()), (VarianceScaling, ("variance_scaling",)),
                       (GlorotUniform, ()), (GlorotNormal, ()), (HeUniform, ()),
                       (HeNormal, ()), (LecunUniform, ()), (LecunNormal, ()),
                       (Orthogonal, ())):
    INITIALIZERS.register(_cls, aliases=_aliases)

for _name, _fn in {
    "glorot_uniform": variance_scaling(1.0, "fan_avg", "uniform"),
    "glorot_normal": variance_scaling(1.0, "fan_avg", "truncated_normal"),
    "he_uniform": variance_scaling(2.0, "fan_in", "uniform"),
    "he_normal": variance_scaling(2.0, "fan_in", "truncated_normal"),
    "lecun_uniform": variance_scaling(1.0, "fan_in", "uniform"),
    "lecun_normal": variance_scaling(1.0, "fan_in", "truncated_normal"),
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


get = INITIALIZERS.get
"""The initializer for a name, a config dict or a ``(key, shape, dtype) -> array`` callable, as
``keras.initializers.get`` (`Registry.get`): a callable (an `Initializer` or a
``jax.nn.initializers`` function) comes back as is, a config dict is rebuilt, a name is Keras'
(any case; a class name gives the class with its defaults) or one of your functions registered
with ``mf.saving.register_serializable`` or given in ``custom_objects`` (within
``mf.saving.custom_object_scope``). A name that names nothing, and anything else (``None``
included), raise a ValueError."""


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


serialize = INITIALIZERS.serialize
"""An initializer argument's JSON form, as ``keras.initializers.serialize``: a name (Keras', or
a function's ``register_serializable`` name), or an `Initializer`'s config ``{"module",
"class_name", "config", "registered_name"}``; anything else (another callable, ``None``)
raises a ValueError."""

deserialize = INITIALIZERS.deserialize
"""A saved initializer as a layer argument, as ``keras.initializers.deserialize``: Keras' names
stay names (the layer resolves them when it builds), configs become `Initializer` objects, and
other names the function `get` finds (your classes and functions from
``mf.saving.register_serializable`` or ``custom_objects``); a name that names nothing raises a
ValueError."""
