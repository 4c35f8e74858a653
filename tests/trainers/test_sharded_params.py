"""fit with MirroredStrategy(shard_params=True) (ZeRO-3/FSDP): the same weights, losses,
evaluation and predictions as the mirrored run at 1, 3 and 8 replicas with a partial last
batch (Keras' options, loss scaling, EMA, accumulation, steps_per_execution, device-resident
data, mixed precision); the train step all-gathers the params inside its differentiated
function and again for the backward pass, and reduce-scatters their gradients; a model's own
train_step (Keras' form and the stateless JAX form) runs on the gathered weights; a device
holds its share of params and optimizer state between steps; checkpoints and saved models
hold the whole params and load at any replica count, sharded or mirrored; the summary names
the mirrored leaves; export writes the single-device program."""

import gc

import flax.linen as nn
import jax
import numpy as np
import pytest
from jax.extend import core as jax_core

import mirrorfit as mf
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.trainers import data_adapters
from tests.helpers import Interrupt, count_step_compiles, interrupt_after, tree_allclose, tree_equal
from tests.trainers.test_keras_steps import GuideModel
from tests.trainers.test_sharded_state import OPTIMIZERS, X, Y, _fit


def _model(replicas, shard, optimizer, steps_per_execution=1, dtype_policy=None):
    with mf.MirroredStrategy(jax.devices()[:replicas], shard_params=shard).scope():
        model = mf.Sequential([nn.Dense(24), nn.relu, nn.Dense(3), nn.softmax],
                              input_shape=(8,), seed=0, dtype_policy=dtype_policy)
        model.compile(optimizer, "sparse_categorical_crossentropy", ["accuracy"],
                      steps_per_execution=steps_per_execution)
    return model


def _split(leaves):
    """The leaves split over the replicas; asserts each device holds one equal block."""
    split = [leaf for leaf in leaves if not leaf.sharding.is_fully_replicated]
    for leaf in split:
        assert leaf.addressable_shards[0].data.size * len(leaf.sharding.device_set) == leaf.size
    return split


@pytest.mark.parametrize("replicas,name,resident", [
    (1, "loss_scale_adamw_decay_exclusions_clipnorm", False),
    (3, "sgd_global_clipnorm_ema_accumulation", False),
    (8, "loss_scale_adamw_decay_exclusions_clipnorm", False),
    (8, "sgd_global_clipnorm_ema_accumulation", True),
])
def test_sharded_params_fit_equals_mirrored_fit(replicas, name, resident):
    make, steps_per_execution = OPTIMIZERS[name]
    mirrored = _model(replicas, False, make(), steps_per_execution)
    sharded = _model(replicas, True, make(), steps_per_execution)
    callbacks = [mf.callbacks.TerminateOnNaN()] if replicas == 3 else []  # checked updates
    expected = _fit(mirrored, callbacks, device_resident=resident)
    with count_step_compiles() as compiles:
        got = _fit(sharded, callbacks, device_resident=resident)
    assert compiles == [1]
    # Reduce-scatter and all-reduce add in different orders: equal to float32 rounding.
    tree_allclose(sharded.get_weights(), mirrored.get_weights(), rtol=1e-5, atol=1e-7)
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(got.history[key], expected.history[key], rtol=1e-5)
    np.testing.assert_allclose(sharded.evaluate(X, Y, batch_size=24, verbose=0),
                               mirrored.evaluate(X, Y, batch_size=24, verbose=0), rtol=1e-5)
    np.testing.assert_allclose(sharded.predict(X, batch_size=24, verbose=0),
                               mirrored.predict(X, batch_size=24, verbose=0), rtol=1e-5,
                               atol=1e-7)
    # Params and state leaves with an axis that divides are split, also after the EMA.
    assert bool(_split(jax.tree.leaves(sharded.params))) == (replicas > 1)
    assert bool(_split(jax.tree.leaves(sharded.opt_state))) == (replicas > 1)


def _producers(jaxpr):
    """``{var: eqn}`` of every equation of ``jaxpr`` and its sub-jaxprs."""
    found = {}
    for eqn in jaxpr.eqns:
        found.update(dict.fromkeys(eqn.outvars, eqn))
        for sub in jax_core.jaxprs_in_params(eqn.params):
            found.update(_producers(sub))
    return found


def _remats(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "remat2":
            yield eqn
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from _remats(sub)


def test_step_gathers_params_again_for_the_backward_pass_and_reduce_scatters_them():
    model = _model(8, True, mf.optimizers.Adam(0.01))
    _fit(model, epochs=1)
    data = data_adapters.get_data_adapter(X, Y, batch_size=24, num_replicas=8)
    batch = next(place_batches(data.batches(0), model.strategy))
    statistics = model.trainer._fresh_statistics(model.state, batch)
    step = model.trainer.train_fn.fn
    jaxpr = jax.make_jaxpr(step)(model.state, statistics, batch).jaxpr
    producers = _producers(jaxpr)
    (backward,) = [eqn for eqn in _remats(jaxpr) if eqn.params["differentiated"]]

    def source(var):  # through the copies jax.checkpoint inserts on saved values
        eqn = None if isinstance(var, jax_core.Literal) else producers.get(var)
        while eqn is not None and eqn.primitive.name == "reduce_precision":
            eqn = producers.get(eqn.invars[0])
        return None if eqn is None else eqn.primitive.name

    # No gathered weight is saved for the backward pass: it all-gathers Dense(3)'s kernel
    # again (the gradient of Dense(24)'s output needs it).
    assert "all_gather" not in [source(v) for v in backward.invars]
    inside = [e.primitive.name for e in backward.params["jaxpr"].eqns]
    assert inside.count("all_gather") == 1 and inside.count("reduce_scatter") == 3
    # Dense(24)'s kernel [8, 24] and bias [24] and Dense(3)'s kernel [24, 3] are split;
    # Dense(3)'s bias [3] is not: one all-reduce carries its gradient and the statistics.
    hlo = model.trainer.train_fn.lower(model.state, statistics, batch).compile().as_text()
    assert hlo.count(" reduce-scatter(") == 3 and hlo.count(" all-reduce(") == 1


class KerasFormStep(mf.Model):
    """A subclassed model with Keras 3's ``train_step(self, data)``."""

    def __init__(self):
        super().__init__()
        self.hidden = mf.layers.Dense(16, activation="relu")
        self.out = mf.layers.Dense(3)

    def call(self, x, training=False):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data
        loss, grads = mf.value_and_grad(
            lambda: self.compute_loss(x, y, self(x, training=True)), self.trainable_variables)()
        self.optimizer.apply(grads)
        return {"loss": loss}


@pytest.mark.parametrize("form", ["keras", "jax"])
def test_own_train_step_runs_on_gathered_weights_and_equals_mirrored(form):
    def build(shard):
        with mf.MirroredStrategy(jax.devices()[:8], shard_params=shard).scope():
            if form == "keras":
                model = KerasFormStep()
            else:
                model = GuideModel(nn.Dense(16), input_shape=(8,))
            model.compile(mf.optimizers.Adam(0.01),
                          mf.losses.SparseCategoricalCrossentropy(from_logits=True),
                          steps_per_execution=2)
        return model

    runs = []
    for shard in (False, True):
        model = build(shard)
        history = _fit(model, [mf.callbacks.TerminateOnNaN()])
        runs.append((model, history.history))
    (mirrored, expected), (sharded, got) = runs
    tree_allclose(sharded.get_weights(), mirrored.get_weights(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    assert _split(jax.tree.leaves(sharded.params))
    assert _split(jax.tree.leaves(sharded.opt_state))


def test_mixed_precision_fit_equals_mirrored_to_bfloat16_rounding():
    # The backward pass recomputes the gathered weights' casts; XLA fuses the float32
    # to bfloat16 round trips of the two programs differently, so they agree to a few
    # bfloat16 ulps (2**-8 relative), not to float32 rounding.
    runs = [_model(8, shard, mf.optimizers.Adam(0.01), dtype_policy="mixed_bfloat16")
            for shard in (False, True)]
    losses = [_fit(model).history["loss"] for model in runs]
    np.testing.assert_allclose(losses[1], losses[0], rtol=2e-3)
    tree_allclose(runs[1].get_weights(), runs[0].get_weights(), rtol=2e-2, atol=2e-3)
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(runs[1].params))


def test_constraints_see_whole_weights():
    # MaxNorm bounds each column's norm over the kernel's first axis, which is split.
    def build(shard):
        with mf.MirroredStrategy(jax.devices()[:8], shard_params=shard).scope():
            model = mf.Sequential([mf.layers.Dense(16, kernel_constraint=mf.constraints.MaxNorm(
                0.3)), mf.layers.Dense(3, activation="softmax")], input_shape=(8,), seed=0)
            model.compile(mf.optimizers.SGD(0.5), "sparse_categorical_crossentropy")
        return model

    mirrored, sharded = build(False), build(True)
    _fit(mirrored, epochs=1)
    _fit(sharded, epochs=1)
    tree_allclose(sharded.get_weights(), mirrored.get_weights(), rtol=1e-5, atol=1e-7)
    kernel = sharded.get_weights()[0]
    assert kernel.shape == (8, 16) and np.linalg.norm(kernel, axis=0).max() <= 0.3 + 1e-6


def _device0_bytes():
    """Bytes of every live array's block on the first device."""
    gc.collect()
    device = jax.devices()[0]
    return sum(shard.data.nbytes for array in jax.live_arrays()
               for shard in array.addressable_shards if shard.device == device)


class _Device0Bytes(mf.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(_device0_bytes())


def test_device_holds_its_share_of_params_and_optimizer_state_between_steps():
    replicas, width = 4, 128
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, width)).astype(np.float32)
    y = rng.integers(0, 8, 64)
    held = {}
    for shard in (False, True):
        before = _device0_bytes()
        with mf.MirroredStrategy(jax.devices()[:replicas], shard_params=shard).scope():
            model = mf.Sequential([layer for _ in range(5) for layer in (nn.Dense(width),
                                                                          nn.relu)]
                                  + [nn.Dense(8)], input_shape=(width,), seed=0)
            model.compile(mf.optimizers.Adam(1e-3),
                          mf.losses.SparseCategoricalCrossentropy(from_logits=True))
        probe = _Device0Bytes()
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[probe])
        held[shard] = max(probe.seen) - before
        total = sum(leaf.nbytes for leaf in jax.tree.leaves((model.params, model.opt_state)))
        layer = (width * width + width) * 4  # one Dense(128)'s params, gathered
        del model, probe
    # Mirrored: every device holds all of it; sharded: its quarter, plus at most one layer
    # (here only Dense(8)'s bias stays mirrored) and the batches.
    assert held[False] >= total
    assert held[True] <= 1.1 * total / replicas + layer
    assert held[True] <= 1.1 * held[False] / replicas + layer


def test_backup_and_restore_resumes_bitwise_and_checkpoints_load_anywhere(tmp_path):
    model = _model(8, True, OPTIMIZERS["loss_scale_adamw_decay_exclusions_clipnorm"][0]())
    initial = jax.device_get(model.state)
    validation = {"validation_data": (X[:30], Y[:30])}
    expected = _fit(model, **validation).history
    weights = model.get_weights()
    model.assign_state(**initial._asdict())
    assert _split(jax.tree.leaves(model.params))  # restored whole, placed split
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=2)
    with pytest.raises(Interrupt):
        _fit(model, [backup, interrupt_after(model, 7)], **validation)
    checkpoint = mf.callbacks.ModelCheckpoint(tmp_path / "checkpoint")
    assert _fit(model, [backup, checkpoint], **validation).history == expected
    tree_equal(model.get_weights(), weights)
    with mf.MirroredStrategy(jax.devices()[:3]).scope():  # its last epoch's, whole
        tree_equal(mf.load_model(tmp_path / "checkpoint", model.module).get_weights(), weights)

    path = tmp_path / "model.keras"
    model.save(path)
    saved = jax.device_get((model.params, model.opt_state))
    for replicas, kwargs in [(3, {}), (2, {"shard_params": True}),
                             (8, {"shard_optimizer_state": True})]:
        with mf.MirroredStrategy(jax.devices()[:replicas], **kwargs).scope():
            loaded = mf.load_model(path, model.module)
        tree_equal(jax.device_get((loaded.params, loaded.opt_state)), saved)
        assert bool(_split(jax.tree.leaves(loaded.params))) == ("shard_params" in kwargs)
    mirrored = _model(3, False, mf.optimizers.Adam(0.01))  # and the other way round
    _fit(mirrored, epochs=1)
    mirrored.save(tmp_path / "mirrored.keras")
    with mf.MirroredStrategy(jax.devices()[:8], shard_params=True).scope():
        loaded = mf.load_model(tmp_path / "mirrored.keras", mirrored.module)
    tree_equal(loaded.get_weights(), mirrored.get_weights())
    assert _split(jax.tree.leaves(loaded.params))


def test_summary_names_mirrored_leaves_and_export_writes_the_whole_weights(tmp_path):
    model = _model(8, True, mf.optimizers.Adam(0.01))
    lines = []
    model.summary(print_fn=lines.append)
    assert lines[-1] == ("Params sharded over 8 replicas (ZeRO-3): 3 of 4 leaves split, 288 "
                         "of 291 values; mirrored (no axis divides by 8): layers_2/bias (3,)")
    model.export(tmp_path / "model.stablehlo", format="stablehlo", verbose=False)
    served = mf.export.load(tmp_path / "model.stablehlo")
    np.testing.assert_allclose(served(X[:5]), model.predict(X[:5], verbose=0), rtol=1e-6)
