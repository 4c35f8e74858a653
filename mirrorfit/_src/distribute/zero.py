"""A sharded optimizer state (ZeRO-1/2): its placement, and the train step's collectives.

With ``MirroredStrategy(shard_optimizer_state=True)`` every optimizer-state leaf is split
over the ``"batch"`` axis along its `shard_axis` (its first axis that divides by the
replica count; `optimizer_state_sharding`,
`place_optimizer_state`): a ``jax.Array`` of the leaf's full shape of which each device
holds one block, so a device holds about ``1 / num_replicas_in_sync`` of the state, and
``jax.device_get`` (checkpoints, ``model.opt_state``) reads the whole. In the train step a
replica updates only its block of each param:

1. `reduce_gradients`: the gradients of split leaves are reduce-scattered
   (``lax.psum_scatter(..., tiled=True)``: each replica receives the sum of its block), the
   others, with the step's statistics, all-reduced in one ``lax.psum``, as without sharding;
2. `blocks_of`: this replica's block of each param, to give the optimizer with its
   gradient and state blocks;
3. `gather_blocks`: the updated blocks all-gathered (``lax.all_gather(..., tiled=True)``),
   so the params stay mirrored.

With sharded params (ZeRO-3, `mirrorfit._src.distribute.fsdp`) a step knows each leaf's
split axis from its in-spec: `gather_along` all-gathers blocks along given axes, and
`kept_blocks` returns a whole leaf's block, the one it was gathered from when a
`BlockRecord` holds it.

A leaf with no axis that divides by the replica count is not split: its gradient is
all-reduced and every replica updates it whole. `split_flags` says which leaves are blocks
(`mirrorfit._src.optimizers.blocks` needs it for norms). Call these inside a per-replica
function over `BATCH_AXIS`. A custom loop's `mirrorfit.apply_gradients` returns its state
as blocks, which ``run`` returns as `PerReplica`; `unsplit_optimizer_state` joins them whole.

Splitting along an existing axis, rather than flattening and padding every leaf, keeps the
state's shapes, so files written from a split state and from a mirrored one are the same
and a run resumes at any replica count; a leaf no axis of which divides (a scalar, a bias
of 10 over 8 replicas) stays mirrored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh
from mirrorfit._src.distribute.values import PerReplica, unwrap_mirrored


def shard_axis(shape: Sequence[int], num_replicas: int) -> int | None:
    """The axis an optimizer-state leaf (and its param's gradient) is split along.

    The first (outermost) axis whose size divides by ``num_replicas``, so every replica holds
    an equal block of whole elements and no padding, and in row-major layout a block is one
    contiguous range of the leaf: slicing it, reduce-scattering into it and all-gathering it
    need no transposes (an inner axis cost XLA:CPU a layout copy of the leaf per step).
    ``None`` (the leaf stays mirrored) for one replica, scalars, or when no axis divides. A
    leaf and its param have the same shape, so they are split alike.

    Args:
        shape: the leaf's shape.
        num_replicas: the replicas the leaf is split over.

    Example:
        >>> shard_axis((16, 3), 8), shard_axis((3, 16), 8), shard_axis((5,), 8), shard_axis((), 8)
        (0, 1, None, None)
    """
    if num_replicas == 1:
        return None
    return next((axis for axis, size in enumerate(shape)
                 if size > 0 and size % num_replicas == 0), None)


def optimizer_state_sharding(mesh: DeviceMesh, shape: Sequence[int]) -> NamedSharding:
    """Where an optimizer-state leaf of ``shape`` lives on ``mesh``: mirrored
    (``replicated_sharding``) unless ``mesh.shard_optimizer_state``, then split on
    ``"batch"`` along its `shard_axis` (mirrored when it has none)."""
    axis = shard_axis(shape, mesh.num_replicas_in_sync) if mesh.shard_optimizer_state else None
    if axis is None:
        return mesh.replicated_sharding
    return NamedSharding(mesh.mesh, P(*([None] * axis), BATCH_AXIS))


def place_optimizer_state(mesh: DeviceMesh, tree: Any) -> Any:
    """Places an optimizer state on ``mesh`` by `optimizer_state_sharding`: mirrored as
    ``mesh.replicate_arrays`` does, or split.

    Args:
        mesh: the strategy.
        tree: pytree of NumPy or JAX arrays (or numbers), any shapes and shardings.

    Returns:
        The same pytree of ``jax.Array`` s with their full shapes.
    """
    if not mesh.shard_optimizer_state:
        return mesh.replicate_arrays(tree)
    return jax.tree.map(
        lambda leaf: jax.device_put(leaf, optimizer_state_sharding(mesh, np.shape(leaf))), tree)


def _axes(leaves: list[Any]) -> list[int | None]:
    replicas = lax.axis_size(BATCH_AXIS)
    return [shard_axis(leaf.shape, replicas) for leaf in leaves]


def split_flags(params: Any) -> Any:
    """A pytree like ``params`` of bools: True where the leaf is split over the replicas."""
    leaves, treedef = jax.tree.flatten(params)
    return treedef.unflatten([axis is not None for axis in _axes(leaves)])


def split_axes(params: Any) -> Any:
    """A pytree like ``params`` (whole leaves) of the axis each is split along (`shard_axis`
    over the replicas; ``None``: not split)."""
    leaves, treedef = jax.tree.flatten(params)
    return treedef.unflatten(_axes(leaves))


def reduce_gradients(grads: Any, statistics: Any) -> tuple[Any, Any]:
    """Sums gradients over the replicas: this replica's block of a split leaf, the whole of
    the others.

    Args:
        grads: this replica's gradients, a pytree like the params (full shapes).
        statistics: arrays all-reduced with the unsplit gradients (one ``lax.psum``).

    Returns:
        ``(grad_sum, statistics_sum)``: ``grad_sum`` holds, for a leaf split along axis
        ``a``, the block ``[..., size_a / replicas, ...]`` of the sum this replica owns, and
        the full sum for the others.
    """
    leaves, treedef = jax.tree.flatten(grads)
    axes = _axes(leaves)
    whole, statistics = lax.psum(([g for g, a in zip(leaves, axes) if a is None], statistics),
                                 BATCH_AXIS)
    summed = iter(whole)
    return treedef.unflatten([
        next(summed) if a is None else
        lax.psum_scatter(g, BATCH_AXIS, scatter_dimension=a, tiled=True)
        for g, a in zip(leaves, axes)]), statistics


def blocks_of(params: Any) -> Any:
    """This replica's block of each split leaf of the mirrored ``params`` (others whole)."""
    leaves, treedef = jax.tree.flatten(params)
    index = lax.axis_index(BATCH_AXIS)

    def block(p, axis):
        if axis is None:
            return p
        size = p.shape[axis] // lax.axis_size(BATCH_AXIS)
        return lax.dynamic_slice_in_dim(p, index * size, size, axis)

    return treedef.unflatten([block(p, a) for p, a in zip(leaves, _axes(leaves))])


def gather_blocks(blocks: Any, like: Any) -> Any:
    """The full leaves from every replica's ``blocks`` (as `blocks_of` cut ``like``)."""
    leaves, treedef = jax.tree.flatten(blocks)
    axes = _axes(jax.tree.leaves(like))
    return treedef.unflatten([
        b if a is None else lax.all_gather(b, BATCH_AXIS, axis=a, tiled=True)
        for b, a in zip(leaves, axes)])


def gather_along(blocks: Any, axes: Any) -> Any:
    """The whole leaves from every replica's ``blocks`` (``lax.all_gather``, tiled, along
    each leaf's axis of ``axes``; leaves with ``None`` as they are)."""
    leaves, treedef = jax.tree.flatten(blocks)
    return treedef.unflatten([
        b if a is None else lax.all_gather(b, BATCH_AXIS, axis=a, tiled=True)
        for b, a in zip(leaves, treedef.flatten_up_to(axes))])


def block_along(whole: jax.Array, axis: int | None) -> jax.Array:
    """This replica's block of a whole leaf split along ``axis`` (``None``: the leaf)."""
    if axis is None:
        return whole
    size = whole.shape[axis] // lax.axis_size(BATCH_AXIS)
    return lax.dynamic_slice_in_dim(whole, lax.axis_index(BATCH_AXIS) * size, size, axis)


class BlockRecord:
    """The blocks whose all-gather gave a whole leaf, within one trace of a per-replica
    function: `kept_blocks` returns the blocks themselves, so the all-gather that only fed
    the step's output is dead code (XLA removes it). Shared by a replica context and the
    contexts derived from it."""

    def __init__(self) -> None:
        # id(whole) -> (whole, block): the whole is held, so its id is not reused.
        self._blocks: dict[int, tuple[Any, Any]] = {}

    def gathered(self, blocks: Any, axes: Any) -> Any:
        """`gather_along` of ``blocks``, each gathered leaf recorded with its block."""
        wholes = gather_along(blocks, axes)
        for whole, block in zip(jax.tree.leaves(wholes), jax.tree.leaves(blocks)):
            self._blocks[id(whole)] = (whole, block)
        return wholes

    def block(self, whole: Any, axis: int | None) -> Any:
        """This replica's block of ``whole``: the recorded one, else `block_along`."""
        found = self._blocks.get(id(whole))
        if found is not None and found[0] is whole:
            return found[1]
        return block_along(whole, axis)


def kept_blocks(record: BlockRecord, tree: Any, axes: Any) -> Any:
    """This replica's block of every whole leaf of ``tree`` (`BlockRecord.block`)."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef.unflatten([record.block(leaf, a)
                              for leaf, a in zip(leaves, treedef.flatten_up_to(axes))])


def host_copy(mesh: DeviceMesh, tree: Any) -> Any:
    """``tree`` (a training state) on the host, whole, for a checkpoint: NumPy leaves that no
    step and no other code can change, so a write on another thread may keep them while
    training goes on. Each leaf is copied once.

    The arrays come with ``jax.device_get``, or with a sharded optimizer state (or other
    leaves split over the devices of several processes, such as per-replica gradient
    accumulators) ``mesh.fetch``, which also all-gathers those: then every process calls it
    at the same point (as every process writes a checkpoint). From an accelerator that is a
    new host array, the one copy. On the CPU backend it is a read-only view of the device
    buffer, which the next step that donates the buffer would have to copy (XLA's CPU client
    copies a donated buffer that a view still reads, more slowly than NumPy does), and a
    NumPy leaf of ``tree`` is the caller's, who may change it later: those two are copied
    here.
    """
    split = not all(leaf.is_fully_addressable for leaf in jax.tree.leaves(tree)
                    if isinstance(leaf, jax.Array))
    fetched = mesh.fetch(tree) if mesh.shard_optimizer_state or split else jax.device_get(tree)

    def owned(leaf, host):
        new = isinstance(leaf, jax.Array) and all(d.platform != "cpu" for d in leaf.devices())
        return host if new else np.array(host)

    return jax.tree.map(owned, tree, fetched)


def unsplit_optimizer_state(optimizer: Any, opt_state: Any, params: Any) -> Any:
    """The whole optimizer state of a custom loop whose `mirrorfit.apply_gradients` updates
    blocks (``MirroredStrategy(shard_optimizer_state=True)``), e.g. to save it.

    ``strategy.run`` returns the state that `mirrorfit.apply_gradients` gives back as
    `PerReplica` leaves, one block of each split leaf per replica (the leaves that are not
    split, whole on every replica); this joins each leaf's blocks along its split axis. The
    result may be passed to ``run`` again (it is cut into blocks there), or read with
    ``jax.device_get``. With several processes, every process calls it.

    Args:
        optimizer: the ``optax.GradientTransformation`` of the loop.
        opt_state: the state as ``run`` returned it (or the whole state, returned as it is).
        params: the params (mirrored), for the state's full shapes
            (``jax.eval_shape(optimizer.init, params)``).

    Returns:
        ``opt_state`` with every leaf a ``jax.Array`` of its full shape, mirrored on the
        strategy's devices.

    Raises:
        ValueError: if ``opt_state`` does not have the structure of
            ``optimizer.init(params)``, or a leaf is neither whole nor one block per replica
            (e.g. blocks returned through ``mf.Mirrored``, which keeps replica 0's).
    """
    full = jax.eval_shape(optimizer.init, unwrap_mirrored(params))
    shapes, treedef = jax.tree.flatten(full)
    try:
        leaves = treedef.flatten_up_to(unwrap_mirrored(opt_state))
    except (TypeError, ValueError) as error:
        raise ValueError("opt_state must have the structure of optimizer.init(params). "
                         f"Received: opt_state with the structure error {error}") from None
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(full)[0]]
    return treedef.unflatten([_whole(path, like.shape, leaf)
                              for path, like, leaf in zip(paths, shapes, leaves)])


_NOT_WHOLE = (
    "opt_state leaf {path} must be whole (shape {full}) or one block per replica (a "
    "PerReplica, as strategy.run returns it from mf.apply_gradients); blocks returned "
    "through mf.Mirrored keep only replica 0's: return the state unmarked. Received: a leaf "
    "of shape {shape}")


def _whole(path: str, shape: tuple[int, ...], leaf: Any) -> Any:
    """``leaf`` as a full-shape array: a `PerReplica` ``[replicas, *block]`` joined along
    its `shard_axis` (or its first row when not split) and mirrored; a whole leaf as it is."""
    if not isinstance(leaf, PerReplica):
        if np.shape(leaf) != shape:
            raise ValueError(_NOT_WHOLE.format(path=path, shape=np.shape(leaf), full=shape))
        return leaf
    values = leaf.values
    replicas, block = values.shape[0], values.shape[1:]
    axis = shard_axis(shape, replicas)
    if block == shape:  # not split: the same on every replica
        whole = values[0]
    elif axis is not None and block == (*shape[:axis], shape[axis] // replicas,
                                        *shape[axis + 1:]):
        whole = jnp.moveaxis(values, 0, axis).reshape(shape)
    else:
        raise ValueError(_NOT_WHOLE.format(path=path, shape=block, full=shape))
    sharding = values.sharding
    if isinstance(sharding, NamedSharding):
        whole = jax.device_put(whole, NamedSharding(sharding.mesh, P()))
    return whole
