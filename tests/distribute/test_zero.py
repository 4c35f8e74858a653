"""The sharded optimizer state's placement (`zero.place_optimizer_state`), a custom loop's
optimizer object updating blocks under ``shard_optimizer_state=True``, the clear error of
the objects that cannot, and `mf.unsplit_optimizer_state` refusing blocks kept through
``mf.Mirrored``; fit with it is tested in tests/trainers/test_sharded_state.py, the
functional `mf.apply_gradients` in tests/optimizers/test_gradients.py."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
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


def _custom_loop(strategy, build_outside=False):
    """The tf.distribute custom-training loop (compute_average_loss, apply_gradients in
    run) on a Dense 5-8-3 model, Adam with global_clipnorm, 3 steps, the last batch partial.
    Returns the weights, the optimizer's variables and the sharding of the first moment of
    the (5, 8) kernel."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=40).astype(np.int32)
    with strategy.scope():
        model = mf.Sequential([mf.layers.Dense(8, activation="relu"), mf.layers.Dense(3)],
                              input_shape=(5,))
        model.set_weights([np.linspace(-1, 1, w.size, dtype=np.float32).reshape(w.shape)
                           for w in model.get_weights()])
        optimizer = mf.optimizers.Adam(0.05, global_clipnorm=0.5)
        loss_object = mf.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                              reduction="none")
        if build_outside:
            optimizer.build(model.trainable_variables)

    def train_step(inputs):
        images, labels = inputs
        loss, grads = mf.value_and_grad(
            lambda: mf.compute_average_loss(loss_object(labels, model(images, training=True))),
            model.trainable_variables)()
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for batch in strategy.experimental_distribute_dataset(
            [(x[i:i + 16], y[i:i + 16]) for i in range(0, 40, 16)]):
        strategy.run(train_step, args=(batch,))
    return (model.get_weights(), [np.asarray(v.numpy()) for v in optimizer.variables],
            next(v.value.sharding for v in optimizer.variables
                 if "/mu/" in v.path and v.path.endswith("/dense/kernel")))


@functools.cache
def _mirrored_loop():
    return _custom_loop(mf.MirroredStrategy(jax.devices()[:1]))


@pytest.mark.parametrize("n", [1, 3, 8])
def test_custom_loop_optimizer_object_sharded_equals_mirrored(n):
    devices = jax.devices()[:n]
    want_weights, want_state, _ = _mirrored_loop()  # to rounding, as at n mirrored replicas
    weights, state, sharding = _custom_loop(
        mf.MirroredStrategy(devices, shard_optimizer_state=True))
    for got, want in zip([*weights, *state], [*want_weights, *want_state]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert int(state[0]) == 3  # iterations
    if n == 8:  # the first moment of the (5, 8) kernel: split along its axis 1
        assert sharding.spec == P(None, "batch")
        # built outside run, the state stays mirrored, with the same results
        weights, state, sharding = _custom_loop(
            mf.MirroredStrategy(devices, shard_optimizer_state=True), build_outside=True)
        assert sharding.is_fully_replicated
        for got, want in zip([*weights, *state], [*want_weights, *want_state]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_custom_loop_optimizer_objects_that_cannot_update_blocks_are_refused():
    strategy = mf.MirroredStrategy(jax.devices()[:2], shard_optimizer_state=True)
    with strategy.scope():
        variable = mf.Variable(np.zeros(4, np.float32))
        optimizer = mf.optimizers.Lamb(0.1)
    with pytest.raises(ValueError, match="element-wise optimizer.*Lamb needs whole leaves"):
        strategy.run(lambda: optimizer.apply_gradients([(jnp.ones(4), variable)]))


def test_unsplit_optimizer_state_refuses_blocks_returned_through_mirrored():
    strategy = mf.MirroredStrategy(jax.devices()[:2], shard_optimizer_state=True)
    adam = mf.optimizers.Adam(0.1)
    params = strategy.replicate({"w": jnp.zeros(4)})

    def step(params, opt_state):  # the state's blocks wrongly marked as the same everywhere
        return mf.Mirrored(mf.apply_gradients(adam, params, opt_state, params))

    _, opt_state = strategy.run(step, (params, adam.init(params)))
    with pytest.raises(ValueError, match=r"leaf .*\['w'\] must be whole \(shape \(4,\)\).*"
                                         r"mf.Mirrored keep only replica 0's.*shape \(2,\)"):
        mf.unsplit_optimizer_state(adam, opt_state, params)
