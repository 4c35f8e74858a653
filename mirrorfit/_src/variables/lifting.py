"""Running user code that reads and assigns `Variable` s as a pure function of their values.

Compiled functions (``strategy.run``, `mirrorfit.function`) lift the variables a user
function closes over, as Keras 3's JAX trainer does: trace the function once abstractly
(``jax.eval_shape``) through `call_with_values` mapping no variable, which records the ones
it reads and assigns (`UsedVariables`); then compile it through `call_with_values` mapping
those to the compiled function's inputs, return the assigned values as outputs, and write
them back to the variables after the call.

It imports only its own package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

NEW_VARIABLE_ASSIGNED = (
    "{fn} assigned variables on a later trace that its first trace did not use: a compiled "
    "function must create its variables once (build the model and optimizer before the "
    "loop, or create variables on the first call only), as tf.function requires. Received: "
    "new assigned variables {names}"
)


@dataclasses.dataclass(frozen=True)
class UsedVariables:
    """The variables a function uses, in first-use order.

    Attributes:
        read: every variable it reads or assigns: the compiled function's inputs.
        assigned: the ones it assigns: the compiled function's outputs.
    """

    read: tuple[Variable, ...] = ()
    assigned: tuple[Variable, ...] = ()


def stored_value(variable: Variable) -> jax.Array:
    """``variable`` 's value outside every `StatelessScope`: a concrete array even while
    tracing (what an optimizer initializes its slots from)."""
    return variable._value  # the same package's private field: no public accessor


def call_with_values(fn: Callable[..., Any], used: UsedVariables, values: Sequence[Any],
                     args: tuple = (), kwargs: dict | None = None,
                     unmapped: Callable[[Any], Any] | None = None
                     ) -> tuple[Any, list[Any], UsedVariables]:
    """Runs ``fn(*args, **kwargs)`` with ``used.read`` mapped to ``values``.

    Args:
        fn: the user function.
        used: the variables to map (``UsedVariables()`` to map none and record them).
        values: one value per ``used.read`` (traced inside a compiled function).
        args, kwargs: ``fn`` 's arguments.
        unmapped: ``stored value -> value`` for a read of any other variable (see
            `StatelessScope`; ``strategy.run`` 's first trace places values of other devices on
            its mesh); ``None``: the stored value.

    Returns:
        ``(output, new_values, found)``: ``new_values`` has the value of each of
        ``used.assigned`` after ``fn`` (its mapped value when ``fn`` did not assign it);
        ``found`` is what this call read and assigned, in first-use order.
    """
    read = None if unmapped is None else (lambda v: unmapped(stored_value(v)))
    with StatelessScope(zip(used.read, values), record_reads=True, unmapped=read) as scope:
        out = fn(*args, **(kwargs or {}))
    new_values = [scope.get_current_value(v) for v in used.assigned]
    found = UsedVariables(tuple(scope.touched), tuple(v for v, _ in scope.updates))
    return out, new_values, found


def check_assigned(fn: Callable[..., Any], used: UsedVariables, this_trace: UsedVariables
                   ) -> None:
    """Raises unless the variables ``fn`` assigned in ``this_trace`` are among ``used`` 's.

    Raises:
        ValueError: naming the variables the first trace did not find (created anew by
            every call, for instance): their new values would be lost.
    """
    known = set(map(id, used.assigned))
    new = [v.path for v in this_trace.assigned if id(v) not in known]
    if new:
        raise ValueError(NEW_VARIABLE_ASSIGNED.format(
            fn=getattr(fn, "__name__", "fn"), names=new))
