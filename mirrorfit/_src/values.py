"""Distributed values, as in ``tf.distribute``: `PerReplica`, `ReduceOp` and batch masks.

* `PerReplica`: one value per replica, stored as **one global array** ``[num_replicas, ...]``
  sharded over the mesh (replica ``r`` holds row ``r``), plus the padding mask of the batch it
  was computed from, if any.

Mirrored values are plain ``jax.Array`` s with sharding ``NamedSharding(mesh, P())``
(``strategy.replicate``), so they compose with every JAX transformation.
* `batch_mask`: the boolean padding mask of a distributed batch.
"""

from __future__ import annotations

import enum
import weakref
from typing import Any

import jax
import numpy as np


class ReduceOp(enum.Enum):
    """How `MirroredStrategy.reduce` and ``all_reduce`` combine values (``tf.distribute.ReduceOp``)."""

    SUM = "SUM"
    MEAN = "MEAN"

    @classmethod
    def resolve(cls, op: Any, name: str = "reduce_op") -> ReduceOp:
        """Accepts a `ReduceOp` or its name ("SUM"/"sum", "MEAN"/"mean").

        Raises:
            ValueError: for anything else, naming the argument.
        """
        if isinstance(op, cls):
            return op
        if isinstance(op, str) and op.upper() in cls.__members__:
            return cls[op.upper()]
        raise ValueError(f"{name} must be mf.ReduceOp.SUM or mf.ReduceOp.MEAN (or 'SUM'/'MEAN')."
                         f" Received: {name}={op!r}")


class PerReplica:
    """Per-replica values: ``values`` is ``[num_replicas, ...]``, row ``r`` on replica ``r``.

    Attributes:
        values: global ``jax.Array`` sharded ``P("batch")`` along its leading replica axis.
        mask: ``None``, or bool ``[num_replicas, per_replica_batch]``: which rows of the
            per-replica batch axis (axis 1 of ``values``) are real, not padding.
    """

    __slots__ = ("values", "mask")

    def __init__(self, values: jax.Array, mask: jax.Array | None = None):
        self.values = values
        self.mask = mask

    @property
    def num_replicas(self) -> int:
        return self.values.shape[0]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)

    def __repr__(self) -> str:
        shape = self.values.shape
        return (f"PerReplica({self.values.dtype}{list(shape[1:])} on {shape[0]} replicas"
                f"{', masked' if self.mask is not None else ''})")


# Masks of distributed batches, keyed by the id of each leaf of the batch. An entry lives as
# long as that array does.
_MASKS: dict[int, jax.Array] = {}


def register_mask(batch: Any, mask: jax.Array) -> None:
    """Records the padding mask ``[global_batch]`` of every leaf of a distributed ``batch``."""
    for leaf in jax.tree.leaves(batch):
        _MASKS[id(leaf)] = mask
        weakref.finalize(leaf, _MASKS.pop, id(leaf), None)


def batch_mask(batch: Any) -> jax.Array | None:
    """The padding mask of a batch from ``experimental_distribute_dataset``.

    Args:
        batch: a distributed batch (pytree of global arrays ``[global_batch, ...]``).

    Returns:
        bool ``[global_batch]``, sharded like the batch: ``True`` for real rows, ``False`` for
        the rows added to make the batch divide by the replica count. ``None`` if ``batch``
        did not come from a distributed dataset.
    """
    leaves = jax.tree.leaves(batch)
    return next((_MASKS[id(leaf)] for leaf in leaves if id(leaf) in _MASKS), None)
