"""``strategy.run`` and the cross-replica operations on its results (reduce, gather, local results).

`run` classifies each argument leaf once per call:

* `PerReplica` -> spec ``P("batch")`` on its replica axis; the replica gets its own row;
* a ``jax.Array`` split along ``"batch"`` on this mesh (a distributed batch) -> its shard;
* anything else array-like (replicated or host arrays, NumPy) -> ``P()``, whole;
* Python scalars, strings and ``None`` -> compile-time constants.

A replica function may also read and assign the `Variable` s it closes over (a model's
weights, an optimizer's slots, metric totals), as in a ``tf.distribute`` custom loop: on the
first call for a compile key, one abstract trace finds them
(`mirrorfit._src.variables.lifting`); their values become replicated inputs, ``fn`` runs
with them mapped in a `StatelessScope`, and each assigned value is combined across replicas
by its variable's ``aggregation`` ("none": the replicas agree, as after an all-reduced
gradient update, and it is kept; "mean": ``pmean``; "sum": ``old + psum(new - old)``, as
metric totals; "only_first_replica": replica 0's) and assigned back after the call.

The mapped function is compiled once per (function, argument structure, shapes and
constants; the variables it uses are found then) through `compile_per_replica`, the one
compile path that ``fit``, ``evaluate`` and ``predict`` use too. A `Runner` per strategy
owns those compiled functions and the custom loop's `InFlight` bound.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute import fsdp, mirrored_outputs
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh, InFlight
from mirrorfit._src.distribute.replica_context import ReplicaContext, replica_context
from mirrorfit._src.distribute.values import (
    Mirrored,
    PerReplica,
    ReduceOp,
    batch_mask,
    unwrap_mirrored,
)
from mirrorfit._src.variables import call_context
from mirrorfit._src.variables.lifting import UsedVariables, call_with_values, check_assigned

_STATIC = (bool, int, float, complex, str, type(None))
_CALLS = threading.local()


def run_calls() -> int:
    """How many times ``strategy.run`` was called in this thread, by any strategy.

    `mirrorfit.function` compares it before and after a call of the function it wraps to
    learn whether that function calls ``run`` (then it stays a Python function: ``run``
    compiles) or not (then it compiles the function as a whole).
    """
    return getattr(_CALLS, "count", 0)


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """One compile of ``run``: the program, its batch-aligned outputs, its variables."""

    program: Callable
    aligned: list[bool] | None  # per output leaf, with a padded batch; None without one
    used: UsedVariables


def spec_of(mesh: DeviceMesh, leaf: Any) -> P:
    """How a per-replica function receives an argument leaf.

    A ``jax.Array`` split over this mesh's ``"batch"`` axis keeps its own spec (the replica
    gets its shard); everything else gets ``P()`` (whole).
    """
    sharding = getattr(leaf, "sharding", None)
    if (isinstance(sharding, NamedSharding) and sharding.mesh == mesh.mesh
            and BATCH_AXIS in tuple(sharding.spec)):
        return sharding.spec
    return P()


def specs_like(mesh: DeviceMesh, example_args: tuple) -> tuple:
    """`spec_of` for every leaf of ``example_args``: the ``in_specs`` of a compiled call."""
    return jax.tree.map(lambda leaf: spec_of(mesh, leaf), tuple(example_args))


def compile_per_replica(mesh: DeviceMesh, fn: Callable, in_specs: Any, out_specs: Any, *,
                        donate_argnums: int | tuple[int, ...] = (), masked: bool = False,
                        gradient_reduce_op: Any = ReduceOp.SUM) -> Callable:
    """The one compile path of ``fit``, ``evaluate``, ``predict`` and ``strategy.run``.

    ``fn`` is traced inside a `ReplicaContext` (so `mirrorfit.get_replica_context` gives the
    collectives) and mapped over ``mesh`` with ``jax.jit(jax.shard_map(...))``.

    Args:
        mesh: the `DeviceMesh` to run on.
        fn: the per-replica function.
        in_specs, out_specs: ``PartitionSpec`` pytree prefixes of its arguments and outputs
            (`specs_like` derives ``in_specs`` from placed arguments).
        donate_argnums: positional arguments whose buffers the call may reuse.
        masked: whether the last positional argument is the batch mask (bool
            ``[global_batch]``, spec ``P("batch")``); ``fn`` does not receive it, the
            replica context holds this replica's part.
        gradient_reduce_op: the replica context's ``gradient_reduce_op``: how
            ``optimizer.apply_gradients`` inside ``fn`` all-reduces gradients (`ReduceOp.SUM`
            for losses from `compute_average_loss`, `ReduceOp.MEAN` for per-replica means).

    Returns:
        The compiled callable (compiled on first call, again only for new shapes).
    """
    num_replicas = mesh.num_replicas_in_sync

    @functools.wraps(fn)
    def per_replica(*args):
        mask = None
        if masked:
            *args, mask = args
        with replica_context(ReplicaContext(
                num_replicas, mask, in_run=True, gradient_reduce_op=gradient_reduce_op,
                mesh=mesh)):
            return fn(*args)

    return mesh.compile_replica_fn(per_replica, in_specs, out_specs,
                                   donate_argnums=donate_argnums)


_KEY = jax.ShapeDtypeStruct((2,), np.uint32)  # a call's raw key data, `Runner._call_key`

class Runner:
    """``strategy.run`` and the cross-replica operations on its results, for one mesh.

    It owns the compiled functions of ``run`` (one per function, argument structure, shapes
    and constants) and the `InFlight` bound of the custom loop.

    Args:
        mesh: the strategy's `DeviceMesh`.
    """

    def __init__(self, mesh: DeviceMesh):
        self._mesh = mesh
        self._compiled: dict[Any, _Compiled] = {}
        self._in_flight = InFlight()
        self._calls = 0  # numbers each call's key (`_call_key`)

    @property
    def num_compiled(self) -> int:
        """How many distinct (function, argument structure) pairs `run` has compiled."""
        return len(self._compiled)

    def run(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """See `MirroredStrategy.run`."""
        mesh = self._mesh
        _CALLS.count = run_calls() + 1
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
            elif (spec := spec_of(mesh, leaf)) != P():
                kind, value = "distributed", leaf
            else:
                kind, value = "replicated", self._replicated(leaf)
            kinds.append((kind, spec))
            dynamic.append(value)
            key.append((kind, value.shape, value.dtype))
        if mask is not None:
            dynamic.append(mask)
        cache_key = (fn, treedef, tuple(key), mask is not None)
        entry = self._compiled.get(cache_key)
        if entry is None:
            entry = self._compiled[cache_key] = self._compile(fn, treedef, kinds, dynamic,
                                                               mask is not None)
        outputs, new_values = entry.program(
            [*(self._replicated(v.value) for v in entry.used.read), self._call_key()], *dynamic)
        for variable, value in zip(entry.used.assigned, new_values):
            variable.assign(value)
        self._in_flight.push((outputs, new_values))
        if mask is None:
            return mirrored_outputs.resolve(jax.tree.map(PerReplica, outputs), mesh, fn)
        assert entry.aligned is not None  # computed whenever there is a mask (in the key)
        per_replica_mask = mask.reshape(mesh.num_replicas_in_sync, -1)
        leaves, treedef = jax.tree.flatten(outputs)
        return mirrored_outputs.resolve(jax.tree.unflatten(treedef, [
            PerReplica(v, per_replica_mask if a else None)
            for v, a in zip(leaves, entry.aligned)]), mesh, fn)

    def _call_key(self) -> jax.Array:
        """Raw key data ``uint32[2]`` for this call: random layers and ``mf.random`` draws in
        the replica function fold it with the replica index, so they differ per call and per
        replica (seeded by `mirrorfit.utils.set_random_seed`)."""
        self._calls += 1
        return self._replicated(np.array([call_context.stream_seed(), self._calls], np.uint32))

    def _replicated(self, value: Any) -> jax.Array:
        """``value`` mirrored on this mesh (kept if mirrored, or split as a ZeRO state slot)."""
        mesh = self._mesh
        if isinstance(value, jax.Array) and (value.sharding == mesh.replicated_sharding
                                             or spec_of(mesh, value) != P()):
            return value
        return mesh.replicate_arrays(value if isinstance(value, jax.Array) else np.asarray(value))

    def _compile(self, fn, treedef, kinds, dynamic, has_mask) -> _Compiled:
        """Finds the variables ``fn`` uses (one abstract trace), then compiles it with them."""
        found: list[UsedVariables] = []
        probe = _compile(self._mesh, fn, treedef, kinds, has_mask, UsedVariables(), found)
        shapes = jax.eval_shape(probe, [_KEY], *dynamic)[0]
        used = found[-1]
        program = _compile(self._mesh, fn, treedef, kinds, has_mask, used, None)
        values = [*(jax.ShapeDtypeStruct(v.shape, v.dtype) for v in used.read), _KEY]
        aligned = (_batch_aligned(self._mesh, program, kinds, values, dynamic, shapes)
                   if has_mask else None)
        return _Compiled(program, aligned, used)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """See `MirroredStrategy.reduce`."""
        mesh = self._mesh
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
            if op is ReduceOp.SUM and mesh.num_replicas_in_sync > 1:
                raise ValueError("A value that is not PerReplica is the same on every replica "
                                 "and cannot be reduced with SUM; use MEAN, or pass the result "
                                 f"of strategy.run. Received: value of type {type(v).__name__}")
            v = jnp.asarray(v)
            if axis is None:
                return v
            return jnp.sum(v, axis) if op is ReduceOp.SUM else jnp.mean(v, axis)

        return _apply(value, lambda items: _reduce_values(
            items, op=op, axis=next(iter(axes)), sharding=mesh.replicated_sharding), other,
            self._in_flight)

    def gather(self, value: Any, axis: int = 0) -> Any:
        """See `MirroredStrategy.gather`."""
        mesh = self._mesh
        leaves = jax.tree.leaves(value, is_leaf=_is_per_replica)
        axes = {_check_axis(v, axis) for v in leaves if isinstance(v, PerReplica)} or {axis}
        if len(axes) > 1:
            raise ValueError("axis must name the same axis of every value. "
                             f"Received: axis={axis}")
        norm = next(iter(axes))

        def per_leaf(items):
            joined = _gather_values(items, axis=norm, sharding=mesh.replicated_sharding)
            if norm != 0:
                return joined
            return [j if m is None else j[np.flatnonzero(mesh.fetch(m).reshape(-1))]
                    for j, (_, m) in zip(joined, items)]

        def other(v):
            return jnp.concatenate([jnp.asarray(v)] * mesh.num_replicas_in_sync, axis)

        return _apply(value, per_leaf, other, self._in_flight)

    def local_results(self, value: Any) -> tuple:
        """See `MirroredStrategy.experimental_local_results`."""
        order = {d: i for i, d in enumerate(self._mesh.devices)}
        if isinstance(value, (PerReplica, Mirrored)):
            array = value.values if isinstance(value, PerReplica) else value.value
            shards = sorted(array.addressable_shards, key=lambda s: order[s.device])
            return tuple(s.data[0] if isinstance(value, PerReplica) else s.data for s in shards)
        return (value,)


def _find_mask(leaves) -> jax.Array | None:
    """The padding mask ``[global_batch]`` of the first masked batch or PerReplica argument."""
    for leaf in leaves:
        if isinstance(leaf, PerReplica):
            if leaf.mask is not None:
                return leaf.mask.reshape(-1)
        elif (found := batch_mask(leaf)) is not None:
            return found
    return None


def _batch_aligned(mesh, compiled, kinds, variable_shapes, dynamic, shapes_now) -> list[bool]:
    """Which outputs have the per-replica batch as their first axis.

    Found by tracing once more (no compile) with one more row per replica in every batch
    argument: an output is batch-aligned when its first per-replica axis grows with it.
    ``variable_shapes`` are the variables' values, the program's first argument;
    ``shapes_now`` the outputs' shapes for ``dynamic`` (from the probe trace).
    """
    n = mesh.num_replicas_in_sync
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

    base = jax.tree.leaves(shapes_now)
    try:
        grown = jax.tree.leaves(jax.eval_shape(compiled, variable_shapes, *shapes(1))[0])
    except Exception:  # noqa: BLE001 - any failure: fn is not shape-polymorphic, so fall
        # back to matching the row count
        return [v.ndim > 1 and v.shape[1] == rows for v in base]
    return [v.ndim > 1 and g.shape[1] == v.shape[1] + 1 for v, g in zip(base, grown)]


def _is_per_replica(v):
    return isinstance(v, PerReplica)


def _compile(mesh, fn, treedef, kinds, has_mask, used: UsedVariables,
             found: list[UsedVariables] | None):
    """``fn`` as ``program(variable_values, *dynamic) -> (outputs, new_values)``.

    ``variable_values`` are ``used.read`` 's values (replicated, or a sharded optimizer state's
    blocks); ``new_values`` are ``used.assigned`` 's, combined by their aggregation (a block
    kept). With ``found``, the trace appends the variables ``fn`` used (placed on ``mesh``).
    """
    place = None if found is None else mesh.placed_here
    specs = [spec if kind != "replicated" else P() for kind, spec in kinds if kind != "static"]
    specs += [P(BATCH_AXIS)] * has_mask  # the mask's

    def per_replica(values, *dynamic):
        *values, call_key = values  # the last one is the call's key (`Runner._call_key`)
        rng = jax.random.fold_in(jax.random.wrap_key_data(call_key), lax.axis_index(BATCH_AXIS))
        dynamic_values = iter(dynamic)
        leaves = []
        for kind, constant in kinds:
            if kind == "static":
                leaves.append(constant)
            else:
                value = next(dynamic_values)
                leaves.append(value[0] if kind.endswith("per_replica") else value)
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        with call_context.call_context(rng=jax.random.key_data(rng)):
            out, new_values, this_trace = call_with_values(fn, used, values, args, kwargs, place)
        if found is not None:
            found.append(this_trace)
        else:
            check_assigned(fn, used, this_trace)
        old_values = dict(zip(map(id, used.read), values))
        new_values = [new if spec != P() else aggregate(v, old_values[id(v)], new)
                      for v, new, spec in zip(used.assigned, new_values, assigned_specs)]
        return jax.tree.map(lambda o: jnp.expand_dims(jnp.asarray(o), 0), out), new_values

    read_specs = [spec_of(mesh, v.value) for v in used.read]
    assigned_specs = [spec_of(mesh, v.value) for v in used.assigned]
    program = fsdp.whole_variables(mesh, per_replica, used)  # split params read whole
    return compile_per_replica(mesh, program, ([*read_specs, P()], *specs),
                               (P(BATCH_AXIS), assigned_specs), masked=has_mask)


def aggregate(variable: Any, old: jax.Array, new: jax.Array) -> jax.Array:
    """The value every replica keeps of a variable assigned in a replica function, by its
    ``aggregation`` (Keras' and tf.distribute's meanings): "none" keeps ``new`` (the
    replicas agree), "mean" averages, "sum" adds the replicas' changes to ``old`` (the value
    before, the same on every replica), "only_first_replica" takes replica 0's."""
    if variable.aggregation == "mean":
        return (lax.psum(new, BATCH_AXIS) / lax.psum(1, BATCH_AXIS)).astype(new.dtype)
    if variable.aggregation == "sum":
        return old + lax.psum(new - old, BATCH_AXIS)
    if variable.aggregation == "only_first_replica":
        first = lax.axis_index(BATCH_AXIS) == 0
        return lax.psum(jnp.where(first, new, jnp.zeros_like(new)), BATCH_AXIS)
    return new


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


def _apply(value, per_leaf, other, in_flight: InFlight):
    """Runs ``per_leaf`` once over all `PerReplica` leaves of ``value``, ``other`` on the rest."""
    leaves, treedef = jax.tree.flatten(value, is_leaf=_is_per_replica)
    items = [(v.values, v.mask) for v in leaves if isinstance(v, PerReplica)]
    results = iter(per_leaf(items) if items else [])
    outputs = [next(results) if isinstance(v, PerReplica) else other(v) for v in leaves]
    in_flight.push(outputs)
    return jax.tree.unflatten(treedef, outputs)
