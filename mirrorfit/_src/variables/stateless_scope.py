"""`StatelessScope`: Variables read traced values and record assignments instead of mutating.

Keras 3's JAX trainer runs the user's objects inside a pure function this way: it maps every
`Variable` to a value (a tracer inside ``jit``), runs ``model(x)`` / ``train_step(data)``, and
reads the assignments back out as the function's outputs. Scopes nest: a read looks in the
innermost scope first, then outward, then at the variable's stored value; an assignment is
recorded in the innermost scope only.

This module imports nothing else from mirrorfit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Self

_LOCAL = threading.local()


def _stack() -> list[StatelessScope]:
    if not hasattr(_LOCAL, "scopes"):
        _LOCAL.scopes = []
    return _LOCAL.scopes


class StatelessScope:
    """Maps `Variable` s to values while it is active (a context manager).

    Args:
        state_mapping: ``(variable, value)`` pairs that reads return instead of the stored
            values (e.g. ``zip(model.trainable_variables, traced_values)``).
        record_reads: also remember every variable read or assigned (`touched`), to find the
            variables a function uses (`mirrorfit.MirroredStrategy.run` does).
        unmapped: ``variable -> value`` for a variable read here but not mapped (by this
            scope or an inner one): the value the read returns, kept for later reads;
            ``None``: its stored value (`mirrorfit.MirroredStrategy.run` 's first trace
            places a variable of another strategy's devices on its own this way).

    Example:
        >>> from mirrorfit._src.variables.stateless_scope import StatelessScope
        >>> v = mf.Variable(1.0)
        >>> with StatelessScope([(v, jnp.asarray(5.0))]) as scope:
        ...     _ = v.assign(v.value + 1)
        >>> float(v.numpy()), float(scope.get_current_value(v))
        (1.0, 6.0)
    """

    def __init__(self, state_mapping: Iterable[tuple[Any, Any]] = (), *,
                 record_reads: bool = False, unmapped: Callable[[Any], Any] | None = None):
        self._values: dict[int, Any] = {}
        self._keep: dict[int, Any] = {}  # keeps mapped variables alive while ids are keys
        for variable, value in state_mapping:
            self._values[id(variable)] = value
            self._keep[id(variable)] = variable
        self._updates: dict[int, tuple[Any, Any]] = {}
        self._touched: dict[int, Any] | None = {} if record_reads else None
        self._unmapped = unmapped

    def __enter__(self) -> Self:
        _stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack().remove(self)

    def add_update(self, variable: Any, value: Any) -> None:
        """Records ``variable = value`` in this scope (the variable itself is unchanged)."""
        self._values[id(variable)] = value
        self._keep[id(variable)] = variable
        self._updates[id(variable)] = (variable, value)
        if self._touched is not None:
            self._touched.setdefault(id(variable), variable)

    def get_current_value(self, variable: Any) -> Any:
        """The value ``variable`` has in this scope, or ``None`` if it is not mapped here."""
        if self._touched is not None:
            self._touched.setdefault(id(variable), variable)
        if self._unmapped is not None and id(variable) not in self._values:
            self._values[id(variable)] = self._unmapped(variable)
            self._keep[id(variable)] = variable
        return self._values.get(id(variable))

    @property
    def updates(self) -> list[tuple[Any, Any]]:
        """``(variable, new_value)`` for every variable assigned in this scope, in order."""
        return list(self._updates.values())

    @property
    def touched(self) -> list[Any]:
        """The variables read or assigned in this scope, in first-use order (``record_reads``)."""
        if self._touched is None:
            raise ValueError("touched needs StatelessScope(record_reads=True)")
        return list(self._touched.values())


def current_scopes() -> list[StatelessScope]:
    """The active scopes, innermost last."""
    return list(_stack())


def in_stateless_scope() -> bool:
    """Whether a `StatelessScope` is active in this thread."""
    return bool(_stack())


def get_stateless_scope() -> StatelessScope | None:
    """The innermost active `StatelessScope`, or ``None``."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def agreed_assignments() -> Iterator[None]:
    """Within the block, assignments are the same on every replica by construction (the one
    optimizer update's iteration count: a mirrored count, advanced under an all-reduced
    flag), so a scope that combines assignments across replicas by their ``aggregation``
    keeps them as they are, with no collective."""
    previous = assignments_agreed()
    _LOCAL.agreed = True
    try:
        yield
    finally:
        _LOCAL.agreed = previous


def assignments_agreed() -> bool:
    """Whether `agreed_assignments` is active in this thread."""
    return getattr(_LOCAL, "agreed", False)
