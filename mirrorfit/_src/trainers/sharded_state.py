"""What ``fit`` does differently when the strategy shards the optimizer state (ZeRO-1/2)
or the params too (ZeRO-3/FSDP).

With ``MirroredStrategy(shard_optimizer_state=True)``: `configured` checks at ``compile``
that the optimizer can update blocks of the params, and flags the step config (its state
is created split); `state_out_specs` keeps the train step's new
optimizer state split as its input was; `finalized` mirrors the EMA that ends ``fit``
(the EMA lives in the optimizer state, so it is split too). With the option off each is
what ``fit`` did before: the config as it is (flagged for per-replica gradient
accumulators when the optimizer accumulates: `accumulation.configured`), ``P()`` (each
leaf's spec when those accumulators are split over the replicas) and the unplaced EMA.

With ``shard_params=True`` as well, the params arrive in every step as this replica's
blocks (`mirrorfit._src.distribute.fsdp`): `on_param_blocks` gives the built-in train step
their split axes (it all-gathers them inside its differentiated function itself) and
gathers the whole tree for every other step, keeping the blocks of the params a train step
returns; `whole_params` is the state a step is traced on for its statistics' shapes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute import fsdp
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.distribute.replica_context import get_replica_context, replica_context
from mirrorfit._src.distribute.run import specs_like
from mirrorfit._src.optimizers.options import finalize_variable_values
from mirrorfit._src.optimizers.sliceable import check_sliceable
from mirrorfit._src.trainers import accumulation
from mirrorfit._src.trainers.state import TrainState
from mirrorfit._src.trainers.step_family import StepConfig


def configured(config: StepConfig, strategy: DeviceMesh) -> StepConfig:
    """``config`` flagged for a sharded optimizer state when ``strategy`` shards it, else
    for per-replica gradient accumulators when it accumulates (`accumulation.configured`).

    Every step updates through the one optimizer update
    (`mirrorfit._src.optimizers.update.apply_update`), which reduce-scatters onto blocks
    for a model's own ``train_step`` as for the built-in one.

    Raises:
        ValueError: if the optimizer cannot update blocks (`check_sliceable`).
    """
    if not strategy.shard_optimizer_state:
        return accumulation.configured(config)
    check_sliceable(config.optimizer)
    return config._replace(shard_optimizer_state=True)


def state_out_specs(strategy: DeviceMesh, state: TrainState) -> Any:
    """The ``out_specs`` of the train step's state: ``P()`` (all mirrored), or with a
    sharded optimizer state or per-replica gradient accumulators
    (`mirrorfit._src.trainers.accumulation`) each leaf's own spec (the step returns it
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
