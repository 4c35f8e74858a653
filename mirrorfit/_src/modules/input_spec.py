"""A model's input spec: per-example shapes and dtypes, from ``input_shape`` or a first batch.

`Model` builds its params from an example batch of one row (`example_batch`), records the
spec (`spec_of`) and checks every later input against it (`check_matches`). Lists and tuples
of inputs mean the same thing: positional inputs of the module.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from mirrorfit._src.utils.checks import is_int


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(is_int(d) for d in value)


def lists_to_tuples(tree: Any) -> Any:
    """Lists of inputs and tuples of inputs mean the same (positional module inputs)."""
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return tuple(lists_to_tuples(item) for item in tree)
    if isinstance(tree, dict):
        return {key: lists_to_tuples(value) for key, value in tree.items()}
    return tree


def example_batch(input_shape: Any, dtype: Any) -> Any:
    """Zeros ``[1, *shape]`` for every example shape in ``input_shape``.

    Args:
        input_shape: the shape of one example without the batch dimension, e.g. ``(784,)``,
            or a dict/list of such shapes for several inputs.
        dtype: the dtype of the zeros.

    Raises:
        TypeError: if ``input_shape`` is not a tuple of ints or a dict/list of them.
    """
    shapes = jax.tree.map(tuple, input_shape, is_leaf=_is_shape)
    leaves = jax.tree.leaves(shapes, is_leaf=_is_shape)
    if not leaves or not all(_is_shape(s) for s in leaves):
        raise TypeError(
            "input_shape must be the shape of one example without the batch dimension, "
            f"e.g. (784,), or a dict/list of such shapes. Received: input_shape={input_shape!r}"
        )
    return jax.tree.map(lambda s: np.zeros((1, *s), dtype), shapes, is_leaf=_is_shape)


def first_row(x: Any) -> Any:
    """The first row of every array of ``x``: the example batch a model is built from."""
    return jax.tree.map(lambda a: np.asarray(a)[:1], x)


def spec_of(sample: Any) -> Any:
    """Per-example ``jax.ShapeDtypeStruct`` s of a batch ``sample`` (batch axis dropped)."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype),
                        lists_to_tuples(sample))


def variable_axes(declared: Any, spec: Any) -> Any:
    """Which per-example axes of each input may change from batch to batch (a tuple of bools
    per leaf of ``spec``): the ``None`` dimensions of the model's `Input` s (``declared``);
    for a model built from its first batch (``declared`` is ``None``), the timesteps of a
    sequence input, as Keras runs such a model on any length: integer ``[batch, timesteps]``
    (token ids) or float ``[batch, timesteps, features]``.
    """
    leaves, treedef = jax.tree.flatten(spec)
    if declared is not None:
        inputs = jax.tree.leaves(declared)
        if len(inputs) == len(leaves):
            return jax.tree.unflatten(treedef, [tuple(d is None for d in t.shape[1:])
                                                for t in inputs])

    def free(s: jax.ShapeDtypeStruct) -> tuple[bool, ...]:
        sequence_rank = 1 if np.issubdtype(s.dtype, np.integer) else 2
        if len(s.shape) != sequence_rank:
            return (False,) * len(s.shape)
        return (True,) + (False,) * (sequence_rank - 1)
    return jax.tree.unflatten(treedef, [free(s) for s in leaves])


def _matches(expected: tuple[int, ...], received: tuple[int, ...],
             free: tuple[bool, ...]) -> bool:
    return len(expected) == len(received) and all(
        e == r or f for e, r, f in zip(expected, received, free))


def check_matches(spec: Any, x: Any, name: str = "x", variable: Any = None) -> None:
    """Checks that batch ``x`` has the per-example shapes of ``spec``.

    Args:
        spec: the model's per-example ``jax.ShapeDtypeStruct`` s.
        x: a batch.
        name: the argument's name in errors.
        variable: `variable_axes`: per leaf, the axes whose size may differ from ``spec``
            (``None``: none).

    Raises:
        ValueError: naming ``name``, with the expected and received per-example shapes.
    """
    received = jax.tree.map(lambda a: np.shape(a)[1:], lists_to_tuples(x))
    expected = jax.tree.map(lambda s: s.shape, spec)
    if received != expected and variable is not None:
        got, got_def = jax.tree.flatten(received, is_leaf=lambda v: isinstance(v, tuple))
        want, want_def = jax.tree.flatten(expected, is_leaf=lambda v: isinstance(v, tuple))
        free = jax.tree.leaves(variable, is_leaf=lambda v: isinstance(v, tuple))
        if got_def == want_def and all(map(_matches, want, got, free)):
            return
    if received != expected:
        raise ValueError(
            f"Input {name} does not match the model: expected per-example shape "
            f"{expected} (without the batch dimension), as the model was built with. "
            f"Pass inputs of that shape, or create a new model for the new shape. "
            f"Received: {name} with per-example shape {received}"
        )
