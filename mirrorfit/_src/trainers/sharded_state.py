"""What ``fit`` does differently when the strategy shards the optimizer state (ZeRO-1/2).

With ``MirroredStrategy(shard_optimizer_state=True)``: `configured` checks at ``compile``
that the optimizer can update blocks of the params, and flags the step config (its state
is created split); `state_out_specs` keeps the train step's new
optimizer state split as its input was; `finalized` mirrors the EMA that ends ``fit``
(the EMA lives in the optimizer state, so it is split too). With the option off each is
what ``fit`` did before: the config as it is (flagged for per-replica gradient
accumulators when the optimizer accumulates: `accumulation.configured`), ``P()`` (each
leaf's spec when those accumulators are split over the replicas) and the unplaced EMA.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute.mesh import DeviceMesh
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
    """``finalize_variable_values``: the params ``fit`` ends with, mirrored."""
    params = finalize_variable_values(state.params, state.opt_state)
    if strategy.shard_optimizer_state and params is not state.params:
        return strategy.replicate_arrays(params)
    return params
