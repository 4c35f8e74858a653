"""fit with MirroredStrategy(shard_optimizer_state=True) (ZeRO-1/2): the same weights as the
mirrored run at 1, 3 and 8 replicas, Keras' options included; the optimizer state split
over the replicas; optimizers that cannot be split refused at compile; checkpoints hold the
full state and resume at another replica count, split or not."""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.optimizers.accumulation import per_replica_accumulators
from mirrorfit._src.trainers import data_adapters
from tests.helpers import (
    Interrupt,
    all_reduce_operands,
    count_step_compiles,
    interrupt_after,
    tree_allclose,
    tree_equal,
)

_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(100, 8)).astype(np.float32)  # 100 rows in batches of 24: last has 4
Y = _RNG.integers(0, 3, 100)


def _adamw():
    opt = mf.optimizers.AdamW(0.01, weight_decay=0.1, clipnorm=0.05)
    opt.exclude_from_weight_decay(var_names=["bias"])
    # A scale this high overflows at first: skipped steps, decided by all replicas together.
    return mf.optimizers.LossScaleOptimizer(opt, initial_scale=2.0**126)


OPTIMIZERS = {  # name -> (optimizer factory, steps_per_execution)
    "loss_scale_adamw_decay_exclusions_clipnorm": (_adamw, 1),
    "sgd_global_clipnorm_ema_accumulation": (lambda: mf.optimizers.SGD(
        0.1, momentum=0.9, global_clipnorm=0.05, use_ema=True, ema_overwrite_frequency=3,
        gradient_accumulation_steps=2), 3),
    "optax_chain": (lambda: optax.chain(optax.clip(0.1), optax.adam(0.01)), 1),
}
"""The other mf optimizers and clipvalue: tests/optimizers/test_blocks.py."""


def _model(replicas, shard, optimizer, steps_per_execution=1):
    devices = jax.devices()[:replicas]
    with mf.MirroredStrategy(devices, shard_optimizer_state=shard).scope():
        model = mf.Sequential([nn.Dense(24), nn.relu, nn.Dense(3), nn.softmax],
                              input_shape=(8,), seed=0)
        model.compile(optimizer, "sparse_categorical_crossentropy",
                      steps_per_execution=steps_per_execution)
    return model


def _fit(model, callbacks=(), epochs=2, **kwargs):
    return model.fit(X, Y, batch_size=24, epochs=epochs, verbose=0, shuffle=False,
                     callbacks=list(callbacks), **kwargs)


@pytest.mark.parametrize("replicas,name", [
    (1, "loss_scale_adamw_decay_exclusions_clipnorm"), (3, "sgd_global_clipnorm_ema_accumulation"),
    (8, "loss_scale_adamw_decay_exclusions_clipnorm"), (8, "sgd_global_clipnorm_ema_accumulation"),
])  # the optax chain at 8: test_sharded_step_reduce_scatters_...
def test_sharded_fit_equals_mirrored_fit(replicas, name):
    make, steps_per_execution = OPTIMIZERS[name]
    mirrored = _model(replicas, False, make(), steps_per_execution)
    sharded = _model(replicas, True, make(), steps_per_execution)
    expected = _fit(mirrored)
    with count_step_compiles() as compiles:
        got = _fit(sharded)
    assert compiles == [1]
    # Reduce-scatter and all-reduce add in different orders: equal to float32 rounding.
    tree_allclose(sharded.get_weights(), mirrored.get_weights(), rtol=1e-5, atol=1e-7)
    # The mirrored run accumulates per replica (one slot each): their sum is the sharded sum.
    summed = per_replica_accumulators(jax.device_get(mirrored.opt_state),
                                      lambda acc: jax.tree.map(lambda a: a.sum(0), acc))
    tree_allclose(jax.device_get(sharded.opt_state), summed, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.history["loss"], expected.history["loss"], rtol=1e-5)
    # Params stay mirrored; state leaves with an axis that divides are split.
    assert all(leaf.sharding.is_fully_replicated for leaf in jax.tree.leaves(sharded.params))
    split = [leaf for leaf in jax.tree.leaves(sharded.opt_state)
             if not leaf.sharding.is_fully_replicated]
    assert bool(split) == (replicas > 1)
    for leaf in split:  # each device holds 1/replicas of a split leaf
        assert leaf.addressable_shards[0].data.size * replicas == leaf.size


def test_sharded_step_reduce_scatters_split_gradients_and_all_gathers_their_params():
    model = _model(8, True, OPTIMIZERS["optax_chain"][0]())
    mirrored = _model(8, False, OPTIMIZERS["optax_chain"][0]())
    _fit(model, epochs=1)
    _fit(mirrored, epochs=1)
    tree_allclose(model.get_weights(), mirrored.get_weights(), rtol=1e-5, atol=1e-7)
    data = data_adapters.get_data_adapter(X, Y, batch_size=24, num_replicas=8)
    batch = next(place_batches(data.batches(0), model.strategy))
    statistics = model.trainer._fresh_statistics(model.state, batch)
    hlo = model.trainer.train_fn.lower(model.state, statistics, batch).compile().as_text()
    # Dense(24)'s kernel [8, 24] and bias [24] and Dense(3)'s kernel [24, 3] are split over
    # 8 replicas (XLA may combine their collectives); Dense(3)'s bias [3] is not: one
    # all-reduce carries its gradient and the statistics.
    assert hlo.count(" reduce-scatter(") >= 1 and hlo.count(" all-gather(") >= 1
    assert [len(operands) for operands in all_reduce_operands(hlo)] == [2]


def test_compile_refuses_optimizers_that_need_whole_leaves():
    model = _model(2, True, "sgd")
    for optimizer, part in [
            (mf.optimizers.Lamb(), "Lamb"), (mf.optimizers.Adafactor(), "Adafactor"),
            (optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3)),
             "clip_by_global_norm"),
            (optax.adamw(1e-3, mask=lambda params: params), "masked")]:
        with pytest.raises(ValueError, match=f"shard_optimizer_state=True.*{part}"):
            model.compile(optimizer, "sparse_categorical_crossentropy")


def test_backup_and_restore_resumes_sharded_run_bitwise(tmp_path):
    make, _ = OPTIMIZERS["loss_scale_adamw_decay_exclusions_clipnorm"]
    model = _model(8, True, make())
    initial = jax.device_get(model.state)
    validation = {"validation_data": (X[:30], Y[:30])}  # evaluate with a split state too
    expected = _fit(model, **validation).history
    weights = model.get_weights()
    model.assign_state(**initial._asdict())
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=2)
    with pytest.raises(Interrupt):
        _fit(model, [backup, interrupt_after(model, 7)], **validation)
    assert _fit(model, [backup], **validation).history == expected
    tree_equal(model.get_weights(), weights)


def test_saved_model_holds_full_state_and_loads_at_other_replica_counts(tmp_path):
    model = _model(8, True, mf.optimizers.Adam(0.01))
    _fit(model, epochs=1)
    path = tmp_path / "model.keras"
    model.save(path)
    saved = jax.device_get(model.opt_state)
    for replicas, shard in [(3, False), (2, True)]:
        with mf.MirroredStrategy(jax.devices()[:replicas], shard_optimizer_state=shard).scope():
            loaded = mf.load_model(path, model.module)
        tree_equal(jax.device_get(loaded.opt_state), saved)
        assert any(not leaf.sharding.is_fully_replicated
                   for leaf in jax.tree.leaves(loaded.opt_state)) == shard
