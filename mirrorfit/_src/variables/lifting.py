"""Running user code that reads and assigns `Variable` s as a pure function of their values.

Compiled functions (``strategy.run``, `mirrorfit.function`) lift the variables a user
function closes over, as Keras 3's JAX trainer does: trace the function once abstractly in a
recording `StatelessScope` to find the variables it reads and assigns (`discover`), then run
it with those variables mapped to the compiled function's inputs (`call_with_values`) and
return the assigned values as outputs, written back to the variables after the call.

It imports only its own package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable


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
    return variable._value  # noqa: SLF001 - the same package's stored value


def call_with_values(fn: Callable[..., Any], used: UsedVariables, values: Sequence[Any],
                     args: tuple = (), kwargs: dict | None = None
                     ) -> tuple[Any, list[Any], UsedVariables]:
    """Runs ``fn(*args, **kwargs)`` with ``used.read`` mapped to ``values``.

    Args:
        fn: the user function.
        used: the variables to map (``UsedVariables()`` to map none and record them).
        values: one value per ``used.read`` (traced inside a compiled function).
        args, kwargs: ``fn`` 's arguments.

    Returns:
        ``(output, new_values, found)``: ``new_values`` has the value of each of
        ``used.assigned`` after ``fn`` (its mapped value when ``fn`` did not assign it);
        ``found`` is what this call read and assigned, in first-use order.
    """
    with StatelessScope(zip(used.read, values), record_reads=True) as scope:
        out = fn(*args, **(kwargs or {}))
    new_values = [scope.get_current_value(v) for v in used.assigned]
    found = UsedVariables(tuple(scope.touched), tuple(v for v, _ in scope.updates))
    return out, new_values, found


def discover(fn: Callable[..., Any], *args: Any) -> UsedVariables:
    """The variables ``fn(*args)`` reads and assigns, found by one abstract trace.

    ``fn`` runs under ``jax.eval_shape`` (nothing is computed or compiled) in a recording
    scope; variables it creates on the way (a layer's weights, an optimizer's slots) are
    created for real and found too.

    Args:
        fn: a function of arrays (close over constants).
        *args: pytrees of arrays or ``jax.ShapeDtypeStruct`` s.
    """
    found: list[UsedVariables] = []

    def traced(*traced_args):
        out, _, used = call_with_values(fn, UsedVariables(), (), traced_args)
        found.append(used)
        return out

    jax.eval_shape(traced, *args)
    return found[-1]
