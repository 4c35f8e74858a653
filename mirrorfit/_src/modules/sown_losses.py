"""Losses a Flax module sows into the ``"losses"`` collection, and their share of the loss.

A module adds a scalar to the training loss with ``self.sow("losses", name, value)`` (e.g. a
`mirrorfit.regularizers.L2` penalty of its kernel), as a Keras layer calls ``add_loss``. The
step adds the **mean over replicas** of each replica's sown total ``R_r`` once to the global
loss, as ``tf.nn.scale_regularization_loss`` does: a weight penalty is the same on every
replica, so the global loss equals the single-device loss.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.replica_context import get_replica_context


def loss_values(losses: Any) -> list[jax.Array]:
    """The sown values as a list of float32 scalars (each value summed), in collection order."""
    return [jnp.sum(jnp.asarray(v, jnp.float32)) for v in jax.tree.leaves(losses)]


def total(losses: Any) -> jax.Array | None:
    """The sum of every sown value (float32 scalar), or ``None`` when nothing was sown."""
    values = loss_values(losses)
    return sum(values[1:], values[0]) if values else None


def share_of_sum(losses: Any, mask: jax.Array) -> jax.Array | None:
    """This replica's share of the sown total in a step that sums losses over real rows.

    A step's loss sums ``w_i * l_i`` over each replica's real rows, all-reduces, and divides
    by the global real-row count ``N``. Adding ``R_r * N / num_replicas`` per replica (``N``
    without gradient) makes that ``mean_i(l_i) + mean_r(R_r)``.

    Args:
        losses: the ``"losses"`` collection of this replica's forward pass.
        mask: bool ``[per_replica_batch]``, True for real rows (or float32, each row's
            count in the loss's divisor: ``N`` is then the global count).

    Returns:
        A float32 scalar, or ``None`` when nothing was sown (no extra all-reduce then).
    """
    value = total(losses)
    if value is None:
        return None
    count = lax.psum(jnp.sum(mask, dtype=jnp.float32), BATCH_AXIS)
    return value * lax.stop_gradient(count / get_replica_context().num_replicas_in_sync)
