"""`keras_op`: one Keras 3 op name on one JAX function, with Keras' arguments.

A table entry names the op, the JAX (or NumPy) function that computes it, and Keras'
parameter list, e.g. ``keras_op("sum", "jax.numpy.sum", "x, axis=None, keepdims=False")``. The
returned function:

- takes Keras' arguments (positional or by name, with Keras' defaults, which it always passes
  on), so ``ops.sum(x, 1, True)`` and ``ops.leaky_relu(x)`` (slope 0.2, not JAX's 0.01) mean
  what they mean in Keras;
- passes on by name the arguments the function knows by Keras' name (``axis=``,
  ``keepdims=``), or by ``renames``; the leading ones it names differently (``x`` for
  ``jnp.sum``'s ``a``, or positional-only) go by position;
- reads `mirrorfit.Variable` arguments, also inside lists, tuples and dicts, as their values
  (JAX 0.10 no longer converts objects through ``__jax_array__`` when tracing);
- converts a Python list or tuple given for an array parameter (``x``, ``x1``, ``x2``,
  ``y``) to an array, as Keras' ``convert_to_tensor`` does (``ops.sum([1, 2, 3])``), except
  where the op takes a sequence of arrays (``stack``);
- computes an op whose arguments are all constants (numbers, lists, NumPy or concrete JAX
  arrays; at most `FOLD_SIZE` elements in all) at once, also inside ``jax.jit`` (JAX would
  stage it), and takes a shape argument (``tile``'s ``repeats``, ``reshape``'s
  ``newshape``, ``broadcast_to``'s ``shape``) given as a constant array as its ints: so
  keras-io's shape arithmetic, ``ops.tile(mask, ops.concatenate([ops.expand_dims(batch, -1),
  ops.convert_to_tensor([1, 1])], 0))``, traces on JAX as on TensorFlow. Ops whose result
  can be much larger than their arguments (``zeros``, ``arange``, ``tile``, ...) are never
  computed early;
- given a symbolic tensor (a functional model's ``KerasTensor``, also inside lists), records
  the call in the model being built and returns symbolic outputs, as Keras 3's
  ``Operation.__call__`` does (``shape``, ``ndim`` and ``dtype`` answer from the tensor's own
  shape and dtype, a ``None`` batch included). It finds them by their
  ``__mf_symbolic_call__`` method, so this level-2 package needs no import of ``layers``.

It does nothing else: dtypes, broadcasting and errors are the JAX function's.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from mirrorfit._src.variables.variable import Variable

_P = inspect.Parameter
_ARRAY_PARAMETERS = frozenset({"x", "x1", "x2", "y"})  # Keras' names of array arguments
_SHAPE_PARAMETERS = frozenset({"repeats", "newshape", "shape"})  # static ints in JAX
FOLD_SIZE = 64  # elements: an op on constants this small is computed at once (see above)
# Ops whose result may be far larger than their arguments: never computed early, so that a
# large constant is not embedded in a compiled program.
_GROWING = frozenset({
    "arange", "bartlett", "blackman", "broadcast_to", "diag", "diagflat", "empty", "eye",
    "full", "geomspace", "hamming", "hanning", "histogram", "identity", "kaiser", "kron",
    "linspace", "logspace", "meshgrid", "one_hot", "ones", "outer", "pad", "repeat", "tile",
    "tri", "vander", "zeros", "bincount", "multi_hot"})
# Ops a symbolic tensor answers itself (Keras: ``ops.shape(x)`` of a KerasTensor is x.shape).
_STATIC = {"shape": lambda x: tuple(x.shape), "ndim": lambda x: len(x.shape),
           "dtype": lambda x: x.dtype}


def _constant_and_small(tree: Any) -> bool:
    """Whether every leaf of ``tree`` is a constant (no tracer, no function) and they hold
    at most `FOLD_SIZE` elements in all."""
    size = 0
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, (jax_core.Tracer, Variable)) or callable(leaf):
            return False
        if isinstance(leaf, str) or leaf is None:
            continue
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex)):
            return False
        size += int(np.size(leaf))
    return size <= FOLD_SIZE


def _static_shape(value: Any) -> Any:
    """A shape argument given as a constant array, as ints (JAX needs them static)."""
    if isinstance(value, (jax.Array, np.ndarray)) and not isinstance(value, jax_core.Tracer):
        array = np.asarray(value)
        if array.dtype.kind in "iu":
            return int(array) if array.ndim == 0 else tuple(int(v) for v in array.reshape(-1))
    return value


def _symbolic_tensor(tree: Any) -> Any:
    """The first symbolic tensor among ``tree`` 's leaves, or ``None``."""
    for leaf in jax.tree.leaves(tree):
        if hasattr(type(leaf), "__mf_symbolic_call__"):
            return leaf
    return None


def read_variables(tree: Any) -> Any:
    """``tree`` with every `Variable` (a leaf, or inside lists/tuples/dicts) replaced by its
    ``value``."""
    return jax.tree.map(lambda v: v.value if isinstance(v, Variable) else v, tree,
                        is_leaf=lambda v: isinstance(v, Variable))


def keras_op(name: str, path: str, signature: str, *, renames: dict[str, str] | None = None,
             drop: Iterable[str] = (), sequences: Iterable[str] = ()) -> Callable[..., Any]:
    """Keras' op ``name``, computed by the function at ``path``.

    Args:
        name: the Keras name (``"sum"``), the returned function's ``__name__``.
        path: the dotted path of the function that computes it (``"jax.numpy.sum"``).
        signature: Keras' parameter list, as Python source (``"x, axis=None,
            keepdims=False"``); defaults are literals.
        renames: Keras parameter name -> the function's keyword, where they differ and the
            argument must go by name (``{"updates": "update"}``).
        drop: Keras parameters accepted and not passed on, because the function has no such
            option and Keras' JAX backend ignores them too (``unstack``'s ``num``).
        sequences: array parameters that take a sequence of arrays (``stack``'s ``x``), so a
            list given for them is passed on as a list.

    Returns:
        The op, with Keras' signature (``inspect.signature``) and a one-line docstring.
    """
    fn = _resolve(path)
    keras = _parse(signature)
    renames = dict(renames or {})
    dropped = frozenset(drop)
    converted = _ARRAY_PARAMETERS - frozenset(sequences)
    positional = _positional(keras, _keyword_names(fn) | set(renames), dropped)

    def op(*args: Any, **kwargs: Any) -> Any:
        symbolic = _symbolic_tensor((args, kwargs))
        if symbolic is not None:
            if name in _STATIC:
                return _STATIC[name](*args, **kwargs)
            return symbolic.__mf_symbolic_call__(op, args, kwargs)
        bound = keras.bind(*args, **kwargs)
        bound.apply_defaults()
        fold = name not in _GROWING and _constant_and_small(
            [read_variables(v) for v in bound.arguments.values()])
        with jax.ensure_compile_time_eval() if fold else contextlib.nullcontext():
            call_args, call_kwargs = _call_arguments(bound)
            return fn(*call_args, **call_kwargs)

    def _call_arguments(bound: inspect.BoundArguments) -> tuple[list[Any], dict[str, Any]]:
        """Keras' bound arguments as the function's positional and keyword arguments."""
        call_args: list[Any] = []
        call_kwargs: dict[str, Any] = {}
        for param_name, value in bound.arguments.items():
            if param_name in dropped:
                continue
            value = read_variables(value)
            kind = keras.parameters[param_name].kind
            if (param_name in converted and isinstance(value, (list, tuple))
                    and kind is not _P.VAR_POSITIONAL):
                value = jnp.asarray(value)
            if param_name in _SHAPE_PARAMETERS:
                value = _static_shape(value)
            if kind is _P.VAR_POSITIONAL:
                call_args.extend(value)
            elif kind is _P.VAR_KEYWORD:
                call_kwargs.update(value)
            elif param_name in positional:
                call_args.append(value)
            else:
                call_kwargs[renames.get(param_name, param_name)] = value
        return call_args, call_kwargs

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Keras' ``ops.{name}({signature})``, computed by ``{path}``."
    op.__signature__ = keras  # type: ignore[attr-defined]
    op.__wrapped__ = fn  # type: ignore[attr-defined]
    return op


def _resolve(path: str) -> Callable[..., Any]:
    module, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def _parse(signature: str) -> inspect.Signature:
    """``"x, axis=None, *rest"`` -> the `inspect.Signature` of ``def f(x, axis=None, *rest)``."""
    args = ast.parse(f"def f({signature}): pass").body[0].args  # type: ignore[attr-defined]
    params = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [_P.empty] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults]
    params += [_P(a.arg, _P.POSITIONAL_OR_KEYWORD, default=d) for a, d in zip(positional, defaults)]
    if args.vararg:
        params.append(_P(args.vararg.arg, _P.VAR_POSITIONAL))
    params += [_P(a.arg, _P.KEYWORD_ONLY,
                  default=_P.empty if d is None else ast.literal_eval(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append(_P(args.kwarg.arg, _P.VAR_KEYWORD))
    return inspect.Signature(params)


def _keyword_names(fn: Callable[..., Any]) -> set[str]:
    """The parameters ``fn`` takes by name (none when its signature cannot be read)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)}


def _positional(keras: inspect.Signature, by_name: set[str], dropped: frozenset[str]) -> set[str]:
    """The leading Keras parameters passed by position: up to the last one the function does
    not take by Keras' name, and every one before ``*args``."""
    fixed = [p for p in keras.parameters.values() if p.kind is _P.POSITIONAL_OR_KEYWORD]
    count = 0
    for index, param in enumerate(fixed):
        if param.name not in by_name and param.name not in dropped:
            count = index + 1
    if any(p.kind is _P.VAR_POSITIONAL for p in keras.parameters.values()):
        count = len(fixed)
    return {p.name for p in fixed[:count]}
