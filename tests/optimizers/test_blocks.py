"""Optimizer updates on blocks of the params (sharded optimizer state, ZeRO-1/2): every
``mf.optimizers`` optimizer that `check_sliceable` allows, and Keras' clipping options, give
on 8 replicas' blocks the update of the whole params, with leaves split along different
axes and leaves too small to split."""

import jax
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit._src.distribute import zero
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.run import specs_like
from mirrorfit._src.optimizers import blocks
from mirrorfit._src.optimizers.sliceable import SLICEABLE_OPTIMIZERS
from tests.helpers import tree_allclose

OPTIMIZERS = [
    *(cls(0.01) for cls in SLICEABLE_OPTIMIZERS),
    mf.optimizers.RMSprop(0.01, clipvalue=0.02),
    mf.optimizers.Adam(0.01, clipnorm=0.5),
    mf.optimizers.Nadam(0.01, global_clipnorm=0.5),
]


def test_every_sliceable_optimizer_updates_blocks_as_whole_params():
    rng = np.random.default_rng(0)
    # kernel: split along axis 1 (16); bias: split (8); scale: 5 does not divide, mirrored
    shapes = {"kernel": (3, 16), "bias": (8,), "scale": (5,)}
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    strategy = mf.MirroredStrategy(shard_optimizer_state=True)
    states = tuple(zero.place_optimizer_state(strategy, opt.init(params)) for opt in OPTIMIZERS)

    def steps(params, grads, states):
        # Each optimizer's update on this replica's blocks, and on the whole params.
        on_blocks, whole = [], []
        for opt, state in zip(OPTIMIZERS, states):
            own = zero.blocks_of(params)
            with blocks.block_update(BATCH_AXIS, zero.split_flags(params)):
                updates, _ = opt.update(zero.blocks_of(grads), state, own)
            on_blocks.append(zero.gather_blocks(optax.apply_updates(own, updates), params))
            updates, _ = opt.update(grads, opt.init(params), params)
            whole.append(optax.apply_updates(params, updates))
        return on_blocks, whole

    placed = strategy.replicate_arrays((params, grads))
    specs = specs_like(strategy, (*placed, states))
    on_blocks, whole = strategy.compile_replica_fn(steps, specs, P())(*placed, states)
    tree_allclose(on_blocks, whole, rtol=1e-5, atol=1e-7)
    assert not states[0].hyperparams["learning_rate"].sharding.spec  # scalars: mirrored
    spec = jax.tree.leaves(states[0].inner_state)  # Adam's count, mu, nu
    assert [leaf.sharding.spec for leaf in spec[1:4]] == [P("batch"), P(None, "batch"), P()]
