"""The replica context: what a per-replica function sees of the other replicas.

Inside ``strategy.run``, `get_replica_context` returns a context whose collectives are
``lax.psum`` / ``lax.pmean`` / ``lax.all_gather`` over the mesh axis ``"batch"``. Outside it
returns the default context of a single replica. The loss helpers follow ``tf.nn``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.distribute import zero
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh
from mirrorfit._src.distribute.values import ReduceOp


class ReplicaContext:
    """The context of one replica inside ``strategy.run`` (``tf.distribute.ReplicaContext``).

    Attributes:
        num_replicas_in_sync: replicas taking part in every collective.
        mask: ``None``, or bool ``[per_replica_batch]``: real (not padding) rows of this
            replica's shard of the distributed batch passed to ``run``.
        gradient_reduce_op: how ``optimizer.apply_gradients`` / ``optimizer.apply``
            all-reduce the gradients inside this replica function: `ReduceOp.SUM` (the
            default, TF's convention: each replica's loss is its share of the global mean,
            from `compute_average_loss`, so the sum is the global gradient) or
            `ReduceOp.MEAN` (for gradients of a per-replica mean loss, as a Keras-style
            ``train_step`` inside ``fit`` computes; the trainer sets it there).
        shard_optimizer_state: whether this is ``run`` 's context (with the strategy's
            ``mesh``) on several replicas of a strategy created with
            ``shard_optimizer_state=True``: the optimizer objects and
            `mirrorfit.apply_gradients` then update blocks (``_place_optimizer_state``,
            ``_reduce_scatter``, ``_split_flags``, ``_blocks_of``, ``_gather_blocks``).
        shard_params: whether, besides, the strategy was created with ``shard_params=True``
            (ZeRO-3/FSDP): an optimizer update then keeps this replica's blocks of the
            params and returns the whole leaves all-gathered from them
            (`mirrorfit._src.distribute.fsdp`).
        param_axes: ``None``, or, in ``fit`` 's built-in train step under ``shard_params``,
            the axis each leaf of the step's params is split along (a pytree like them of
            ints, ``None`` for a whole leaf): the step receives its params as blocks.
        axis_name: the mesh axis of the collectives (``"batch"``).
        check_numerics: whether an optimizer update skips non-finite gradients and reports
            it (`mirrorfit._src.optimizers.update.apply_update`): ``fit`` 's step with
            `mirrorfit.callbacks.TerminateOnNaN`.
    """

    axis_name = BATCH_AXIS

    def __init__(self, num_replicas_in_sync: int = 1, mask: jax.Array | None = None,
                 in_run: bool = False, gradient_reduce_op: Any = ReduceOp.SUM,
                 mesh: DeviceMesh | None = None, check_numerics: bool = False,
                 param_axes: Any = None):
        self.num_replicas_in_sync = num_replicas_in_sync
        self._mesh = mesh
        self.shard_optimizer_state = (in_run and mesh is not None and num_replicas_in_sync > 1
                                      and mesh.shard_optimizer_state)
        self.shard_params = self.shard_optimizer_state and mesh is not None and mesh.shard_params
        self.param_axes = param_axes
        self._blocks = zero.BlockRecord()  # shared with the contexts derived from this one
        self.mask = mask
        self.gradient_reduce_op = ReduceOp.resolve(gradient_reduce_op, "gradient_reduce_op")
        self._in_run = in_run
        self.check_numerics = check_numerics
        self.updates_finite: list[jax.Array] = []  # `_note_update`: one flag per update

    def derived(self, **changes: Any) -> ReplicaContext:
        """A copy of this context with some of its constructor arguments changed (``mask``,
        ``gradient_reduce_op``, ``check_numerics``, ``param_axes``): the context of a step
        inside ``run``'s or ``fit``'s per-replica function."""
        arguments = {"num_replicas_in_sync": self.num_replicas_in_sync, "mask": self.mask,
                     "in_run": self._in_run, "gradient_reduce_op": self.gradient_reduce_op,
                     "mesh": self._mesh, "check_numerics": self.check_numerics,
                     "param_axes": self.param_axes}
        context = ReplicaContext(**{**arguments, **changes})
        context._blocks = self._blocks
        return context

    def _note_update(self, finite: jax.Array) -> None:
        """Records that an optimizer update inside this context checked its gradients:
        ``finite`` (bool ``[]``, the same on every replica) is whether it was applied."""
        self.updates_finite.append(finite)

    @property
    def replica_id_in_sync_group(self) -> jax.Array | int:
        """This replica's index in ``[0, num_replicas_in_sync)`` (a traced int in ``run``)."""
        return lax.axis_index(BATCH_AXIS) if self._in_run else 0

    # -- a sharded optimizer state (ZeRO-1/2, `mirrorfit._src.distribute.zero`) -------------

    def _place_optimizer_state(self, leaf: Any) -> jax.Array:
        """A new optimizer-state leaf placed as the strategy places them: split along its
        `zero.shard_axis` with ``shard_optimizer_state``, else mirrored. Only inside ``run``."""
        assert self._mesh is not None, "only a context of strategy.run places state"
        return zero.place_optimizer_state(self._mesh, leaf)

    def _reduce_scatter(self, reduce_op: Any, grads: Any, carry: Any = ()) -> tuple[Any, Any]:
        """`all_reduce` of ``grads`` of which this replica keeps only its block of each split
        leaf (``lax.psum_scatter``; `zero.reduce_gradients`), the other leaves whole; and
        ``carry`` summed in the same all-reduce as those."""
        op = ReduceOp.resolve(reduce_op)
        summed, carried = zero.reduce_gradients(grads, carry)
        if op is not ReduceOp.SUM:
            summed = jax.tree.map(lambda g: g / self.num_replicas_in_sync, summed)
        return summed, carried

    def _split_flags(self, tree: Any) -> Any:
        """True for each leaf of full-shape ``tree`` that is split over the replicas."""
        return zero.split_flags(tree)

    def _blocks_of(self, tree: Any) -> Any:
        """This replica's block of each split leaf of the full-shape ``tree``."""
        return zero.blocks_of(tree)

    def _gather_blocks(self, blocks: Any, like: Any) -> Any:
        """The full leaves of ``like`` 's shapes from every replica's ``blocks``."""
        return zero.gather_blocks(blocks, like)

    # -- sharded params (ZeRO-3/FSDP, `mirrorfit._src.distribute.fsdp`) --------------------

    def _split_axes(self, tree: Any) -> Any:
        """The axis each leaf of the full-shape ``tree`` is split along (``None``: whole)."""
        return zero.split_axes(tree)

    def _reduce_whole(self, grads: Any, axes: Any, carry: Any = ()) -> tuple[Any, Any]:
        """``lax.psum`` of the leaves of ``grads`` that ``axes`` marks whole, with ``carry``,
        in one all-reduce; the split leaves (already summed blocks) as they are."""
        leaves, treedef = jax.tree.flatten(grads)
        axes = treedef.flatten_up_to(axes)
        whole, carried = lax.psum(([g for g, a in zip(leaves, axes) if a is None], carry),
                                  BATCH_AXIS)
        summed = iter(whole)
        return treedef.unflatten([next(summed) if a is None else g
                                  for g, a in zip(leaves, axes)]), carried

    def _gather_params(self, blocks: Any, axes: Any) -> Any:
        """The whole params from every replica's ``blocks`` (split along ``axes``), each
        recorded with its block for `_kept_params`."""
        return self._blocks.gathered(blocks, axes)

    def _kept_params(self, tree: Any, axes: Any) -> Any:
        """This replica's block of each whole leaf of ``tree`` split along ``axes``: the block
        `_gather_params` gathered it from, else a slice."""
        return zero.kept_blocks(self._blocks, tree, axes)

    def all_reduce(self, reduce_op: Any, value: Any) -> Any:
        """Sums or averages a pytree of arrays across replicas (``lax.psum``/``lax.pmean``).

        Raises:
            ValueError: for an unknown ``reduce_op``.
            TypeError: if ``value`` has leaves that are not arrays or numbers.
        """
        op = ReduceOp.resolve(reduce_op)
        _check_arrays(value, "all_reduce")
        if not self._in_run:
            return value
        collective = lax.psum if op is ReduceOp.SUM else lax.pmean
        return collective(value, BATCH_AXIS)

    def all_gather(self, value: Any, axis: int = 0) -> Any:
        """Concatenates every replica's ``value`` along ``axis`` (``lax.all_gather``, tiled)."""
        _check_arrays(value, "all_gather")
        if not self._in_run:
            return value
        return jax.tree.map(lambda v: lax.all_gather(v, BATCH_AXIS, axis=axis, tiled=True), value)


def _check_arrays(value: Any, name: str) -> None:
    leaves = jax.tree.leaves(value)
    bad = [type(v).__name__ for v in leaves if not isinstance(v, (jax.Array, float, int))
           and not hasattr(v, "dtype")]
    if not leaves or bad:
        raise TypeError(f"{name} needs a pytree of arrays with the same structure on every "
                        f"replica. Received: value with leaves of type {bad or 'none'}")


_LOCAL = threading.local()


def current() -> ReplicaContext | None:
    """The replica context of the per-replica function being traced, or ``None`` outside one
    (the optimizers' update reads it: `mirrorfit._src.optimizers.update`)."""
    return getattr(_LOCAL, "context", None)


def get_replica_context() -> ReplicaContext:
    """The current replica context: the one of ``strategy.run``, else a single replica."""
    return current() or ReplicaContext()


@contextlib.contextmanager
def replica_context(context: ReplicaContext):
    """Makes ``context`` current while a per-replica function is traced (the previous one is
    restored after)."""
    previous = current()
    _LOCAL.context = context
    try:
        yield context
    finally:
        _LOCAL.context = previous


def compute_average_loss(per_example_loss: jax.Array, sample_weight: jax.Array | None = None,
                         global_batch_size: int | None = None) -> jax.Array:
    """Per-replica share of the global mean loss, as ``tf.nn.compute_average_loss``.

    Returns ``sum(per_example_loss * sample_weight) / global_batch_size``; summed over
    replicas (``all_reduce(SUM, grads)``) the gradients equal the single-device gradients of
    the global batch. Padding rows of a distributed batch are excluded, and when
    ``global_batch_size`` is ``None`` it is the number of real rows over all replicas
    (``per_replica_batch * num_replicas_in_sync`` when there is no padding).

    Args:
        per_example_loss: ``[per_replica_batch]`` (or ``[per_replica_batch, ...]``, summed
            over the extra axes after weighting).
        sample_weight: ``[per_replica_batch]`` or broadcastable, or ``None``.
        global_batch_size: the divisor; ``None`` for the real global batch size.

    Raises:
        ValueError: if ``per_example_loss`` is a scalar.
    """
    loss = jnp.asarray(per_example_loss)
    if loss.ndim == 0:
        raise ValueError("per_example_loss must have a leading per-replica batch dimension. "
                         f"Received: per_example_loss with shape {loss.shape}")
    if sample_weight is not None:
        loss = loss * jnp.asarray(sample_weight, loss.dtype)
    context = get_replica_context()
    mask = context.mask
    if mask is not None and mask.shape[0] == loss.shape[0]:
        loss = jnp.where(mask.reshape(mask.shape + (1,) * (loss.ndim - 1)), loss, 0.0)
        real = jnp.sum(mask.astype(loss.dtype))
    else:
        real = jnp.asarray(loss.shape[0], loss.dtype)
    if global_batch_size is None:
        return jnp.sum(loss) / context.all_reduce(ReduceOp.SUM, real)
    return jnp.sum(loss) / global_batch_size


def scale_regularization_loss(regularization_loss: jax.Array) -> jax.Array:
    """``regularization_loss / num_replicas_in_sync``, as ``tf.nn.scale_regularization_loss``."""
    return regularization_loss / get_replica_context().num_replicas_in_sync
