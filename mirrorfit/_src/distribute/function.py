"""`function`: what ``@tf.function`` becomes in a ported custom loop.

A TF custom loop decorates its step functions with ``@tf.function``; ``@mf.function`` takes
the same place (and ``tf.function`` 's common arguments) and compiles with JAX:

* a function that calls ``strategy.run`` stays a Python function: ``run`` already compiles
  the replica function once per argument structure, and ``strategy.reduce`` its reduction;
* any other function is compiled as a whole with ``jax.jit``, lifting the `Variable` s it
  reads and assigns as ``strategy.run`` does (`mirrorfit._src.variables.lifting`): their
  values are the compiled function's inputs and the assigned ones its outputs, written back
  after each call.

The first call for an argument structure (array shapes and dtypes, the values of the other
arguments) runs as plain Python and notes whether the function calls ``strategy.run``; later
calls take the compiled path. Called while a function is being traced (inside
``strategy.run``, another compiled function or `mirrorfit.value_and_grad`) it is the plain
function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mirrorfit._src.distribute.mesh import InFlight
from mirrorfit._src.distribute.run import run_calls
from mirrorfit._src.distribute.values import PerReplica
from mirrorfit._src.variables import stateless_scope
from mirrorfit._src.variables.lifting import UsedVariables, call_with_values, check_assigned

_ARRAYS = (jax.Array, np.ndarray, np.generic)
_PYTHON = "python"  # the cache entry of a function that calls strategy.run
_NO_VARIABLES = UsedVariables()  # maps none: the trace that finds them


class Function:
    """A function compiled as `function` describes; call it as the function.

    Args:
        fn: the decorated function (or method).
    """

    def __init__(self, fn: Callable[..., Any]):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._compiled: dict[Any, Any] = {}
        self._in_flight = InFlight()

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # Decorating a method: the instance becomes the first (static) argument.
        return self if instance is None else functools.partial(self.__call__, instance)

    @property
    def num_compiled(self) -> int:
        """How many argument structures have been compiled (or found to call ``run``)."""
        return len(self._compiled)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, treedef = jax.tree.flatten((args, kwargs), is_leaf=_is_iterator)
        if stateless_scope.in_stateless_scope() or any(
                isinstance(leaf, Tracer) for leaf in leaves):
            return self._fn(*args, **kwargs)  # inside a trace: part of the enclosing program
        if any(isinstance(leaf, PerReplica) for leaf in leaves):
            # What strategy.run returned: reduce/gather compile; a new object every step
            # would otherwise be a new compile key.
            return self._fn(*args, **kwargs)
        dynamic = [leaf for leaf in leaves if isinstance(leaf, _ARRAYS)]
        key = (treedef, tuple(_key_of(leaf) for leaf in leaves))
        entry = self._compiled.get(key)
        if entry is None:
            before = run_calls()
            # NumPy arguments arrive as JAX arrays, as they will in the compiled calls.
            args, kwargs = jax.tree.unflatten(treedef, [
                jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x
                for x in leaves])
            out = self._fn(*args, **kwargs)
            calls_run = run_calls() != before or any(_is_iterator(x) for x in leaves)
            self._compiled[key] = _PYTHON if calls_run else self._compile(leaves, treedef)
            return out
        if entry is _PYTHON:
            return self._fn(*args, **kwargs)
        used, program = entry
        out, new_values = program([v.value for v in used.read], dynamic)
        for variable, value in zip(used.assigned, new_values):
            variable.assign(value)
        self._in_flight.push((out, new_values))
        return out

    def _compile(self, leaves: list[Any], treedef: Any) -> tuple[UsedVariables, Callable]:
        """Finds the variables the function uses (one abstract trace) and jits it."""
        fn = self._fn
        is_dynamic = [isinstance(leaf, _ARRAYS) for leaf in leaves]

        def call(dynamic, used=_NO_VARIABLES, values=()):
            arrays = iter(dynamic)
            merged = [next(arrays) if d else leaf for leaf, d in zip(leaves, is_dynamic)]
            args, kwargs = jax.tree.unflatten(treedef, merged)
            return call_with_values(fn, used, values, args, kwargs)

        found: list[UsedVariables] = []

        def probe(dynamic):
            out, _, this_trace = call(dynamic)
            found.append(this_trace)
            return out

        jax.eval_shape(probe, [leaf for leaf, d in zip(leaves, is_dynamic) if d])
        used = found[-1]

        def program(values, dynamic):
            out, new_values, this_trace = call(dynamic, used, values)
            check_assigned(fn, used, this_trace)
            return out, new_values

        program.__name__ = getattr(fn, "__name__", "function")
        return used, jax.jit(program)


def _key_of(leaf: Any) -> Any:
    """How an argument leaf enters the compile key: arrays by shape and dtype, other
    values by value (Python numbers and strings are compile-time constants, as in
    ``tf.function``), unhashable objects by identity."""
    if isinstance(leaf, _ARRAYS):
        return ("array", leaf.shape, leaf.dtype)
    try:
        hash(leaf)
    except TypeError:
        return ("object", id(leaf))
    return ("value", type(leaf), leaf)


def _is_iterator(value: Any) -> bool:
    """A Python iterator argument: the function pulls data from it on every call, so it
    stays a Python function (a compiled one would see the batch of its trace forever)."""
    return hasattr(value, "__next__")


def function(func: Callable[..., Any] | None = None, input_signature: Sequence[Any] | None = None,
             autograph: bool = True, jit_compile: bool | None = None,
             reduce_retracing: bool = False) -> Any:
    """Compiles a custom-loop step, where TF writes ``@tf.function``.

    A function that calls ``strategy.run`` stays a Python function (``run`` compiles the
    replica function, once per argument structure); any other is compiled with ``jax.jit``,
    with the `Variable` s it reads and assigns (model weights, optimizer state, metric
    totals) lifted to inputs and outputs and assigned back after each call. The first call
    for each argument structure runs as plain Python (it finds out which kind the function
    is); later calls with the same array shapes and dtypes, and the same other arguments,
    reuse the compiled program. Python numbers and strings are constants of the program, as
    in ``tf.function``: pass arrays for values that change.

    Keep Python side effects out of a compiled function (they run when it is traced, not on
    every call), and pass batches as arguments rather than calling ``next(iterator)`` inside
    a function that does not call ``strategy.run``.

    Args:
        func: the function or method to compile; ``None`` when used as
            ``@mf.function(...)`` with arguments.
        input_signature: accepted for ``tf.function`` compatibility; the shapes come from
            the arguments of each call (one compile per distinct shapes).
        autograph: accepted; no effect. Python control flow on array values must use
            ``jax.lax.cond`` / ``jax.lax.fori_loop`` or ``jnp.where`` inside compiled code.
        jit_compile: accepted; no effect: JAX always compiles with XLA.
        reduce_retracing: accepted; no effect: a compile per distinct shapes.

    Returns:
        A `Function` (or a decorator making one, when ``func`` is ``None``).

    Raises:
        TypeError: if ``func`` is not callable.

    Example:
        >>> w = mf.Variable(jnp.zeros(2))
        >>> @mf.function
        ... def step(x):
        ...     w.assign_add(x)
        ...     return w.value.sum()
        >>> [float(step(jnp.ones(2))) for _ in range(3)]
        [2.0, 4.0, 6.0]
    """
    del input_signature, autograph, jit_compile, reduce_retracing  # see the docstring

    def decorate(fn: Callable[..., Any]) -> Function:
        if not callable(fn):
            raise TypeError(f"mf.function decorates a function or method. Received: {fn!r}")
        return Function(fn)

    return decorate if func is None else decorate(func)
