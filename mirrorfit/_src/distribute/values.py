"""Distributed values, as in ``tf.distribute``: `PerReplica`, `ReduceOp` and batch masks.

* `PerReplica`: one value per replica, stored as **one global array** ``[num_replicas, ...]``
  sharded over the mesh (replica ``r`` holds row ``r``), plus the padding mask of the batch it
  was computed from, if any.
* `Mirrored`: what ``strategy.replicate`` returns, one ``jax.Array`` with sharding
  ``NamedSharding(mesh, P())`` in a thin wrapper that prints as mirrored. It is a pytree node
  over that array and behaves as the array (operators, ``jnp`` functions, attributes), so it
  composes with ``jit``, ``grad``, Flax and Optax.
* `batch_mask`: the boolean padding mask of a distributed batch.
"""

from __future__ import annotations

import enum
import weakref
from typing import Any, ClassVar

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

    __slots__ = ("mask", "values")

    def __init__(self, values: jax.Array, mask: jax.Array | None = None):
        self.values = values
        self.mask = mask

    @property
    def num_replicas(self) -> int:
        """The number of replicas: the leading axis of `values`."""
        return self.values.shape[0]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)

    def __repr__(self) -> str:
        shape = self.values.shape
        return (f"PerReplica({self.values.dtype}{list(shape[1:])} on {shape[0]} replicas"
                f"{', masked' if self.mask is not None else ''})")


@jax.tree_util.register_pytree_node_class
class Mirrored:
    """A value mirrored on every device of a strategy; see the module docstring.

    Attributes:
        value: the replicated ``jax.Array``.
    """

    __slots__ = ("value",)
    __hash__: ClassVar[None] = None  # unhashable, like arrays (its __eq__ is elementwise)

    def __init__(self, value: Any):
        self.value = value

    def tree_flatten(self):
        """JAX's pytree protocol: the mirrored array is the one leaf, so a `Mirrored`
        passes through ``jax.jit`` and ``jax.tree`` functions.
        """
        return (self.value,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        """JAX's pytree protocol: a `Mirrored` of the one leaf ``children[0]``."""
        del aux
        return cls(children[0])

    def __jax_array__(self):
        return self.value

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype=dtype)

    def __getattr__(self, name: str):
        if name == "value":  # not yet set (e.g. during copy); avoid recursion
            raise AttributeError(name)
        return getattr(self.value, name)

    def __getitem__(self, index):
        return self.value[index]

    def __len__(self) -> int:
        return len(self.value)

    def __repr__(self) -> str:
        value = self.value
        if not hasattr(value, "dtype"):  # e.g. jax.tree.map(lambda p: p.shape, mirrored)
            return f"Mirrored({value!r})"
        sharding = getattr(value, "sharding", None)
        where = f"on {len(sharding.device_set)} devices" if sharding is not None else "traced"
        return f"Mirrored({value.dtype}{list(value.shape)}, {where})"


def _delegate(name: str):
    def method(self, *args):
        args = [a.value if isinstance(a, Mirrored) else a for a in args]
        return getattr(self.value, name)(*args)

    method.__name__ = name
    return method


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
            "xor", "lt", "le", "gt", "ge"):
    for _name in (f"__{_op}__", f"__r{_op}__"):
        if not _name.startswith("__r") or _op not in ("lt", "le", "gt", "ge"):
            setattr(Mirrored, _name, _delegate(_name))
for _name in ("__neg__", "__pos__", "__abs__", "__invert__", "__float__", "__int__",
              "__bool__", "__eq__", "__ne__"):
    setattr(Mirrored, _name, _delegate(_name))


def unwrap_mirrored(tree: Any) -> Any:
    """Replaces `Mirrored` nodes by the arrays they hold."""
    return jax.tree.map(lambda v: v.value if isinstance(v, Mirrored) else v, tree,
                        is_leaf=lambda v: isinstance(v, Mirrored))


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
