"""`apply_gradients`: the all-reduce and the optax update of a custom loop, in one call.

Inside ``strategy.run`` (or a `Model`'s own ``train_step``) each replica computes gradients
of its share of the loss. Forgetting to all-reduce them makes the replicas drift apart
silently; `apply_gradients` all-reduces them first, then applies one optax update, so every
replica computes the same new params, as ``optimizer.apply_gradients`` under
``tf.distribute.MirroredStrategy`` does.

Under ``MirroredStrategy(shard_optimizer_state=True)`` (ZeRO-1/2, as ``fit`` does it) it
updates blocks instead: the gradients are reduce-scattered, the optimizer updates this
replica's block of each split param with its block of the state
(`mirrorfit._src.optimizers.blocks`: clipping norms add every block) and the new params are
all-gathered, so they stay mirrored; the new state comes back as this replica's blocks, which
``run`` returns as `PerReplica` (one block per replica) and gives back block by block on the
next call. The replica context is
`mirrorfit._src.distribute.replica_context.current`, as the optimizer objects find it.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax

from mirrorfit._src.distribute import replica_context
from mirrorfit._src.optimizers.sliceable import check_sliceable
from mirrorfit._src.optimizers.update import apply_update, reduce_op_name

NOT_THE_STATE = (
    "opt_state must be optimizer.init(params) (whole), or the opt_state that "
    "mf.apply_gradients returned from the previous strategy.run of this strategy, passed back "
    "as run returned it (a PerReplica: each replica gets its own blocks); join blocks from "
    "another replica count with mf.unsplit_optimizer_state first. Leaf {path} has the shape "
    "{shape}, neither the full shape {full} nor this replica's block of it. "
    "Received: opt_state leaf {path} of shape {shape}")


def apply_gradients(optimizer: optax.GradientTransformation, grads: Any, opt_state: Any,
                    params: Any, *, reduce_op: Any = "SUM") -> tuple[Any, Any]:
    """All-reduces ``grads`` across replicas, then applies one ``optimizer`` update.

    With ``MirroredStrategy(shard_optimizer_state=True)`` on several replicas, inside
    ``strategy.run`` the gradients are reduce-scattered and each replica updates only its
    block of every split leaf (see the module docstring and the guide "Sharded optimizer
    state"): ``opt_state`` may be the whole state (the first call) or the one this function
    returned from the previous ``run``, passed back as ``run`` returned it (`PerReplica`).

    Args:
        optimizer: an ``optax.GradientTransformation`` (e.g. ``mf.optimizers.Adam()``).
        grads: this replica's gradients, a pytree like ``params``.
        opt_state: ``optimizer`` 's state for ``params`` (mirrored; with a sharded state,
            also this replica's blocks from the previous call).
        params: the mirrored params.
        reduce_op: ``mf.ReduceOp.SUM`` or ``"SUM"`` (the default) for gradients of
            per-replica loss shares from `mirrorfit.compute_average_loss`; ``MEAN`` for
            gradients of per-replica means.

    Returns:
        ``(new_params, new_opt_state)``, identical on every replica; with a sharded state
        ``new_opt_state`` holds this replica's block of each split leaf (the leaves that
        are not split are whole and identical): return it from the replica function without
        ``mf.Mirrored``, and read the whole with `mirrorfit.unsplit_optimizer_state`.

    Raises:
        ValueError: for an unknown ``reduce_op``; with a sharded state, for an optimizer
            that cannot update blocks (`check_sliceable`: e.g. ``optax.lamb``, Adafactor),
            or an ``opt_state`` that is neither whole nor this replica's blocks.

    Example:
        >>> strategy = mf.MirroredStrategy()
        >>> opt = optax.sgd(0.1)
        >>> params = strategy.replicate({"w": jnp.zeros(3)})
        >>> def step(params, opt_state, x):
        ...     loss = lambda p: mf.compute_average_loss(jnp.sum((x - p["w"]) ** 2, -1))
        ...     grads = jax.grad(loss)(params)
        ...     return mf.apply_gradients(opt, grads, opt_state, params)
    """
    reduce_op_name(reduce_op)
    context = replica_context.current()
    if context is not None and context.shard_optimizer_state:
        opt_state = _state_blocks(context, optimizer, opt_state, params)
    applied = apply_update(optimizer, grads, opt_state, params, reduce_op=reduce_op)
    return applied.params, applied.opt_state


def _state_blocks(context: Any, optimizer: optax.GradientTransformation, opt_state: Any,
                  params: Any) -> Any:
    """``opt_state`` as this replica's blocks (a sharded optimizer state, in ``run``): each
    leaf arrives whole (then it is cut here) or as this replica's block.

    Raises:
        ValueError: for an optimizer that cannot update blocks, or a leaf that is neither.
    """
    check_sliceable(optimizer)
    full = jax.eval_shape(optimizer.init, params)
    like_leaves, treedef = jax.tree_util.tree_flatten_with_path(full)
    try:
        leaves = treedef.flatten_up_to(opt_state)
    except (TypeError, ValueError) as error:
        raise ValueError("opt_state must have the structure of optimizer.init(params). "
                         f"Received: an opt_state whose structure differs: {error}") from None
    split = jax.tree.leaves(context._split_flags(full))
    state = []
    for (path, like), leaf, is_split in zip(like_leaves, leaves, split):
        shape = np.shape(leaf)
        if shape == like.shape:
            state.append(context._blocks_of(leaf) if is_split else leaf)
            continue
        block = jax.eval_shape(context._blocks_of, like).shape if is_split else None
        if shape != block:
            raise ValueError(NOT_THE_STATE.format(path=jax.tree_util.keystr(path),
                                                  shape=shape, full=like.shape))
        state.append(leaf)
    return treedef.unflatten(state)
