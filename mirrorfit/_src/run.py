"""``strategy.run`` and the cross-replica operations on its results (reduce, gather, local results).

`run` classifies each argument leaf once per call:

* `PerReplica` -> spec ``P("batch")`` on its replica axis; the replica gets its own row;
* a ``jax.Array`` split along ``"batch"`` on this mesh (a distributed batch) -> its shard;
* anything else array-like (replicated or host arrays, NumPy) -> ``P()``, whole;
* Python scalars, strings and ``None`` -> compile-time constants.

The mapped function is compiled once per (function, argument structure, shapes and
constants) through `MirroredStrategy.compile_replica_fn`, the same path ``fit`` uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.replica_context import ReplicaContext, replica_context
from mirrorfit._src.strategy import BATCH_AXIS, MirroredStrategy
from mirrorfit._src.values import Mirrored, PerReplica, ReduceOp, batch_mask, unwrap_mirrored

_STATIC = (bool, int, float, complex, str, type(None))


def spec_of(strategy: MirroredStrategy, leaf: Any) -> P:
    """How a per-replica function receives an argument leaf.

    A ``jax.Array`` split over this mesh's ``"batch"`` axis keeps its own spec (the replica
    gets its shard); everything else gets ``P()`` (whole).
    """
    sharding = getattr(leaf, "sharding", None)
    if (isinstance(sharding, NamedSharding) and sharding.mesh == strategy.mesh
            and BATCH_AXIS in tuple(sharding.spec)):
        return sharding.spec
    return P()


def replica_function(strategy: MirroredStrategy, fn: Callable, example_args: tuple,
                     out_specs: Any, *, donate_argnums: int | tuple[int, ...] = ()) -> Callable:
    """``fn`` compiled per replica for arguments laid out like ``example_args``.

    The machinery of `run` for a caller that calls one function many times with one
    argument structure (``fit``'s train step): specs come from `spec_of`, ``fn`` sees the
    replica context, and the result is called directly, with no per-call classification.
    """

    @functools.wraps(fn)
    def per_replica(*args):
        with replica_context(ReplicaContext(strategy.num_replicas_in_sync, in_run=True)):
            return fn(*args)

    in_specs = jax.tree.map(lambda leaf: spec_of(strategy, leaf), tuple(example_args))
    return strategy.compile_replica_fn(per_replica, in_specs, out_specs,
                                       donate_argnums=donate_argnums)


def run(strategy: MirroredStrategy, fn: Callable, args: tuple = (), kwargs: dict | None = None
        ) -> Any:
    """See `MirroredStrategy.run`."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable run once per replica. Received: fn={fn!r}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of arguments. Received: args={args!r}")
    args, kwargs = unwrap_mirrored((tuple(args), dict(kwargs or {})))
    leaves, treedef = jax.tree.flatten((args, kwargs), is_leaf=_is_per_replica)
    mask = _find_mask(leaves)
    kinds, dynamic, key = [], [], []
    for leaf in leaves:
        if isinstance(leaf, _STATIC):
            kinds.append(("static", leaf))
            key.append(("static", type(leaf), leaf))
            continue
        spec = P(BATCH_AXIS)
        if isinstance(leaf, PerReplica):
            kind, value = ("masked_per_replica" if leaf.mask is not None else "per_replica",
                           leaf.values)
        elif (spec := spec_of(strategy, leaf)) != P():
            kind, value = "distributed", leaf
        else:
            kind, value = "replicated", leaf
            if not isinstance(value, jax.Array) or value.sharding != strategy.replicated_sharding:
                value = strategy.replicate_arrays(np.asarray(value) if not isinstance(value, jax.Array)
                                           else value)
        kinds.append((kind, spec))
        dynamic.append(value)
        key.append((kind, value.shape, value.dtype))
    if mask is not None:
        dynamic.append(mask)
    cache_key = (fn, treedef, tuple(key), mask is not None)
    entry = strategy._run_cache.get(cache_key)
    if entry is None:
        compiled = _compile(strategy, fn, treedef, kinds, mask is not None)
        aligned = None if mask is None else _batch_aligned(strategy, compiled, kinds, dynamic)
        entry = strategy._run_cache[cache_key] = (compiled, aligned)
    compiled, aligned = entry
    outputs = compiled(*dynamic)
    _bound_in_flight(strategy, outputs)
    if mask is None:
        return jax.tree.map(PerReplica, outputs)
    per_replica_mask = mask.reshape(strategy.num_replicas_in_sync, -1)
    leaves, treedef = jax.tree.flatten(outputs)
    return jax.tree.unflatten(treedef, [PerReplica(v, per_replica_mask if a else None)
                                        for v, a in zip(leaves, aligned)])


def _find_mask(leaves) -> jax.Array | None:
    """The padding mask ``[global_batch]`` of the first masked batch or PerReplica argument."""
    for leaf in leaves:
        if isinstance(leaf, PerReplica):
            if leaf.mask is not None:
                return leaf.mask.reshape(-1)
        elif (found := batch_mask(leaf)) is not None:
            return found
    return None


def _batch_aligned(strategy, compiled, kinds, dynamic) -> list[bool]:
    """Which outputs have the per-replica batch as their first axis.

    Found by tracing once more (no compile) with one more row per replica in every batch
    argument: an output is batch-aligned when its first per-replica axis grows with it.
    """
    n = strategy.num_replicas_in_sync
    rows = dynamic[-1].shape[0] // n

    def shapes(extra):
        values = iter(dynamic)
        structs = []
        for kind, spec in kinds:
            if kind == "static":
                continue
            value = next(values)
            shape = value.shape
            if kind == "distributed" and spec == P(BATCH_AXIS) and shape[0] == n * rows:
                shape = (n * (rows + extra), *shape[1:])
            elif kind == "masked_per_replica":
                shape = (n, rows + extra, *shape[2:])
            structs.append(jax.ShapeDtypeStruct(shape, value.dtype))
        structs.append(jax.ShapeDtypeStruct((n * (rows + extra),), dynamic[-1].dtype))
        return structs

    base = jax.tree.leaves(jax.eval_shape(compiled, *shapes(0)))
    try:
        grown = jax.tree.leaves(jax.eval_shape(compiled, *shapes(1)))
    except Exception:  # fn is not shape-polymorphic: fall back to matching the row count
        return [v.ndim > 1 and v.shape[1] == rows for v in base]
    return [v.ndim > 1 and g.shape[1] == v.shape[1] + 1 for v, g in zip(base, grown)]


def _is_per_replica(v):
    return isinstance(v, PerReplica)


def _compile(strategy, fn, treedef, kinds, has_mask):
    specs = [spec if kind != "replicated" else P() for kind, spec in kinds if kind != "static"]
    if has_mask:
        specs.append(P(BATCH_AXIS))

    def per_replica(*dynamic):
        dynamic = list(dynamic)
        mask = dynamic.pop() if has_mask else None
        values = iter(dynamic)
        leaves = []
        for kind, constant in kinds:
            if kind == "static":
                leaves.append(constant)
            else:
                value = next(values)
                leaves.append(value[0] if kind.endswith("per_replica") else value)
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        context = ReplicaContext(strategy.num_replicas_in_sync, mask, in_run=True)
        with replica_context(context):
            out = fn(*args, **kwargs)
        return jax.tree.map(lambda o: jnp.expand_dims(jnp.asarray(o), 0), out)

    return strategy.compile_replica_fn(per_replica, tuple(specs), P(BATCH_AXIS))


def _check_axis(value: PerReplica, axis: int) -> int:
    rank = value.values.ndim - 1
    if not -rank <= axis < rank:
        raise ValueError(f"axis must be within the rank {rank} of the per-replica value. "
                         f"Received: axis={axis}")
    return axis % rank


def _joined(values: jax.Array, mask: jax.Array | None, axis: int):
    """Per-replica values ``[n, ...]`` concatenated along ``axis`` of one replica's value,
    with the mask of the concatenated rows (``axis == 0`` of a masked value only)."""
    joined = jnp.concatenate(list(values), axis=axis)
    return joined, (mask.reshape(-1) if mask is not None and axis == 0 else None)


@functools.partial(jax.jit, static_argnames=("op", "axis", "sharding"))
def _reduce_values(items, *, op: ReduceOp, axis: int | None, sharding):
    """One compiled reduction for every `PerReplica` leaf: ``items`` are (values, mask).

    Results are mirrored (``sharding`` is ``P()``), so every process can read them."""
    out = []
    for values, mask in items:
        if axis is None:
            total = jnp.sum(values, 0)
            out.append(total if op is ReduceOp.SUM
                       else (total / values.shape[0]).astype(values.dtype))  # ints stay int
            continue
        joined, rows = _joined(values, mask, axis)
        if rows is None:
            out.append(jnp.sum(joined, axis) if op is ReduceOp.SUM else jnp.mean(joined, axis))
            continue
        weights = rows.reshape(rows.shape + (1,) * (joined.ndim - 1))
        total = jnp.sum(jnp.where(weights, joined, 0), axis)
        out.append(total if op is ReduceOp.SUM else total / jnp.sum(rows))
    return jax.lax.with_sharding_constraint(out, sharding)


@functools.partial(jax.jit, static_argnames=("axis", "sharding"))
def _gather_values(items, *, axis: int, sharding):
    return jax.lax.with_sharding_constraint(
        [_joined(values, mask, axis)[0] for values, mask in items], sharding)


def _apply(strategy, value, per_leaf, other):
    """Runs ``per_leaf`` once over all `PerReplica` leaves of ``value``, ``other`` on the rest."""
    leaves, treedef = jax.tree.flatten(value, is_leaf=_is_per_replica)
    items = [(v.values, v.mask) for v in leaves if isinstance(v, PerReplica)]
    results = iter(per_leaf(items) if items else [])
    outputs = [next(results) if isinstance(v, PerReplica) else other(v) for v in leaves]
    _bound_in_flight(strategy, outputs)
    return jax.tree.unflatten(treedef, outputs)


def reduce(strategy: MirroredStrategy, reduce_op: Any, value: Any, axis: int | None = None
           ) -> Any:
    """See `MirroredStrategy.reduce`."""
    op = ReduceOp.resolve(reduce_op)
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
        raise TypeError(f"axis must be None or an int. Received: axis={axis!r}")
    leaves = jax.tree.leaves(value, is_leaf=_is_per_replica)
    axes = {_check_axis(v, axis) for v in leaves if isinstance(v, PerReplica)} if (
        axis is not None) else {None}
    if len(axes) > 1:
        raise ValueError("axis must name the same axis of every value (use a non-negative "
                         f"axis for values of different ranks). Received: axis={axis}")

    def other(v):
        if op is ReduceOp.SUM and strategy.num_replicas_in_sync > 1:
            raise ValueError("A value that is not PerReplica is the same on every replica "
                             "and cannot be reduced with SUM; use MEAN, or pass the result "
                             f"of strategy.run. Received: value of type {type(v).__name__}")
        v = jnp.asarray(v)
        if axis is None:
            return v
        return jnp.sum(v, axis) if op is ReduceOp.SUM else jnp.mean(v, axis)

    return _apply(strategy, value,
                  lambda items: _reduce_values(items, op=op, axis=next(iter(axes)),
                                                sharding=strategy.replicated_sharding), other)


def gather(strategy: MirroredStrategy, value: Any, axis: int = 0) -> Any:
    """See `MirroredStrategy.gather`."""
    leaves = jax.tree.leaves(value, is_leaf=_is_per_replica)
    axes = {_check_axis(v, axis) for v in leaves if isinstance(v, PerReplica)} or {axis}
    if len(axes) > 1:
        raise ValueError("axis must name the same axis of every value. "
                         f"Received: axis={axis}")
    norm = next(iter(axes))

    def per_leaf(items):
        joined = _gather_values(items, axis=norm, sharding=strategy.replicated_sharding)
        if norm != 0:
            return joined
        return [j if m is None else j[np.flatnonzero(strategy.fetch(m).reshape(-1))]
                for j, (_, m) in zip(joined, items)]

    def other(v):
        return jnp.concatenate([jnp.asarray(v)] * strategy.num_replicas_in_sync, axis)

    return _apply(strategy, value, per_leaf, other)


def _bound_in_flight(strategy: MirroredStrategy, outputs: Any) -> None:
    """Waits for the previous dispatch so that at most two calls with collectives are queued.

    On the CPU backend with several devices, XLA's in-process all-reduce deadlocks when many
    collective executions are queued, so a custom loop is bounded as ``fit`` is.
    """
    previous, strategy._in_flight = strategy._in_flight, outputs
    for leaf in jax.tree.leaves(previous, is_leaf=_is_per_replica):
        array = leaf.values if isinstance(leaf, PerReplica) else leaf
        if isinstance(array, jax.Array) and not array.is_deleted():
            array.block_until_ready()


def local_results(strategy: MirroredStrategy, value: Any) -> tuple:
    """See `MirroredStrategy.experimental_local_results`."""
    order = {d: i for i, d in enumerate(strategy.devices)}
    if isinstance(value, (PerReplica, Mirrored)):
        array = value.values if isinstance(value, PerReplica) else value.value
        shards = sorted(array.addressable_shards, key=lambda s: order[s.device])
        return tuple(s.data[0] if isinstance(value, PerReplica) else s.data for s in shards)
    return (value,)
