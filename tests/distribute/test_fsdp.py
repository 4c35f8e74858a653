"""Sharded params (``MirroredStrategy(shard_params=True)``, ZeRO-3/FSDP) outside ``fit``: their
placement (split as the optimizer state is, the leaves no axis divides named once in a log
line and in the summary), the strategy's argument, and the custom loops of
tests/distribute/test_zero.py and tests/optimizers/test_gradients.py run unchanged: the
optimizer object's update inside ``strategy.run`` over a model's split weights, and
``mf.apply_gradients`` over mirrored params. ``fit`` with it: tests/trainers/test_sharded_params.py."""

import logging

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit._src.distribute import fsdp
from tests.distribute.test_zero import _custom_loop, _mirrored_loop
from tests.optimizers.test_gradients import _loop, _mirrored


def test_place_params_splits_like_the_optimizer_state_and_names_mirrored_leaves(caplog):
    params = {"kernel": np.ones((3, 16), np.float32), "bias": np.ones((5,), np.float32)}
    strategy = mf.MirroredStrategy(jax.devices()[:8], shard_params=True)
    placed = fsdp.place_params(strategy, params)
    assert {k: v.sharding.spec for k, v in placed.items()} == {"kernel": P(None, "batch"),
                                                             "bias": P()}
    assert placed["kernel"].addressable_shards[0].data.shape == (3, 2)
    assert fsdp.summary_line(strategy, placed) == (
        "Params sharded over 8 replicas (ZeRO-3): 1 of 2 leaves split, 48 of 53 values; "
        "mirrored (no axis divides by 8): bias (5,)")
    with caplog.at_level(logging.WARNING, logger="mirrorfit"):
        fsdp.report_mirrored(strategy, placed, "dense")
    assert caplog.messages == [("shard_params: dense's params sharded over 8 replicas "
                                "(ZeRO-3): 1 of 2 leaves split, 48 of 53 values; mirrored (no "
                                "axis divides by 8): bias (5,)")]
    mirrored = fsdp.place_params(mf.MirroredStrategy(jax.devices()[:8]), params)
    assert all(v.sharding.is_fully_replicated for v in mirrored.values())


def test_shard_params_implies_a_sharded_optimizer_state_and_must_be_a_bool():
    strategy = mf.MirroredStrategy(jax.devices()[:2], shard_params=True)
    assert strategy.shard_params and strategy.shard_optimizer_state
    assert repr(strategy) == ("MirroredStrategy(num_replicas_in_sync=2, platform='cpu', "
                              "shard_params=True)")
    with pytest.raises(TypeError, match="shard_params must be a bool.*shard_params=1"):
        mf.MirroredStrategy(shard_params=1)


@pytest.mark.parametrize("n", [3, 8])
def test_custom_loop_optimizer_object_over_split_weights_equals_mirrored(n):
    want_weights, want_state, _ = _mirrored_loop()  # one replica, mirrored
    strategy = mf.MirroredStrategy(jax.devices()[:n], shard_params=True)
    weights, state, sharding = _custom_loop(strategy)
    for got, want in zip([*weights, *state], [*want_weights, *want_state]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    if n == 8:  # the (5, 8) kernel's first moment, and the kernel itself, split on axis 1
        assert sharding.spec == P(None, "batch")


def test_custom_loop_keeps_the_model_weights_split():
    strategy = mf.MirroredStrategy(jax.devices()[:8], shard_params=True)
    with strategy.scope():
        model = mf.Sequential([mf.layers.Dense(8)], input_shape=(4,))
        optimizer = mf.optimizers.SGD(0.1)
    x = np.ones((16, 4), np.float32)

    def step(x):
        loss, grads = mf.value_and_grad(
            lambda: mf.compute_average_loss(model(x, training=True) ** 2),
            model.trainable_variables)()
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    before = model.get_weights()
    strategy.run(step, args=(next(iter(strategy.experimental_distribute_dataset([x]))),))
    specs = [leaf.sharding.spec for leaf in jax.tree.leaves(model.params)]
    assert specs == [P("batch"), P(None, "batch")]  # bias (8,), kernel (4, 8)
    assert all(not np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


def test_functional_apply_gradients_runs_unchanged(allclose):
    # mf.apply_gradients over params the loop holds mirrored: the state is split (as with
    # shard_optimizer_state), the params come back whole.
    strategy = mf.MirroredStrategy(jax.devices()[:8], shard_params=True)
    params, _, _ = _loop(strategy, "SUM")
    allclose(jax.device_get(params), _mirrored("SUM")[0], rtol=1e-5, atol=1e-7)
