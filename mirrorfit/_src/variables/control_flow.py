"""Control flow whose branches may assign `Variable` s: `cond` (``mf.ops.cond``).

Inside a compiled step (``fit`` 's, ``strategy.run``, `mirrorfit.value_and_grad`) the
variables are mapped to traced values by a `StatelessScope`, and an assignment records a
new traced value there. A branch of ``jax.lax.cond`` is traced apart, so a value it
assigned would leak out of its trace. `cond` instead runs each branch as a pure function of
the values of the variables either branch touches (found by one shape-only trace of each)
and returns their new values from ``lax.cond``, then assigns those in the enclosing scope.
So "every k steps" logic in a ``train_step`` works as written: ``ops.cond(
self.optimizer.iterations % 5 == 4, generator_step, lambda: None)``. The predicate must be
the same on every replica when a branch runs collectives (an optimizer's all-reduce): the
optimizers' ``iterations`` are.

It imports only its own package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax import lax

from mirrorfit._src.variables import stateless_scope
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable


def cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any],
         *operands: Any) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``keras.ops.cond``
    (``jax.lax.cond``); inside a stateless scope a branch may also assign variables.

    Args:
        pred: a bool scalar (traced or not).
        true_fn, false_fn: the branches; their outputs must have the same structure,
            shapes and dtypes.
        *operands: passed to the branch that runs.

    Returns:
        The output of the branch that ran. Variables it assigned hold their new values in
        the enclosing scope; those the other branch would have assigned keep theirs.

    Example:
        >>> v = mf.Variable(0.0)
        >>> def increment():
        ...     v.assign(v.value + 1.0)
        >>> with StatelessScope([(v, jnp.float32(1.0))]) as scope:
        ...     cond(jnp.bool_(True), increment, lambda: None)
        >>> float(scope.get_current_value(v)), float(v.numpy())
        (2.0, 0.0)
    """
    if not stateless_scope.in_stateless_scope():
        return lax.cond(pred, true_fn, false_fn, *operands)
    touched: list[Variable] = []
    assigned: list[Variable] = []
    for fn in (true_fn, false_fn):
        with StatelessScope(record_reads=True) as probe:
            jax.eval_shape(lambda *args, fn=fn: fn(*args), *operands)
        touched += [v for v in probe.touched if all(v is not t for t in touched)]
        assigned += [v for v, _ in probe.updates if all(v is not a for a in assigned)]
    values = [variable.value for variable in touched]

    def branch(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(values: list[Any], *args: Any) -> tuple[Any, list[Any]]:
            with StatelessScope(zip(touched, values)) as scope:
                out = fn(*args)
            return out, [scope.get_current_value(v) for v in assigned]
        return run

    out, new_values = lax.cond(pred, branch(true_fn), branch(false_fn), values, *operands)
    for variable, value in zip(assigned, new_values):
        variable.assign(value)
    return out
