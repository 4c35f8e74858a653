"""`mf.apply_gradients` (the functional update of a custom loop) under
``MirroredStrategy(shard_optimizer_state=True)``: a tf-tutorial loop whose state goes in and
out of ``strategy.run`` as blocks equals the mirrored loop, each device holds 1/D of the
state, `mf.unsplit_optimizer_state` reads the whole, and what cannot update blocks is
refused. The mirrored form is tested in tests/distribute/test_mirrored_outputs.py and
tests/trainers/test_model_hooks.py."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf

X = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
Y = np.random.default_rng(1).integers(0, 3, size=40).astype(np.int32)


def _optimizer(reduce_op):
    """Adam with global_clipnorm (norms over every block), or an allow-listed optax chain."""
    if reduce_op == "SUM":
        return mf.optimizers.Adam(0.05, global_clipnorm=0.5)
    return optax.chain(optax.clip(0.2), optax.adam(0.05))


def _loop(strategy, reduce_op):
    """3 steps of batch 16 over 40 rows (the last one partial) on a 5-24-3 MLP: the loss a
    share of the global mean (SUM) or that times the replica count (MEAN of the replicas'
    gradients: the same gradient). Returns the final params, the opt_state as the loop holds
    it and the optimizer."""
    n = strategy.num_replicas_in_sync
    optimizer = _optimizer(reduce_op)
    sizes = [(5, 24), (24, 3)]
    params = strategy.replicate([
        {"kernel": np.linspace(-1, 1, a * b, dtype=np.float32).reshape(a, b),
         "bias": np.linspace(-0.1, 0.1, b, dtype=np.float32)} for a, b in sizes])
    opt_state = optimizer.init(params)

    def step(params, opt_state, batch):
        x, y = batch

        def loss(params):
            h = jax.nn.relu(x @ params[0]["kernel"] + params[0]["bias"])
            logits = h @ params[1]["kernel"] + params[1]["bias"]
            per_example = optax.softmax_cross_entropy_with_integer_labels(logits, y)
            return mf.compute_average_loss(per_example) * (1 if reduce_op == "SUM" else n)

        params, opt_state = mf.apply_gradients(optimizer, jax.grad(loss)(params), opt_state,
                                               params, reduce_op=reduce_op)
        return mf.Mirrored(params), opt_state

    for batch in strategy.experimental_distribute_dataset(
            [(X[i:i + 16], Y[i:i + 16]) for i in range(0, 40, 16)]):
        params, opt_state = strategy.run(step, args=(params, opt_state, batch))
    return params, opt_state, optimizer


@functools.cache
def _mirrored(reduce_op):
    params, opt_state, optimizer = _loop(mf.MirroredStrategy(jax.devices()[:1]), reduce_op)
    return jax.device_get((params, mf.unsplit_optimizer_state(optimizer, opt_state, params)))


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("reduce_op", ["SUM", "MEAN"])
def test_functional_loop_with_sharded_state_equals_mirrored(allclose, n, reduce_op):
    strategy = mf.MirroredStrategy(jax.devices()[:n], shard_optimizer_state=True)
    params, opt_state, optimizer = _loop(strategy, reduce_op)
    want_params, want_state = _mirrored(reduce_op)  # to rounding, as at n mirrored replicas
    allclose(jax.device_get(params), want_params, rtol=1e-5, atol=1e-7)
    full = mf.unsplit_optimizer_state(optimizer, opt_state, params)
    allclose(jax.device_get(full), want_state, rtol=1e-5, atol=1e-7)
    if n == 8:  # a device holds 1/8 of each split leaf (all but the scalars and bias (3,))
        leaves = jax.tree_util.tree_flatten_with_path(opt_state)[0]
        mu = next(v for p, v in leaves if ".mu[0]['kernel']" in jax.tree_util.keystr(p))
        assert isinstance(mu, mf.PerReplica)
        assert [s.data.shape for s in mu.values.addressable_shards] == [(1, 5, 3)] * 8
        device = jax.devices()[0]
        held = sum(s.data.nbytes for _, v in leaves for s in v.values.addressable_shards
                   if s.device == device)
        assert held <= 0.15 * sum(np.asarray(v).nbytes for v in jax.tree.leaves(want_state))


def test_what_cannot_update_blocks_is_refused():
    strategy = mf.MirroredStrategy(jax.devices()[:2], shard_optimizer_state=True)
    params = strategy.replicate({"w": jnp.zeros(4)})

    def step(optimizer, params, opt_state):
        return mf.apply_gradients(optimizer, params, opt_state, params)

    lamb = optax.lamb(0.1)  # per-leaf trust ratios need whole leaves
    with pytest.raises(ValueError, match="needs an optimizer that updates each replica's block"
                                         ".*scale_by_trust_ratio.*shard_optimizer_state=False"):
        strategy.run(functools.partial(step, lamb), (params, lamb.init(params)))
    adam = optax.adam(0.1)  # a state for other params: neither whole nor a block
    with pytest.raises(ValueError, match=r"opt_state must be optimizer.init\(params\).*"
                                         r"shape \(3,\), neither the full shape \(4,\)"):
        strategy.run(functools.partial(step, adam), (params, adam.init({"w": jnp.zeros(3)})))
    with pytest.raises(ValueError, match="reduce_op must be mf.ReduceOp.SUM.*Received: "
                                         "reduce_op='max'"):  # outside run too
        mf.apply_gradients(adam, params, adam.init(params), params, reduce_op="max")


def test_loss_scaling_skips_on_every_replica_when_one_block_is_not_finite():
    strategy = mf.MirroredStrategy(jax.devices()[:2], shard_optimizer_state=True)
    optimizer = mf.optimizers.LossScaleOptimizer(mf.optimizers.SGD(0.1), initial_scale=4.0)
    params = strategy.replicate({"w": jnp.zeros(4)})
    grads = {"w": jnp.array([jnp.inf, 1.0, 1.0, 1.0])}  # only replica 0's block holds the inf

    def step(params, opt_state):
        return mf.apply_gradients(optimizer, grads, opt_state, params, reduce_op="MEAN")

    params, opt_state = strategy.run(step, (params, optimizer.init(params)))
    np.testing.assert_array_equal(np.asarray(params["w"].values), np.zeros((2, 4)))
    np.testing.assert_array_equal(np.asarray(opt_state.dynamic_scale.values), [2.0, 2.0])
