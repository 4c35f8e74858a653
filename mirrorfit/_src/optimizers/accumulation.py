"""Keras' ``gradient_accumulation_steps``, and its per-replica form for ``fit``.

`accumulate_gradients` sums the gradients of ``k - 1`` train steps and applies their mean
on the ``k``-th, as the JAX backend's ``_backend_apply_gradients``
(`mirrorfit._src.optimizers.options.with_options` puts it around the clipping, weight decay
and rule).

Its gradients are usually all-reduced already (the same on every replica). ``fit``'s
built-in train step instead traces the update inside `local_gradients`: each replica adds
its own gradients to its own slot of the accumulator, whose leaves have a leading
``[num_replicas]`` axis (`per_replica_accumulators`), and the all-reduce runs once per applied
update, inside that update's ``lax.cond`` branch. `resized_accumulators` carries the
accumulators of a checkpoint over to another replica count (or to and from the
params-shaped form) by summing the slots into the first: the all-reduce adds the slots, so
the applied update is the same, to float32 rounding.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

ACCUMULATORS = "accumulated_gradients"  # the field, and the segment of its checkpoint paths


class GradientAccumulationState(NamedTuple):
    """State of `accumulate_gradients`."""

    mini_step: jax.Array  # int32 [], gradients summed since the last applied update, in [0, k)
    # params-shaped sum of those gradients; under `local_gradients` each leaf is
    # [num_replicas, *param_shape], slot r the sum of replica r's own gradients
    accumulated_gradients: Any
    inner_state: Any  # the wrapped transformation's state, advanced on applied updates only


_LOCAL = threading.local()


@contextlib.contextmanager
def local_gradients(axis_name: str) -> Iterator[None]:
    """Traces an update whose gradients are this replica's own, not yet all-reduced.

    Inside, `accumulate_gradients` adds this replica's gradients to its own slot of the
    accumulator (a ``[1, *param_shape]`` shard of a `per_replica_accumulators` leaf) and
    all-reduces (``lax.psum`` over ``axis_name``) only on the applied update, inside that
    ``lax.cond`` branch: one collective per ``gradient_accumulation_steps`` micro-steps. The
    update's mini-step counter must be the same on every replica (it is mirrored), so every
    replica takes the same branch. Trace the update inside a per-replica function over
    ``axis_name``.

    Args:
        axis_name: the mesh axis of the replicas (``"batch"``).
    """
    previous = getattr(_LOCAL, "axis_name", None)
    _LOCAL.axis_name = axis_name
    try:
        yield
    finally:
        _LOCAL.axis_name = previous


def per_replica_accumulators(opt_state: Any, fn: Callable[[Any], Any]) -> Any:
    """``opt_state`` with ``fn`` applied to every `GradientAccumulationState` 's
    ``accumulated_gradients`` (a params-shaped pytree), e.g. to give each leaf a leading
    ``[num_replicas]`` axis for `local_gradients` or to place it; other leaves unchanged."""

    def is_accumulation(node):
        return isinstance(node, GradientAccumulationState)

    return jax.tree.map(
        lambda node: node._replace(accumulated_gradients=fn(node.accumulated_gradients))
        if is_accumulation(node) else node, opt_state, is_leaf=is_accumulation)


def has_replica_slots(opt_state: Any, params: Any) -> bool:
    """Whether ``opt_state`` accumulates gradients in per-replica slots
    (`per_replica_accumulators`: each leaf one axis more than its param), so an update
    traces inside `local_gradients` and all-reduces once per applied update."""
    found = []
    per_replica_accumulators(opt_state, lambda acc: found.append(acc) or acc)
    acc_leaves, param_leaves = jax.tree.leaves(found), jax.tree.leaves(params)
    return bool(acc_leaves and param_leaves
                and np.ndim(acc_leaves[0]) == np.ndim(param_leaves[0]) + 1)


def accumulate_gradients(inner: optax.GradientTransformation, steps: int
                         ) -> optax.GradientTransformation:
    """Keras' ``gradient_accumulation_steps``: apply ``inner`` to the mean of every ``steps``
    gradients; zero updates (params unchanged) in between.

    On every ``steps``-th call ``inner`` receives ``(g + acc) / steps``, as the JAX
    backend's ``_backend_apply_gradients``. With a mean-reduced loss at global batch
    ``B``, this equals one update at global batch ``steps * B``. Unlike
    ``optax.MultiSteps`` the sum is divided once, as Keras.

    Args:
        inner: the transformation to apply every ``steps`` calls.
        steps: number of calls (train steps) per applied update, ``>= 2``.

    Returns:
        An ``optax.GradientTransformation`` with state `GradientAccumulationState`.
    """

    def init(params):
        return GradientAccumulationState(mini_step=jnp.zeros([], jnp.int32),
                                         accumulated_gradients=optax.tree.zeros_like(params),
                                         inner_state=inner.init(params))

    def update(updates, state, params=None):
        axis_name = getattr(_LOCAL, "axis_name", None)  # set by `local_gradients`

        def apply():
            if axis_name is None:
                mean = jax.tree.map(lambda g, a: (g + a) / steps, updates,
                                    state.accumulated_gradients)
            else:  # the one all-reduce of this update's gradients
                mean = jax.tree.map(lambda g: g / steps, lax.psum(jax.tree.map(
                    lambda g, a: g + a[0], updates, state.accumulated_gradients), axis_name))
            new_updates, inner_state = inner.update(mean, state.inner_state, params)
            return new_updates, inner_state, optax.tree.zeros_like(state.accumulated_gradients)

        def accumulate():
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), update_shapes)
            add = jnp.add if axis_name is None else (lambda g, a: a + g[None])
            return zeros, state.inner_state, jax.tree.map(add, updates,
                                                          state.accumulated_gradients)

        update_shapes = jax.eval_shape(apply)[0]
        is_update_step = state.mini_step == steps - 1
        new_updates, inner_state, accumulated = lax.cond(is_update_step, apply, accumulate)
        mini_step = jnp.where(is_update_step, 0, state.mini_step + 1).astype(jnp.int32)
        return new_updates, GradientAccumulationState(mini_step, accumulated, inner_state)

    return optax.GradientTransformation(init, update)


def resized_accumulators(arrays: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
                         ) -> dict[str, Any]:
    """Checkpoint entries with accumulators fitted to the model's shapes (see the module
    docstring): slots summed into slot 0 of ``[replicas, *shape]`` zeros, into one
    params-shaped array, or a params-shaped array put in slot 0.

    Args:
        arrays: flat checkpoint entries, path key -> NumPy array.
        shapes: the model's path key -> expected shape.

    Returns:
        ``arrays`` with every entry under an ``accumulated_gradients`` path whose shape
        differs in the replica axis only replaced; other mismatches are left for the caller
        to report.
    """
    resized = dict(arrays)
    for key, shape in shapes.items():
        if f"/{ACCUMULATORS}/" not in f"/{key}" or key not in arrays:
            continue
        value, shape = np.asarray(arrays[key]), tuple(shape)
        if value.shape == shape:
            continue
        if value.shape[1:] == shape and value.ndim == len(shape) + 1:  # slots -> params
            resized[key] = value.sum(axis=0, dtype=value.dtype)
        elif shape[1:] == value.shape and len(shape) == value.ndim + 1:  # params -> slots
            resized[key] = np.zeros(shape, value.dtype)
            resized[key][0] = value
        elif value.shape[1:] == shape[1:] and value.ndim == len(shape) >= 1:  # D' -> D slots
            resized[key] = np.zeros(shape, value.dtype)
            resized[key][0] = value.sum(axis=0, dtype=value.dtype)
    return resized
