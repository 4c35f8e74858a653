"""`Variable`: Keras 3's stateful variable over an immutable ``jax.Array``.

A variable holds a value and a name, and whether it is trainable. ``v.value`` (also
``np.asarray(v)``, ``v + 1``, ``jnp.sin(v)``) reads it; ``v.assign(x)`` replaces it. Inside a
`StatelessScope` (how ``fit``'s compiled step, ``strategy.run`` and
`mirrorfit.value_and_grad` trace user code) reads return the scope's value and assignments
are recorded in the scope, so the compiled function stays pure and returns the new values.

It imports only its own package.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.variables import placement, stateless_scope

AGGREGATIONS = ("none", "mean", "sum", "only_first_replica")
_UIDS = itertools.count()
_GENERATION = [0]


def generation() -> int:
    """A counter bumped whenever a variable is created or assigned outside a stateless
    scope: a model's training state, a copy of its variables, is stale only if it moved."""
    return _GENERATION[0]


def _is_traced(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


class Variable:
    """A named, stateful array, as ``keras.Variable``.

    Args:
        initializer: the initial value (array-like), or a callable ``(shape, dtype) ->
            array`` called once, now.
        shape: the variable's shape; required with a callable initializer.
        dtype: its dtype (default: the initial value's, or float32).
        trainable: whether ``model.trainable_variables`` (and so the gradient) includes it.
        name: its name (``path`` adds the owning layer's name: ``"dense/kernel"``).
        aggregation: how replicas combine assignments made inside ``strategy.run`` or a
            custom ``train_step``: ``"none"`` (every replica assigns the same value, as after
            an all-reduced gradient update), ``"mean"``, ``"sum"`` (the replicas' changes
            are added, as metric totals), or ``"only_first_replica"``.
        regularizer: a callable ``value -> scalar`` penalty (`Layer.add_weight` sets it).
        constraint: a callable ``value -> value`` applied after each optimizer update.

    Created inside ``strategy.scope()``, the value is mirrored on the strategy's devices.

    Raises:
        ValueError: a callable initializer without ``shape``, an unknown ``aggregation``, or
            an initial value whose shape differs from ``shape``.

    Example:
        >>> v = mf.Variable(jnp.zeros(3), name="total")
        >>> _ = v.assign_add(jnp.ones(3))
        >>> v.numpy()
        array([1., 1., 1.], dtype=float32)
    """

    def __init__(self, initializer: Any, shape: Any = None, dtype: Any = None,
                 trainable: bool = True, name: str | None = None, *,
                 aggregation: str = "none", regularizer: Callable | None = None,
                 constraint: Callable | None = None):
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}. "
                             f"Received: aggregation={aggregation!r}")
        if callable(initializer) and not hasattr(initializer, "__jax_array__"):
            if shape is None:
                raise ValueError("A Variable with a callable initializer needs shape=. "
                                 f"Received: initializer={initializer!r}, shape=None")
            dtype = jnp.dtype(dtype or jnp.float32)
            with jax.ensure_compile_time_eval():
                value = initializer(tuple(shape), dtype)
        else:
            value = initializer
        with jax.ensure_compile_time_eval():
            value = jnp.asarray(value, dtype=dtype)
        if shape is not None and tuple(value.shape) != tuple(shape):
            raise ValueError(f"Variable {name!r}: the initial value has shape {value.shape}, "
                             f"not shape={tuple(shape)}")
        if not _is_traced(value):
            with jax.ensure_compile_time_eval():  # created while tracing: still concrete
                value = placement.place(value)
        self._value = value
        self.name = name or "variable"
        self.path = self.name
        self.trainable = bool(trainable)
        self.aggregation = aggregation
        self.regularizer = regularizer
        self.constraint = constraint
        self._uid = next(_UIDS)
        _GENERATION[0] += 1

    # -- reading -----------------------------------------------------------------------
    @property
    def value(self) -> jax.Array:
        """The current value: the innermost `StatelessScope`'s, else the stored one."""
        for scope in reversed(stateless_scope.current_scopes()):
            found = scope.get_current_value(self)
            if found is not None:
                return found
        return self._value

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array on the host."""
        return np.asarray(self.value)

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape, as a tuple of ints."""
        return tuple(self._value.shape)

    @property
    def dtype(self) -> Any:
        """The value's dtype."""
        return self._value.dtype

    @property
    def ndim(self) -> int:
        """The value's number of axes."""
        return self._value.ndim

    def __len__(self) -> int:
        return self.shape[0]

    # -- writing -----------------------------------------------------------------------
    def assign(self, value: Any) -> Variable:
        """Replaces the value (inside a `StatelessScope`: records the new value there).

        Raises:
            ValueError: ``value`` 's shape differs from the variable's.
        """
        value = value.value if isinstance(value, Variable) else value
        value = jnp.asarray(value, dtype=self.dtype)
        if tuple(value.shape) != self.shape:
            raise ValueError(f"Variable {self.path!r} has shape {self.shape}; assign() needs "
                             f"the same shape. Received: value of shape {tuple(value.shape)}")
        scope = stateless_scope.get_stateless_scope()
        if scope is not None:
            scope.add_update(self, value)
            return self
        if _is_traced(value):
            raise ValueError(
                f"Variable {self.path!r} was assigned a traced value outside a stateless scope "
                "(inside jax.jit or jax.grad): the value would leak out of the trace. Assign "
                "inside strategy.run, @mf.function, a train_step or mf.value_and_grad, which "
                "return the new values, or assign concrete arrays.")
        old = self._value
        sharding = getattr(old, "sharding", None)
        self._value = jax.device_put(value, sharding) if sharding is not None else value
        _GENERATION[0] += 1
        return self

    def assign_add(self, value: Any) -> Variable:
        """``assign(value + delta)``."""
        return self.assign(self.value + jnp.asarray(value, self.dtype))

    def assign_sub(self, value: Any) -> Variable:
        """``assign(value - delta)``."""
        return self.assign(self.value - jnp.asarray(value, self.dtype))

    # -- acting as the array -----------------------------------------------------------
    # NumPy defers ``np_array @ v`` (and +, *, ...) to the Variable's reflected operator
    # instead of converting it with __array__, which fails while its value is traced.
    __array_priority__ = 100

    def __jax_array__(self) -> jax.Array:
        return self.value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = np.asarray(self.value)
        return array if dtype is None else array.astype(dtype)

    def __getitem__(self, index: Any) -> jax.Array:
        return self.value[index]

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __round__(self, ndigits: int | None = None) -> Any:
        """``round(v, n)``: a Python number for a scalar (as ``round(float(v), n)``), else the
        rounded array."""
        if self.ndim == 0:
            return round(self.value.item(), ndigits)
        return jnp.round(self.value, ndigits or 0)

    def __format__(self, spec: str) -> str:
        """``f"{v:.3f}"`` formats a scalar's value as a Python number; ``f"{v}"`` is
        ``str(v)``."""
        if not spec:
            return str(self)
        return format(self.value.item() if self.ndim == 0 else np.asarray(self), spec)

    def astype(self, dtype: Any) -> jax.Array:
        """The value cast to ``dtype``, as a new ``jax.Array`` (the variable is
        unchanged).
        """
        return self.value.astype(dtype)

    @property
    def T(self) -> jax.Array:
        """The value transposed, as a new ``jax.Array``."""
        return self.value.T

    def __repr__(self) -> str:
        value = self._value
        shown = "traced" if _is_traced(value) else np.array2string(
            np.asarray(value), threshold=6, edgeitems=2)
        return (f"<Variable path={self.path}, shape={self.shape}, dtype={self.dtype}, "
                f"trainable={self.trainable}, value={shown}>")


def _binary(op: Callable, reflected: bool = False) -> Callable:
    if reflected:
        return lambda self, other: op(jnp.asarray(other), self.value)
    return lambda self, other: op(self.value, other.value if isinstance(other, Variable)
                                  else other)


for _name, _op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv),
                   ("mod", operator.mod), ("pow", operator.pow),
                   ("matmul", operator.matmul)]:
    setattr(Variable, f"__{_name}__", _binary(_op))
    setattr(Variable, f"__r{_name}__", _binary(_op, reflected=True))
for _name, _op in [("lt", operator.lt), ("le", operator.le), ("gt", operator.gt),
                   ("ge", operator.ge)]:
    setattr(Variable, f"__{_name}__", _binary(_op))
Variable.__neg__ = lambda self: -self.value  # type: ignore[attr-defined]
Variable.__abs__ = lambda self: abs(self.value)  # type: ignore[attr-defined]
