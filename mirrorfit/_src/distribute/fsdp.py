"""Sharded params (ZeRO-3/FSDP): their placement, and what a step does with them.

With ``MirroredStrategy(shard_params=True)`` every param leaf is split over the ``"batch"``
axis as its optimizer state is (ZeRO-1/2, `mirrorfit._src.distribute.zero`): along its
`zero.shard_axis`, its first axis that divides by the replica count. It stays a
``jax.Array`` of the leaf's full shape (`place_params`), of which each device holds one
block, so ``jax.device_get`` (``model.params``, ``get_weights``, checkpoints, saved models)
reads the whole, and a run resumes at any replica count, sharded or mirrored. A leaf that
no axis divides (a scalar, a bias of 10 over 8 replicas) stays mirrored; `report_mirrored`
names those once, in a log line, and ``model.summary()`` in its last line
(`summary_line`).

A step receives its params as this replica's blocks (the step's in-specs are the leaves'
own: `spec_axes` reads the axis of each) and

1. all-gathers them (`zero.gather_along`, ``lax.all_gather(..., tiled=True)``, one per
   leaf). ``fit`` 's built-in train step differentiates with respect to the blocks,
   through the all-gathers, inside ``jax.checkpoint`` with `remat_policy`
   (`rematerialized`): the gathered weights (and their casts, transposes and reshapes) are
   not kept from the forward pass to the backward pass but all-gathered again there, and
   the transpose of each all-gather is the reduce-scatter of its gradient (each replica
   receives the sum of its block). Every other step (a model's own ``train_step``,
   ``evaluate``, ``predict``, a custom loop's ``strategy.run``: `whole_variables`) gathers
   the whole tree once, at its start, since the user's code reads whole weights;
2. updates only its blocks (`mirrorfit._src.optimizers.update.apply_reduced`), which it
   all-gathers again for code that goes on reading the weights after the update (a GAN's
   second model);
3. returns its blocks (`zero.kept_blocks`): the updated blocks themselves where that
   all-gather is read by nothing else (XLA drops it), else this replica's slice.

The all-gathers are written per leaf, at the start of the forward pass (the whole tree):
which of them are live at once is the compiler's schedule. XLA's GPU pipeline keeps
``jax.checkpoint`` 's barriers until after scheduling; XLA:CPU removes them before its
common-subexpression pass, which merges the backward pass's all-gathers into the forward
pass's (see ``docs/guides/sharded_params.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute import zero
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh
from mirrorfit._src.distribute.replica_context import get_replica_context

logger = logging.getLogger("mirrorfit")

RECOMPUTED = frozenset({
    "all_gather", "convert_element_type", "transpose", "reshape", "broadcast_in_dim",
    "squeeze", "copy"})
"""The primitives `remat_policy` does not save: the all-gathers of the params, and the
cheap copies a forward pass makes of them (casts under mixed precision, transposes,
reshapes, broadcasts)."""


def remat_policy(prim: Any, *avals: Any, **params: Any) -> bool:
    """The ``jax.checkpoint`` policy of the built-in train step under sharded params: every
    intermediate is saved for the backward pass (as without ``jax.checkpoint``) but the
    outputs of `RECOMPUTED` primitives, which the backward pass computes again from their
    inputs: so the gathered weights are all-gathered again, and an activation's cast or
    transpose is redone from the activation. (``jax.checkpoint_policies``'s
    ``save_anything_except_these_names`` cannot say this: it saves every value.)"""
    del avals, params
    return prim.name not in RECOMPUTED


def param_sharding(mesh: DeviceMesh, shape: tuple[int, ...]) -> NamedSharding:
    """Where a param leaf of ``shape`` lives on ``mesh``: split on ``"batch"`` along its
    `zero.shard_axis` with ``mesh.shard_params`` (mirrored when it has none), else
    mirrored."""
    axis = zero.shard_axis(shape, mesh.num_replicas_in_sync) if mesh.shard_params else None
    if axis is None:
        return mesh.replicated_sharding
    return NamedSharding(mesh.mesh, P(*([None] * axis), BATCH_AXIS))


def param_shardings(mesh: DeviceMesh, tree: Any) -> Any:
    """`param_sharding` of every leaf of ``tree`` (arrays or ``jax.ShapeDtypeStruct`` s)."""
    return jax.tree.map(lambda leaf: param_sharding(mesh, np.shape(leaf)), tree)


def place_params(mesh: DeviceMesh, tree: Any) -> Any:
    """Places params on ``mesh``: split by `param_sharding` with ``mesh.shard_params``,
    else mirrored as ``mesh.replicate_arrays`` does.

    Args:
        mesh: the strategy.
        tree: pytree of NumPy or JAX arrays (or numbers), any shapes and shardings.

    Returns:
        The same pytree of ``jax.Array`` s with their full shapes.
    """
    if not mesh.shard_params:
        return mesh.replicate_arrays(tree)
    return jax.tree.map(lambda leaf: jax.device_put(leaf, param_sharding(mesh, np.shape(leaf))),
                        tree)


def place_fields(mesh: DeviceMesh, fields: dict[str, Any]) -> dict[str, Any]:
    """Training-state fields placed on ``mesh``: ``fields["params"]`` by `place_params`,
    the others mirrored."""
    placed = mesh.replicate_arrays({k: v for k, v in fields.items() if k != "params"})
    if "params" in fields:
        placed["params"] = place_params(mesh, fields["params"])
    return placed


def mirrored_leaves(mesh: DeviceMesh, params: Any) -> list[tuple[str, tuple[int, ...]]]:
    """``(path, shape)`` of each leaf of ``params`` that `place_params` keeps mirrored on
    ``mesh`` (none unless it shards params over several replicas)."""
    if not mesh.shard_params or mesh.num_replicas_in_sync == 1:
        return []
    return [(jax.tree_util.keystr(path, simple=True, separator="/"), tuple(np.shape(leaf)))
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
            if zero.shard_axis(np.shape(leaf), mesh.num_replicas_in_sync) is None]


def summary_line(mesh: DeviceMesh, params: Any) -> str | None:
    """The line ``model.summary()`` ends with under ``shard_params``: how the params are
    split, and which leaves stay mirrored; ``None`` without ``shard_params``."""
    if not mesh.shard_params:
        return None
    replicas = mesh.num_replicas_in_sync
    leaves = jax.tree.leaves(params)
    total = sum(int(np.size(leaf)) for leaf in leaves)
    mirrored = mirrored_leaves(mesh, params)
    kept = sum(int(np.prod(shape)) for _, shape in mirrored)
    line = (f"Params sharded over {replicas} replicas (ZeRO-3): {len(leaves) - len(mirrored)}"
            f" of {len(leaves)} leaves split, {total - kept:,} of {total:,} values")
    if not mirrored:
        return line
    return line + (f"; mirrored (no axis divides by {replicas}): "
                   + ", ".join(f"{path} {shape}" for path, shape in mirrored))


def report_mirrored(mesh: DeviceMesh, params: Any, owner: str) -> None:
    """Logs once (a ``WARNING`` of the ``"mirrorfit"`` logger) which leaves of ``owner``'s
    ``params`` stay mirrored under ``shard_params``; nothing when every leaf is split."""
    line = summary_line(mesh, params) if mirrored_leaves(mesh, params) else None
    if line is not None:
        logger.warning("shard_params: %s", line.replace("Params", f"{owner}'s params", 1))


# -- inside a per-replica function -----------------------------------------------------------

def spec_axes(specs: Any) -> Any:
    """The axis each leaf is split along over ``"batch"`` (``None``: whole), from the
    ``PartitionSpec`` s a per-replica function receives it with: a pytree like ``specs``."""
    def axis(spec: P) -> int | None:
        return next((i for i, name in enumerate(spec) if name == BATCH_AXIS), None)

    return jax.tree.map(axis, specs, is_leaf=lambda s: isinstance(s, P))


def any_split(axes: Any) -> bool:
    """Whether any leaf of a `spec_axes` tree is split."""
    return any(a is not None for a in jax.tree.leaves(axes, is_leaf=lambda a: a is None))


def rematerialized(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` under ``jax.checkpoint`` with `remat_policy`."""
    return jax.checkpoint(fn, policy=remat_policy)


def whole_variables(mesh: DeviceMesh, fn: Callable[..., Any], used: Any) -> Callable[..., Any]:
    """A ``strategy.run`` program ``fn(values, *args) -> (outputs, new_values)`` (``values``:
    those of ``used.read``, then the call's key; ``new_values``: those of ``used.assigned``)
    under ``shard_params``: each variable whose value is split over ``mesh`` (a param), but an
    optimizer's slot (``_mf_blocks``: the optimizer updates it as blocks), is all-gathered
    for ``fn``, and its new value cut back to this replica's block. ``fn`` itself when no
    such variable is used."""
    def axis(variable: Any) -> int | None:
        sharding = getattr(variable.value, "sharding", None)
        if getattr(variable, "_mf_blocks", False) or not (
                isinstance(sharding, NamedSharding) and sharding.mesh == mesh.mesh):
            return None
        return spec_axes(sharding.spec)

    read_axes, assigned_axes = [axis(v) for v in used.read], [axis(v) for v in used.assigned]
    if not mesh.shard_params or not any_split([*read_axes, *assigned_axes]):
        return fn

    def on_blocks(values: list[Any], *args: Any) -> Any:
        context = get_replica_context()
        *values, key = values
        outputs, new_values = fn([*context._gather_params(values, read_axes), key], *args)
        return outputs, context._kept_params(new_values, assigned_axes)

    return on_blocks
