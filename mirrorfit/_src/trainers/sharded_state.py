"""Where compile's optimizer state and the params live, and what ``fit`` does with them:
mirrored, split over the replicas (ZeRO-1/2 and ZeRO-3/FSDP), or with per-replica gradient
accumulators.

**A sharded state.** With ``MirroredStrategy(shard_optimizer_state=True)``: `configured`
checks at ``compile`` that the optimizer can update blocks of the params, and flags the step
config (its state is created split); `state_out_specs` keeps the train step's new
optimizer state split as its input was; `finalized` mirrors the EMA that ends ``fit``
(the EMA lives in the optimizer state, so it is split too). With the option off each is
what ``fit`` did before: the config as it is (flagged for per-replica gradient
accumulators when the optimizer accumulates), ``P()`` (each leaf's spec when those
accumulators are split over the replicas) and the unplaced EMA.

With ``shard_params=True`` as well, the params arrive in every step as this replica's
blocks (`mirrorfit._src.distribute.fsdp`): `on_param_blocks` gives the built-in train step
their split axes (it all-gathers them inside its differentiated function itself) and
gathers the whole tree for every other step, keeping the blocks of the params a train step
returns; `whole_params` is the state a step is traced on for its statistics' shapes.

**Per-replica gradient accumulators.**

With an optimizer made with ``gradient_accumulation_steps=k`` (compile's, in any form of
train step), each replica accumulates its own gradients and the
gradients are all-reduced once per applied update rather than on each of the ``k``
micro-steps (`mirrorfit._src.optimizers.accumulation.local_gradients`). The accumulator is
per-replica state: every ``accumulated_gradients`` leaf of the optimizer state gets a leading
``[num_replicas]`` axis placed over the ``"batch"`` axis (``P("batch")``), one slot per
replica; every other leaf stays mirrored.

`configured` flags the step config at ``compile``; `init_opt_state` and `place_opt_state` create
and place the optimizer state so. Checkpoints hold the whole ``[num_replicas, ...]``
arrays, so a run resumes bitwise at the same replica count; at another count (or into a
params-shaped accumulator: a model with its own ``train_step``, a sharded optimizer state)
the slots are summed into one (`mirrorfit._src.optimizers.accumulation.resized_accumulators`),
which gives the same update up to float32 rounding.

Custom loops, other optimizer objects and ``shard_optimizer_state=True`` keep the
accumulation after the per-step all-reduce (or reduce-scatter), with a params-shaped
accumulator.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute import fsdp, zero
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh
from mirrorfit._src.distribute.replica_context import get_replica_context, replica_context
from mirrorfit._src.distribute.run import specs_like
from mirrorfit._src.optimizers.accumulation import (
    GradientAccumulationState,
    per_replica_accumulators,
)
from mirrorfit._src.optimizers.base import Optimizer
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer
from mirrorfit._src.optimizers.options import finalize_variable_values
from mirrorfit._src.optimizers.sliceable import check_sliceable
from mirrorfit._src.trainers.state import TrainState
from mirrorfit._src.trainers.step_family import StepConfig


def configured(config: StepConfig, strategy: DeviceMesh) -> StepConfig:
    """``config`` flagged for a sharded optimizer state when ``strategy`` shards it, else
    for per-replica gradient accumulators when it accumulates (`_accumulating`).

    Every step updates through the one optimizer update
    (`mirrorfit._src.optimizers.update.apply_update`), which reduce-scatters onto blocks
    for a model's own ``train_step`` as for the built-in one.

    Raises:
        ValueError: if the optimizer cannot update blocks (`check_sliceable`).
    """
    if not strategy.shard_optimizer_state:
        return _accumulating(config)
    check_sliceable(config.optimizer)
    return config._replace(shard_optimizer_state=True)


def state_out_specs(strategy: DeviceMesh, state: TrainState) -> Any:
    """The ``out_specs`` of the train step's state: ``P()`` (all mirrored), or with a
    sharded optimizer state or per-replica gradient accumulators
    (`init_opt_state`) each leaf's own spec (the step returns it
    placed as it came)."""
    specs = specs_like(strategy, (state,))[0]
    if strategy.shard_optimizer_state or any(
            spec != P() for spec in jax.tree.leaves(specs, is_leaf=lambda s: isinstance(s, P))):
        return specs
    return P()


def finalized(strategy: DeviceMesh, state: TrainState) -> Any:
    """``finalize_variable_values``: the params ``fit`` ends with, mirrored (split under
    ``shard_params``)."""
    params = finalize_variable_values(state.params, state.opt_state)
    if strategy.shard_optimizer_state and params is not state.params:
        return fsdp.place_params(strategy, params)
    return params


def on_param_blocks(strategy: DeviceMesh, step: Callable, state: TrainState, kind: str,
                    takes_blocks: bool) -> Callable:
    """``step`` (per replica, its first argument the `TrainState`, its train form returning
    ``(state, statistics)``) as it runs on ``state`` 's params under ``shard_params``: with
    the replica context's ``param_axes`` set (the axis each param leaf of ``state`` is split
    along), given the blocks when ``takes_blocks`` (the built-in train step), else the whole
    params all-gathered, a train step's new params cut back to this replica's blocks
    (`zero.kept_blocks`). ``step`` itself when no param leaf is split.

    Args:
        strategy: the strategy; ``state`` is placed on it.
        step: the per-replica step.
        state: the state it is compiled for (global arrays).
        kind: ``"train"``, ``"eval"`` or ``"predict"``.
        takes_blocks: whether ``step`` (a train step) gathers the params itself.
    """
    if not strategy.shard_params:
        return step
    axes = fsdp.spec_axes(specs_like(strategy, (state,))[0].params)
    if not fsdp.any_split(axes):
        return step

    @functools.wraps(step)
    def on_blocks(state: TrainState, *rest: Any) -> Any:
        with replica_context(get_replica_context().derived(param_axes=axes)) as context:
            if takes_blocks:
                return step(state, *rest)
            out = step(state._replace(params=context._gather_params(state.params, axes)), *rest)
            if kind != "train":
                return out
            new_state, statistics = out
            return new_state._replace(params=context._kept_params(new_state.params, axes)), \
                statistics

    return on_blocks


def whole_params(strategy: DeviceMesh, state: TrainState) -> TrainState:
    """``state`` with its params as shapes (``jax.ShapeDtypeStruct``, no placement) under
    ``shard_params``, so a per-replica trace for shapes only receives them whole; ``state``
    itself otherwise."""
    if not strategy.shard_params:
        return state
    return state._replace(params=jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state.params))


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


def _accumulating(config: StepConfig) -> StepConfig:
    """``config`` flagged for per-replica accumulation when it runs an accumulating
    optimizer with a mirrored optimizer state (`configured`, when the state is not split): every
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
