"""Gradient accumulation with one all-reduce per applied update, in ``fit``.

With an optimizer made with ``gradient_accumulation_steps=k`` (compile's, in any form of
train step), each replica accumulates its own gradients and the
gradients are all-reduced once per applied update rather than on each of the ``k``
micro-steps (`mirrorfit._src.optimizers.options.local_gradients`). The accumulator is
per-replica state: every ``accumulated_gradients`` leaf of the optimizer state gets a leading
``[num_replicas]`` axis placed over the ``"batch"`` axis (``P("batch")``), one slot per
replica; every other leaf stays mirrored.

`configured` flags the step config at ``compile`` (through `sharded_state.configured`); `init_opt_state` and `place_opt_state`
create and place the optimizer state so. Checkpoints hold the whole ``[num_replicas, ...]``
arrays, so a run resumes bitwise at the same replica count; at another count (or into a
params-shaped accumulator: a model with its own ``train_step``, a sharded optimizer state)
the slots are summed into one (`mirrorfit._src.optimizers.accumulation.resized_accumulators`),
which gives the same update up to float32 rounding.

Custom loops, other optimizer objects and ``shard_optimizer_state=True`` keep the
accumulation after the per-step all-reduce (or reduce-scatter), with a params-shaped
accumulator.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute import zero
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh
from mirrorfit._src.optimizers.accumulation import (
    GradientAccumulationState,
    per_replica_accumulators,
)
from mirrorfit._src.optimizers.base import Optimizer
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer
from mirrorfit._src.trainers.step_family import StepConfig


def accumulation_steps(optimizer: optax.GradientTransformation) -> int | None:
    """The ``gradient_accumulation_steps`` of an mf optimizer (inside a
    `LossScaleOptimizer` too); None for none, or for an optax transformation."""
    while isinstance(optimizer, LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    return optimizer.gradient_accumulation_steps if isinstance(optimizer, Optimizer) else None


NO_UPDATE = (
    "The optimizer applies an update every gradient_accumulation_steps={k} train steps, but "
    "this fit runs {steps} (with {done} accumulated before it): it will change no weight. "
    "Train for at least {needed} steps (more epochs or steps_per_epoch), or lower "
    "gradient_accumulation_steps. Received: gradient_accumulation_steps={k} and {steps} "
    "train steps")
"""Warned (a `MirrorfitWarning`) when a ``fit`` ends before the first accumulated update."""


def no_update_warning(optimizer: optax.GradientTransformation, opt_state: Any,
                      steps: int | None) -> str | None:
    """`NO_UPDATE` when ``optimizer`` accumulates gradients and ``steps`` more train steps
    (``None``: unknown) cannot reach its next update from ``opt_state`` 's mini-step, else
    ``None``."""
    k = accumulation_steps(optimizer)
    if k is None or steps is None:
        return None
    found: list[Any] = []
    jax.tree.map(lambda node: found.append(node) if isinstance(
        node, GradientAccumulationState) else None, opt_state,
        is_leaf=lambda node: isinstance(node, GradientAccumulationState))
    done = int(jax.device_get(found[0].mini_step)) if found else 0
    if done + steps >= k:
        return None
    return NO_UPDATE.format(k=k, steps=steps, done=done, needed=k - done)


def configured(config: StepConfig) -> StepConfig:
    """``config`` flagged for per-replica accumulation when it runs an accumulating
    optimizer with a mirrored optimizer state (called by
    `mirrorfit._src.trainers.sharded_state.configured` when the state is not split): every
    form of train step updates through `mirrorfit._src.optimizers.update.apply_update`,
    which finds the per-replica slots in the state."""
    if config.shard_optimizer_state or accumulation_steps(config.optimizer) is None:
        return config
    return config._replace(local_accumulation=True)


def _shardings(strategy: DeviceMesh, tree: Any) -> Any:
    replicated = jax.tree.map(lambda _: strategy.replicated_sharding, tree)
    per_replica = NamedSharding(strategy.mesh, P(BATCH_AXIS))
    return per_replica_accumulators(replicated, lambda acc: jax.tree.map(
        lambda _: per_replica, acc))


def init_opt_state(strategy: DeviceMesh, config: StepConfig, params: Any) -> Any:
    """``config.optimizer.init(params)`` placed on ``strategy``; with
    ``config.local_accumulation`` the accumulators are zeros ``[num_replicas, *shape]``
    split over the replicas."""
    if not config.local_accumulation:
        if not strategy.shard_optimizer_state:
            return jax.jit(config.optimizer.init,
                           out_shardings=strategy.replicated_sharding)(params)
        shapes = jax.eval_shape(config.optimizer.init, params)  # split: placed as created
        return jax.jit(config.optimizer.init, out_shardings=jax.tree.map(
            lambda s: zero.optimizer_state_sharding(strategy, s.shape), shapes))(params)
    replicas = strategy.num_replicas_in_sync

    def init(params):
        return per_replica_accumulators(config.optimizer.init(params), lambda acc: jax.tree.map(
            lambda a: jnp.zeros((replicas, *a.shape), a.dtype), acc))

    return jax.jit(init, out_shardings=_shardings(strategy, jax.eval_shape(init, params)))(
        params)


def place_opt_state(strategy: DeviceMesh, config: StepConfig | None, tree: Any) -> Any:
    """An optimizer state (host or device arrays) placed as `init_opt_state` places it."""
    if config is None or not config.local_accumulation:
        return zero.place_optimizer_state(strategy, tree)
    return jax.device_put(tree, _shardings(strategy, tree))
