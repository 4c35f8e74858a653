"""Values a ``strategy.run`` function returns as `Mirrored`, and the debug check on them.

A per-replica function marks a value every replica computes identically (new params after an
all-reduced update) by returning ``mf.Mirrored(value)`` (any pytree); ``run`` then returns
that pytree with `Mirrored` leaves (replica 0's arrays, replicated) instead of `PerReplica`. With the environment variable
``MIRRORFIT_CHECK_MIRRORED=1`` (off by default: it copies the values to the host after every
``run``), ``run`` first verifies that every replica really holds the same value and raises
naming the leaf when not: the symptom of a forgotten gradient all-reduce.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute.values import Mirrored, PerReplica

ENV_FLAG = "MIRRORFIT_CHECK_MIRRORED"


def check_enabled() -> bool:
    """Whether ``MIRRORFIT_CHECK_MIRRORED`` is set to a true value (``1``, ``true``)."""
    return os.environ.get(ENV_FLAG, "").strip().lower() in ("1", "true", "yes")


def _is_mirrored(node: Any) -> bool:
    return isinstance(node, Mirrored)


def _is_per_replica(node: Any) -> bool:
    return isinstance(node, PerReplica)


def resolve(outputs: Any, mesh: Any, fn: Any) -> Any:
    """Replaces each ``Mirrored(tree)`` in ``run`` 's outputs by ``tree`` with every
    `PerReplica` leaf a `Mirrored` replicated array (replica 0's), as ``strategy.replicate``.

    Raises:
        ValueError: with the check enabled, naming the first leaf whose replicas differ.
    """
    nodes, treedef = jax.tree_util.tree_flatten_with_path(outputs, is_leaf=_is_mirrored)
    if not any(_is_mirrored(node) for _, node in nodes):
        return outputs
    found = []  # (path, PerReplica) under a Mirrored node
    for path, node in nodes:
        if _is_mirrored(node):
            inner = jax.tree_util.tree_flatten_with_path(node.value, is_leaf=_is_per_replica)[0]
            found += [(path + sub, v) for sub, v in inner if _is_per_replica(v)]
    if check_enabled():
        for path, value in found:
            _check_same(jax.tree_util.keystr(path), np.asarray(mesh.fetch(value.values)), fn)
    firsts = iter(_first_replica([v.values for _, v in found], sharding=mesh.replicated_sharding))

    def replicated(node):
        return jax.tree.map(lambda v: Mirrored(next(firsts)) if _is_per_replica(v) else v,
                            node.value, is_leaf=_is_per_replica)

    return jax.tree.unflatten(treedef, [replicated(node) if _is_mirrored(node) else node
                                        for _, node in nodes])


def _check_same(name: str, values: np.ndarray, fn: Any) -> None:
    """Raises unless every row (replica) of ``values`` equals row 0, bit for bit."""
    for replica in range(1, values.shape[0]):
        if not np.array_equal(values[replica], values[0], equal_nan=values.dtype.kind in "fc"):
            diff = np.max(np.abs(values[replica].astype(np.float64) - values[0]))
            raise ValueError(
                f"{ENV_FLAG}: the value at {name or '<output>'} that "
                f"{getattr(fn, '__name__', 'fn')} returns as mf.Mirrored differs across "
                f"replicas (replica {replica} vs 0, max abs difference {diff:.3g}). Values "
                "every replica must agree on need an all-reduce first: all-reduce the "
                "gradients (mf.apply_gradients, or get_replica_context().all_reduce) before "
                f"the update. Received: {values.shape[0]} differing replica values")


@functools.partial(jax.jit, static_argnames=("sharding",))
def _first_replica(values: list[jax.Array], *, sharding: Any) -> list[jax.Array]:
    return jax.lax.with_sharding_constraint([v[0] for v in values], sharding)
