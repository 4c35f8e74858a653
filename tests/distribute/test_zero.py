"""The sharded optimizer state's placement (`zero.place_optimizer_state`) and the clear error
of a custom loop's optimizer update under ``shard_optimizer_state=True``; fit with it is
tested in tests/trainers/test_sharded_state.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit._src.distribute import zero


def test_place_optimizer_state_splits_leaves_along_first_divisible_axis():
    state = {"kernel": np.ones((3, 16), np.float32), "odd": np.ones((5,), np.float32),
             "count": np.int32(0)}
    strategy = mf.MirroredStrategy(jax.devices()[:8], shard_optimizer_state=True)
    placed = zero.place_optimizer_state(strategy, state)
    assert {k: v.sharding.spec for k, v in placed.items()} == {
        "kernel": P(None, "batch"), "odd": P(), "count": P()}
    assert placed["kernel"].addressable_shards[0].data.shape == (3, 2)
    mirrored = zero.place_optimizer_state(mf.MirroredStrategy(jax.devices()[:8]), state)
    assert all(v.sharding.is_fully_replicated for v in mirrored.values())


def test_custom_loop_optimizer_updates_are_refused_when_state_is_sharded():
    strategy = mf.MirroredStrategy(jax.devices()[:2], shard_optimizer_state=True)
    opt = optax.sgd(0.1)
    params = strategy.replicate({"w": jnp.zeros(3)})

    def step(params, opt_state):
        return mf.apply_gradients(opt, params, opt_state, params)

    with pytest.raises(ValueError, match="mf.apply_gradients inside strategy.run.*"
                                         "shard_optimizer_state=False"):
        strategy.run(step, (params, opt.init(params)))
    with strategy.scope():
        variable = mf.Variable(np.zeros(3, np.float32))
        optimizer = mf.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="optimizer.apply_gradients inside strategy.run"):
        strategy.run(lambda: optimizer.apply_gradients([(jnp.ones(3), variable)]))
