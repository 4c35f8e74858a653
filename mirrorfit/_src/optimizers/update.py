"""The optimizer update, written once: `apply_update`.

Every path that turns gradients into new params runs it: ``fit`` 's built-in train step, an
optimizer object's ``apply``/``apply_gradients`` (compile's ``model.optimizer`` in a
``train_step`` override, a GAN's second optimizer, any optimizer object in ``strategy.run``)
and the functional `mirrorfit.apply_gradients`. So each of them gets every feature, in
this order:

1. **The reduction across replicas**, decided by the replica context
   (`mirrorfit._src.distribute.replica_context.current`): an
   all-reduce (``SUM`` or ``MEAN``); a reduce-scatter onto this replica's blocks under
   ``MirroredStrategy(shard_optimizer_state=True)`` (ZeRO-1/2; `blocks`), and with
   ``shard_params=True`` (ZeRO-3/FSDP) too, unless the step differentiated this replica's
   blocks through their all-gather (``fit`` 's built-in step: ``param_axes``), whose
   transpose already reduce-scattered them; none yet when the
   optimizer state holds per-replica gradient accumulators, which all-reduce once per
   applied update (`accumulation.local_gradients`). A caller's statistics may ride in the
   same collective (``carry``).
2. **The non-finite check**, under loss scaling (a `LossScaleOptimizer`, which then skips
   the update and halves its scale) or when the context asks (``fit`` with
   `mirrorfit.callbacks.TerminateOnNaN`): an update whose gradients are not all finite on
   some replica is not applied, every replica takes the same branch, and the context is
   told (``_note_update``), so ``fit`` stops there.
3. **The optax update** (clipping, weight decay, EMA and accumulation are options of the
   optimizer itself: `mirrorfit._src.optimizers.options`), then the params' constraints.
   On blocks, the new blocks are all-gathered so the params stay mirrored; under sharded
   params they are all-gathered too (the caller's code may read the new weights) but
   recorded with their blocks, which the step keeps
   (`mirrorfit._src.distribute.zero.kept_blocks`; the all-gather that nothing else reads
   is dropped by XLA).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from mirrorfit._src.distribute import replica_context
from mirrorfit._src.optimizers import accumulation, blocks

REDUCE_OPS = ("SUM", "MEAN")


class Reduced(NamedTuple):
    """The gradients after `reduce_gradients`, ready for `apply_reduced`."""

    grads: Any  # summed (and rescaled) over the replicas; this replica's blocks of split
    #             leaves under a sharded state; still this replica's own with per-replica
    #             accumulators, which sum them once per applied update
    carried: Any  # ``carry`` summed over the replicas (None without one)
    finite: jax.Array | None  # bool []: finite on every replica; None when not checked
    how: str  # "all" (all-reduced, or one replica), "blocks" or "local": see above
    axes: Any = None  # the split axis of each leaf when params and grads are blocks already
    #                   (``param_axes``; a pytree like the params of int | None), else None


class Applied(NamedTuple):
    """What `apply_update` returns."""

    params: Any  # the new params, identical on every replica (mirrored); under sharded
    #              params gathered from the new blocks, which the context recorded
    opt_state: Any  # the new optimizer state (this replica's blocks of split leaves)
    finite: jax.Array | None  # bool []: the update was applied (gradients finite on every
    #                           replica); None when nothing was checked
    carried: Any  # ``carry`` summed over the replicas (None without one)


def all_finite(tree: Any) -> jax.Array:
    """bool ``[]``: whether every element of every leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def reduce_op_name(reduce_op: Any) -> str:
    """``"SUM"`` or ``"MEAN"`` for ``mf.ReduceOp.SUM``/``MEAN`` or their names.

    Raises:
        ValueError: for anything else.
    """
    name = getattr(reduce_op, "value", reduce_op)
    if not (isinstance(name, str) and name.upper() in REDUCE_OPS):
        raise ValueError("reduce_op must be mf.ReduceOp.SUM or mf.ReduceOp.MEAN (or "
                         f"'SUM'/'MEAN'). Received: reduce_op={reduce_op!r}")
    return name.upper()


def apply_update(optimizer: optax.GradientTransformation, grads: Any, opt_state: Any,
                 params: Any, *, reduce_op: Any = "SUM", carry: Any = None,
                 rescale: Callable[[Any], Any] | None = None,
                 constrain: Callable[[Any], Any] | None = None, param_axes: Any = None
                 ) -> Applied:
    """Reduces this replica's ``grads`` across replicas and applies one ``optimizer`` update:
    `apply_reduced` of `reduce_gradients` (see the module docstring). Outside a replica
    function (one replica) the gradients are used as they are.

    Args:
        optimizer: an ``optax.GradientTransformation`` (a `LossScaleOptimizer` skips
            non-finite updates itself).
        grads: this replica's gradients, a pytree like ``params``.
        opt_state: ``optimizer`` 's state; under ``shard_optimizer_state`` its split leaves
            are this replica's blocks.
        params: the mirrored params (full shapes); with ``param_axes``, this replica's
            blocks of them.
        reduce_op: ``"SUM"`` for gradients of per-replica loss shares
            (`mirrorfit.compute_average_loss`), ``"MEAN"`` for gradients of per-replica
            means (a Keras-style ``train_step``).
        carry: a pytree of arrays summed over the replicas with the gradients, in the same
            collective (``fit`` 's statistics).
        rescale: ``carried -> factor`` multiplied into the reduced gradients (``fit``
            differentiates masked sums and divides by the global count here).
        constrain: ``params -> params`` applied after the update (Keras' constraints).
        param_axes: only under ``shard_params`` (ZeRO-3/FSDP): a pytree like ``params`` of
            the axis each leaf is split along (``None``: whole), when ``params`` are this
            replica's blocks and ``grads`` were differentiated through their all-gather, so
            the gradients of split leaves are this replica's block of the sum already.

    Returns:
        `Applied`: the new params (whole) and state, whether the update was applied, the
        summed ``carry``.

    Raises:
        ValueError: for an unknown ``reduce_op``.
    """
    reduced = reduce_gradients(optimizer, grads, opt_state, params, reduce_op=reduce_op,
                               carry=carry, rescale=rescale, param_axes=param_axes)
    return apply_reduced(optimizer, reduced, opt_state, params, constrain=constrain)


def reduce_gradients(optimizer: optax.GradientTransformation, grads: Any, opt_state: Any,
                     params: Any, *, reduce_op: Any = "SUM", carry: Any = None,
                     rescale: Callable[[Any], Any] | None = None, param_axes: Any = None
                     ) -> Reduced:
    """Step 1 of `apply_update` (its arguments): the gradients reduced as the replica
    context and ``opt_state`` say, with ``carry``, and their finite flag when checked.

    ``fit`` 's built-in step calls it apart from `apply_reduced` to read the global row count
    in ``carried`` before deciding whether a step is a filler.
    """
    op = reduce_op_name(reduce_op)
    context = replica_context.current()
    how = "all"
    if context is not None and context.shard_optimizer_state:
        how = "blocks"
    elif context is not None and accumulation.has_replica_slots(opt_state, params):
        how = "local"
    check = _is_scaler(optimizer) or (context is not None and context.check_numerics)
    # Blocks and per-replica accumulators see this replica's gradients only: its finite
    # flag travels in the collective. All-reduced gradients are checked as they are.
    flag = (1.0 - all_finite(grads).astype(jnp.float32)
            if check and how != "all" else None)
    extra: Any = (carry, flag)
    if context is None:
        pass
    elif how == "blocks" and param_axes is not None:  # split leaves: summed by the transpose
        grads, extra = context._reduce_whole(grads, param_axes, extra)
    elif how == "blocks":
        grads, extra = context._reduce_scatter("SUM", grads, extra)
    elif how == "local":
        if jax.tree.leaves(extra):
            extra = context.all_reduce("SUM", extra)
    else:
        grads, extra = context.all_reduce("SUM", (grads, extra))
    carried, flag = extra
    factor: Any = None if context is None or op == "SUM" else 1.0 / context.num_replicas_in_sync
    if rescale is not None:
        factor = rescale(carried) if factor is None else factor * rescale(carried)
    if factor is not None:  # a multiply, which XLA fuses into each consumer
        grads = jax.tree.map(lambda g: g * jnp.asarray(factor, g.dtype), grads)
    finite = None
    if check:
        finite = flag == 0 if flag is not None else all_finite(grads)
    return Reduced(grads, carried, finite, how, param_axes if how == "blocks" else None)


def apply_reduced(optimizer: optax.GradientTransformation, reduced: Reduced, opt_state: Any,
                  params: Any, *, constrain: Callable[[Any], Any] | None = None) -> Applied:
    """Steps 2 and 3 of `apply_update`: the update of ``reduced`` gradients, skipped where
    they are not finite (the context is told: ``_note_update``), then ``constrain``.

    Under sharded params (``context.shard_params``) the update keeps this replica's blocks:
    they are all-gathered after it (outside any branch), each whole leaf recorded with its
    block (``context._gather_params``); a constraint sees the whole leaves."""
    context = replica_context.current()
    scaler = _is_scaler(optimizer)
    grads = reduced.grads
    keep = reduced.how == "blocks" and context is not None and context.shard_params
    axes = None
    if reduced.how == "blocks":
        assert context is not None
        axes = reduced.axes if reduced.axes is not None else context._split_axes(params)

    def own() -> Any:  # this replica's blocks of the params
        assert context is not None
        return params if reduced.axes is not None else context._blocks_of(params)

    def update(opt_state: Any) -> tuple[Any, Any]:
        fn = optimizer.handle_finite_grads if scaler else optimizer.update  # type: ignore[attr-defined]
        if reduced.how == "blocks":
            assert context is not None
            split = jax.tree.map(lambda a: a is not None, axes, is_leaf=lambda a: a is None)
            blocks_now = own()
            with blocks.block_update(context.axis_name, split):
                updates, opt_state = fn(grads, opt_state, blocks_now)
            new = optax.apply_updates(blocks_now, updates)
            if keep:  # blocks out (a constraint sees the whole leaves)
                if constrain is not None:
                    new = context._kept_params(
                        constrain(context._gather_params(new, axes)), axes)
                return new, opt_state
            new = context._gather_blocks(new, params)
        elif reduced.how == "local":
            assert context is not None
            with accumulation.local_gradients(context.axis_name):
                updates, opt_state = fn(grads, opt_state, params)
            new = optax.apply_updates(params, updates)
        else:
            updates, opt_state = fn(grads, opt_state, params)
            new = optax.apply_updates(params, updates)
        return (new if constrain is None else constrain(new)), opt_state

    def skip(opt_state: Any) -> tuple[Any, Any]:
        if scaler:
            opt_state = optimizer.handle_non_finite_grads(opt_state)  # type: ignore[attr-defined]
        return (own() if keep else params), opt_state

    if reduced.finite is None:
        new_params, new_state = update(opt_state)
    else:  # ``finite`` is the same on every replica: all take one branch
        new_params, new_state = lax.cond(reduced.finite, update, skip, opt_state)
        if context is not None:
            context._note_update(reduced.finite)
    if keep:
        assert context is not None
        new_params = context._gather_params(new_params, axes)
    return Applied(new_params, new_state, reduced.finite, reduced.carried)


def _is_scaler(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a `LossScaleOptimizer` (duck-typed: ``loss_scale`` imports
    this module)."""
    return hasattr(optimizer, "handle_finite_grads")
