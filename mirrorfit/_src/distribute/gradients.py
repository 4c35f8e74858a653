"""`apply_gradients`: the all-reduce and the optax update of a custom loop, in one call.

Inside ``strategy.run`` (or a `Model`'s own ``train_step``) each replica computes gradients
of its share of the loss. Forgetting to all-reduce them makes the replicas drift apart
silently; `apply_gradients` all-reduces them first, then applies one optax update, so every
replica computes the same new params, as ``optimizer.apply_gradients`` under
``tf.distribute.MirroredStrategy`` does.
"""

from __future__ import annotations

from typing import Any

import optax

from mirrorfit._src.distribute.replica_context import get_replica_context
from mirrorfit._src.distribute.values import ReduceOp


def apply_gradients(optimizer: optax.GradientTransformation, grads: Any, opt_state: Any,
                    params: Any, *, reduce_op: Any = ReduceOp.SUM) -> tuple[Any, Any]:
    """All-reduces ``grads`` across replicas, then applies one ``optimizer`` update.

    Args:
        optimizer: an ``optax.GradientTransformation`` (e.g. ``mf.optimizers.Adam()``).
        grads: this replica's gradients, a pytree like ``params``.
        opt_state: ``optimizer`` 's state for ``params`` (mirrored).
        params: the mirrored params.
        reduce_op: ``SUM`` (the default) for gradients of per-replica loss shares from
            `mirrorfit.compute_average_loss`; ``MEAN`` for gradients of per-replica means.

    Returns:
        ``(new_params, new_opt_state)``, identical on every replica.

    Raises:
        ValueError: for an unknown ``reduce_op``, or inside ``strategy.run`` of a strategy
            with ``shard_optimizer_state=True`` (``opt_state`` goes in and out of ``run``
            whole; the optimizer object's ``apply_gradients`` updates blocks there).

    Example:
        >>> strategy = mf.MirroredStrategy()
        >>> opt = optax.sgd(0.1)
        >>> params = strategy.replicate({"w": jnp.zeros(3)})
        >>> def step(params, opt_state, x):
        ...     loss = lambda p: mf.compute_average_loss(jnp.sum((x - p["w"]) ** 2, -1))
        ...     grads = jax.grad(loss)(params)
        ...     return mf.apply_gradients(opt, grads, opt_state, params)
    """
    context = get_replica_context()
    context.check_mirrored_optimizer_state("mf.apply_gradients")
    grads = context.all_reduce(reduce_op, grads)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
