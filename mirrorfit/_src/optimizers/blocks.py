"""Optimizer updates on blocks of the params, for a sharded optimizer state (ZeRO-1/2).

With ``MirroredStrategy(shard_optimizer_state=True)`` the train step gives the optimizer
this replica's block of every split leaf (gradient, param and state alike) and the whole
of every leaf that is not split (`mirrorfit._src.distribute.zero.shard_axis`). An
element-wise transformation (Adam's moments, ``clipvalue``, weight decay, EMA, gradient
accumulation) computes on a block exactly what it computes on that part of the whole leaf.
A norm needs every block: the step traces the update inside `block_update`, and the
clipping of `mirrorfit._src.optimizers.options` reads the squared norms through
`leaf_sums_of_squares` and `global_sum_of_squares`, which add the blocks' sums over the
replicas (``lax.psum``); so does the loss-scale optimizer's finite check
(`on_every_replica`: a step is skipped on every replica when one block is not finite).
Outside `block_update` they are the plain sums and flags.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

_BLOCKS = threading.local()


@contextlib.contextmanager
def block_update(axis_name: str, split: Any) -> Iterator[None]:
    """Traces an optimizer update on blocks: norms inside add the blocks over ``axis_name``.

    Args:
        axis_name: the mesh axis the blocks are split over (``"batch"``).
        split: a params-shaped pytree of bools, True where the leaf is a block of a split
            leaf, False where it is the whole (mirrored) leaf.
    """
    previous = getattr(_BLOCKS, "current", None)
    _BLOCKS.current = (axis_name, split)
    try:
        yield
    finally:
        _BLOCKS.current = previous


def leaf_sums_of_squares(tree: Any) -> Any:
    """``sum(g ** 2)`` of each leaf of ``tree``, over the whole leaf (all its blocks).

    Args:
        tree: a params-shaped pytree of float arrays (blocks inside `block_update`).

    Returns:
        A pytree like ``tree`` of float scalars ``[]``.
    """
    sums = jax.tree.map(lambda g: jnp.sum(jnp.square(g)), tree)
    current = getattr(_BLOCKS, "current", None)
    if current is None:
        return sums
    axis_name, split = current
    return jax.tree.map(lambda s, is_split: lax.psum(s, axis_name) if is_split else s,
                        sums, split)


def on_every_replica(flag: jax.Array) -> jax.Array:
    """bool ``[]``: whether ``flag`` (a bool ``[]`` about this replica's blocks, such as
    "all finite") holds on every replica inside `block_update`; ``flag`` itself outside."""
    current = getattr(_BLOCKS, "current", None)
    if current is None:
        return flag
    return lax.psum(jnp.logical_not(flag).astype(jnp.int32), current[0]) == 0


def active() -> bool:
    """Whether an update on blocks is being traced (inside `block_update`)."""
    return getattr(_BLOCKS, "current", None) is not None


def global_sum_of_squares(tree: Any) -> jax.Array:
    """``sum(g ** 2)`` over every element of every leaf of ``tree``, all blocks: float ``[]``.

    Only inside `block_update`: one ``psum`` of the split leaves' blocks, plus the mirrored
    leaves counted once.
    """
    axis_name, split = _BLOCKS.current
    blocks, whole = [], []
    for g, is_split in zip(jax.tree.leaves(tree), jax.tree.leaves(split)):
        (blocks if is_split else whole).append(jnp.sum(jnp.square(g)))
    total = lax.psum(sum(blocks), axis_name) if blocks else jnp.zeros([], jnp.float32)
    return total + sum(whole) if whole else total
