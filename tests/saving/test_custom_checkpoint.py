"""mf.Checkpoint / CheckpointManager / latest_checkpoint for custom loops: objects (Variables,
objects that own them, mf.Model) and pytrees round trip bitwise, TF's ``prefix-N`` naming and
``checkpoint`` index, restore onto another device count, mismatch and damage errors."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.saving.checkpoint import load
from mirrorfit._src.saving.checkpoint_format import CheckpointError
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.tracking import walk
from tests.helpers import mirrored_strategy, tree_equal

# -- Keras-style objects: a subclassed layer and model, and an optimizer owning Variables ----


class Block(mf.layers.Layer):
    """A subclassed layer creating its weights in build."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel",
                                      initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def call(self, x):
        return jnp.tanh(x @ self.kernel.value + self.bias.value)


class Net(mf.Model):
    """A subclassed model: a subclassed layer, then a built-in one."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.block = Block(8)
        self.head = mf.layers.Dense(2)

    def call(self, x, training=False):
        return self.head(self.block(x))


def _net(replicas, seed):
    with mirrored_strategy(replicas).scope():
        model = Net(seed=seed)
        model(X[:2])  # builds the weights
    return model


class Dense:
    """A plain object owning variables, as walk() finds them."""

    _mf_trackable = True

    def __init__(self, units_in, units_out, seed):
        key = jax.random.PRNGKey(seed)
        self.kernel = mf.Variable(jax.random.normal(key, (units_in, units_out)), name="kernel")
        self.bias = mf.Variable(jnp.zeros(units_out), name="bias")


class Stack:
    """A plain object owning a list of them."""

    _mf_trackable = True

    def __init__(self, seed):
        self.layers = [Dense(4, 8, seed), Dense(8, 2, seed + 1)]


class Momentum:
    """An optimizer owning its step counter and one slot per variable."""

    _mf_trackable = True

    def __init__(self, learning_rate=0.1, momentum=0.9):
        self.learning_rate, self.momentum = learning_rate, momentum
        self.iterations = mf.Variable(0, dtype=jnp.int32, trainable=False, name="iterations")
        self.velocities = []

    def build(self, variables):
        self.velocities = [mf.Variable(jnp.zeros(v.shape), trainable=False, name="velocity")
                           for v in variables]

    def apply_gradients(self, pairs):
        for (grad, variable), velocity in zip(pairs, self.velocities):
            velocity.assign(self.momentum * velocity.value - self.learning_rate * grad)
            variable.assign(variable.value + velocity.value)
        self.iterations.assign_add(1)


X = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
Y = np.random.default_rng(1).normal(size=(16, 2)).astype(np.float32)


def _train(model, optimizer, steps):
    """A custom loop: the model run on traced values in a stateless scope, its gradient, the
    optimizer's update of the variables."""
    variables = model.trainable_variables

    def loss_of(values):
        with StatelessScope(list(zip(variables, values))):
            return jnp.mean((model(X, training=True) - Y) ** 2)

    for _ in range(steps):
        grads = jax.grad(loss_of)([v.value for v in variables])
        optimizer.apply_gradients(zip(grads, variables))


def _values(*objects):
    return [np.asarray(v.numpy()) for obj in objects for _, v in walk(obj)]


def _assert_bitwise(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# -- objects in a custom loop ---------------------------------------------------------------


def test_model_and_optimizer_objects_resume_a_custom_loop_bitwise(tmp_path):
    model = _net(8, seed=0)
    with mirrored_strategy(8).scope():
        optimizer = Momentum()
        optimizer.build(model.trainable_variables)
    _train(model, optimizer, 3)
    ckpt = mf.Checkpoint(model=model, optimizer=optimizer)
    path = ckpt.save(tmp_path / "ckpt")
    saved = _values(model, optimizer)
    _train(model, optimizer, 2)  # the run goes on from the save
    continued = _values(model, optimizer)

    fresh_model = _net(8, seed=7)
    with mirrored_strategy(8).scope():
        fresh_optimizer = Momentum()
        fresh_optimizer.build(fresh_model.trainable_variables)  # slots exist before restore
    mf.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(path)
    _assert_bitwise(_values(fresh_model, fresh_optimizer), saved)
    assert int(fresh_optimizer.iterations.numpy()) == 3
    _train(fresh_model, fresh_optimizer, 2)  # resuming from the restore retraces the run
    _assert_bitwise(_values(fresh_model, fresh_optimizer), continued)


def test_restore_saved_on_8_devices_under_1_device_keeps_placement(tmp_path):
    model = _net(8, seed=0)
    eight = mirrored_strategy(8)
    params = eight.replicate({"w": jnp.arange(3.0)})
    path = mf.Checkpoint(model=model, params=params, step=7).save(tmp_path / "ckpt")

    one = mirrored_strategy(1)
    fresh = _net(1, seed=3)
    restored = mf.Checkpoint(model=fresh, params=one.replicate({"w": jnp.zeros(3)}), step=0)
    restored.restore(path)
    _assert_bitwise(_values(fresh), _values(model))
    for variable in fresh.variables:  # each keeps its own placement: the 1-device strategy's
        assert variable.value.sharding.device_set == {jax.devices()[0]}
    assert isinstance(restored.params["w"], mf.Mirrored)  # mirrored again, on 1 device
    assert len(restored.params["w"].sharding.device_set) == 1
    np.testing.assert_array_equal(restored.params["w"], [0.0, 1.0, 2.0])
    assert restored.step == 7 and type(restored.step) is int


def test_a_variable_reached_twice_is_stored_once(tmp_path):
    layer = Dense(2, 2, seed=0)
    kernel = mf.Variable(jnp.ones(3))
    ckpt = mf.Checkpoint(encoder=layer, same=layer, kernel=kernel, pair=[kernel, 5])
    path = ckpt.save(tmp_path / "ckpt")
    layer.kernel.assign(jnp.zeros((2, 2)))
    kernel.assign(jnp.zeros(3))
    ckpt.restore(path)
    np.testing.assert_array_equal(kernel.numpy(), np.ones(3))
    assert layer.kernel.numpy().any() and ckpt.pair[1] == 5 and ckpt.pair[0] is kernel
    assert sorted(load(path).arrays) == ["encoder/bias", "encoder/kernel", "kernel", "pair/1"]


# -- mf.Model ---------------------------------------------------------------------------------


def test_subclassed_model_trained_in_a_custom_loop_restores_its_trained_variables(tmp_path):
    model = _net(1, seed=0)
    with mirrored_strategy(1).scope():
        optimizer = Momentum()
        optimizer.build(model.trainable_variables)
    _train(model, optimizer, 3)  # assigns the variables, outside fit
    path = mf.Checkpoint(model=model).save(tmp_path / "ckpt")
    fresh = _net(1, seed=5)
    mf.Checkpoint(model=fresh).restore(path)
    _assert_bitwise(_values(fresh), _values(model))
    # The training state (what predict runs on) holds the trained values too.
    tree_equal(jax.device_get(fresh.state.params), jax.device_get(model.state.params))
    np.testing.assert_array_equal(fresh.predict(X, verbose=0), model.predict(X, verbose=0))


def test_subclassed_model_resumes_fit_with_its_optimizer_state_bitwise(tmp_path):
    def compiled(seed):
        model = _net(8, seed=seed)
        model.compile(mf.optimizers.Adam(0.01), "mse")
        return model

    model = compiled(0)
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    path = mf.Checkpoint(model=model).save(tmp_path / "ckpt")
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)

    fresh = compiled(5)
    mf.Checkpoint(model=fresh).restore(path)
    assert int(fresh.optimizer.iterations) == 2
    fresh.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)  # Adam's moments too
    _assert_bitwise(_values(fresh), _values(model))


def test_model_saved_before_its_state_existed_restores_its_variables(tmp_path):
    with mirrored_strategy(1).scope():
        model = Net(seed=0)
        with StatelessScope():
            model(X[:2])  # inside a custom step: the variables exist, the state does not
    assert model.state is None
    path = mf.Checkpoint(model=model).save(tmp_path / "ckpt")
    assert not any("_mf_train_state" in key for key in load(path).arrays)
    fresh = _net(1, seed=5)  # built: it has a state, the checkpoint has none
    mf.Checkpoint(model=fresh).restore(path)
    _assert_bitwise(_values(fresh), _values(model))
    np.testing.assert_array_equal(fresh.predict(X[:2], verbose=0),
                                  np.asarray(model.head(model.block(X[:2]))))


def _classifier(replicas, seed, compile=True):
    with mirrored_strategy(replicas).scope():
        model = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(3), nn.softmax],
                              input_shape=(4,), seed=seed)
        if compile:
            model.compile(mf.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    return model


def test_model_whole_training_state_restores_bitwise_onto_one_device(tmp_path):
    model = _classifier(8, seed=0)
    model.fit(X, np.arange(16) % 3, batch_size=8, epochs=1, verbose=0)
    path = mf.Checkpoint(model=model).save(tmp_path / "ckpt")

    fresh = _classifier(1, seed=5)
    mf.Checkpoint(model=fresh).restore(path)
    tree_equal(jax.device_get(fresh.state), jax.device_get(model.state))
    assert int(fresh.optimizer.iterations) == 2
    leaf = jax.tree.leaves(fresh.params)[0]
    assert leaf.sharding.device_set == {jax.devices()[0]}  # the fresh model's devices

    uncompiled = _classifier(1, seed=5, compile=False)  # its saved optimizer state is skipped
    mf.Checkpoint(model=uncompiled).restore(path)
    tree_equal(jax.device_get(uncompiled.params), jax.device_get(model.params))


def test_unbuilt_model_restores_when_built_and_cannot_be_saved(tmp_path):
    model = _classifier(1, seed=0)
    path = mf.Checkpoint(model=model).save(tmp_path / "ckpt")
    with mirrored_strategy(1).scope():
        unbuilt = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(3), nn.softmax])
    with pytest.raises(ValueError, match="nothing to save"):
        mf.Checkpoint(model=unbuilt).save(tmp_path / "other")
    status = mf.Checkpoint(model=unbuilt).restore(path)  # deferred, as in TensorFlow
    assert status.deferred == ["model"]
    with pytest.raises(AssertionError, match=r"\['model'\] are not built yet"):
        status.assert_consumed()
    unbuilt.build((4,))
    assert status.deferred == [] and status.assert_consumed() is status
    tree_equal(jax.device_get(unbuilt.params), jax.device_get(model.params))


# -- naming, the index file, write/read -------------------------------------------------------


def test_save_numbers_prefix_by_save_counter_and_latest_checkpoint_finds_it(tmp_path):
    w = mf.Variable(jnp.zeros(2))
    ckpt = mf.Checkpoint(w=w)
    assert mf.latest_checkpoint(tmp_path) is None
    prefix = os.fspath(tmp_path / "run" / "ckpt")
    first = ckpt.save(prefix)
    w.assign(jnp.ones(2))
    second = ckpt.save(prefix)
    assert (first, second) == (f"{prefix}-1", f"{prefix}-2")
    assert int(ckpt.save_counter.numpy()) == 2
    assert mf.latest_checkpoint(tmp_path / "run") == second
    assert (tmp_path / "run" / "checkpoint").read_text() == (
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n')

    other = mf.Checkpoint(w=w)
    other.restore(first)
    np.testing.assert_array_equal(w.numpy(), [0.0, 0.0])
    assert int(other.save_counter.numpy()) == 1  # restored with the save
    assert other.save(prefix) == f"{prefix}-2"  # replaces the save of that number, as TF
    np.testing.assert_array_equal(mf.Checkpoint(w=mf.Variable(jnp.ones(2))).restore(
        tmp_path / "run").restored, ["w"])  # a directory restores its newest save


def test_write_and_read_use_the_exact_path_without_counter_or_index(tmp_path):
    w = mf.Variable(jnp.arange(3.0))
    ckpt = mf.Checkpoint(w=w)
    assert ckpt.write(tmp_path / "exact") == os.fspath(tmp_path / "exact")
    assert int(ckpt.save_counter.numpy()) == 0
    assert not (tmp_path / "checkpoint").exists()
    ckpt.save(tmp_path / "numbered")
    w.assign(jnp.zeros(3))
    ckpt.read(tmp_path / "exact")
    np.testing.assert_array_equal(w.numpy(), [0.0, 1.0, 2.0])
    assert int(ckpt.save_counter.numpy()) == 1  # read leaves the counter alone
    with pytest.raises(ValueError, match="exists and is not a mirrorfit checkpoint"):
        ckpt.write(tmp_path)  # the user's directory is never replaced


def test_latest_checkpoint_without_index_takes_highest_number(tmp_path):
    model = _classifier(1, seed=0)
    model.save_weights(tmp_path / "weights")
    model.save_weights(tmp_path / "weights")
    assert mf.latest_checkpoint(tmp_path / "weights") == os.fspath(
        tmp_path / "weights" / "ckpt-2")
    ckpt = mf.Checkpoint(w=np.zeros(2, np.float32))
    ckpt.save(tmp_path / "run" / "ckpt")
    second = ckpt.save(tmp_path / "run" / "ckpt")
    (tmp_path / "run" / "checkpoint").write_text('model_checkpoint_path: "ckpt-9"\n')  # gone
    assert mf.latest_checkpoint(tmp_path / "run") == second


def test_restore_none_is_a_no_op_and_status_reports_partial_restores(tmp_path):
    w, b = mf.Variable(jnp.ones(2)), mf.Variable(jnp.zeros(1))
    assert mf.Checkpoint(w=w).restore(None).restored == []
    path = mf.Checkpoint(w=w, b=b).save(tmp_path / "ckpt")
    w.assign(jnp.zeros(2))
    status = mf.Checkpoint(w=w).restore(path)  # a model without its optimizer, as in TF
    np.testing.assert_array_equal(w.numpy(), [1.0, 1.0])
    assert status.expect_partial() is status
    with pytest.raises(AssertionError, match=r"holds \['b'\] which this Checkpoint does not"):
        status.assert_consumed()


# -- pytrees, as before -------------------------------------------------------------------------


def test_pytrees_round_trip_onto_other_device_count(tmp_path, allclose):
    on_8 = mirrored_strategy(8)
    params = on_8.replicate({"dense": {"kernel": jnp.full((3, 2), 2.0), "bias": jnp.arange(2.0)}})
    opt_state = on_8.replicate(optax.adam(1e-3).init(params))
    path = mf.Checkpoint(params=params, opt_state=opt_state, step=7).save(tmp_path / "ckpt")

    on_3 = mirrored_strategy(3)
    zeros = on_3.replicate({"dense": {"kernel": jnp.zeros((3, 2)), "bias": jnp.zeros(2)}})
    restored = mf.Checkpoint(params=zeros, opt_state=on_3.replicate(optax.adam(1e-3).init(zeros)),
                             step=0)
    restored.restore(path)
    allclose(restored.params, params, rtol=0)
    allclose(restored.opt_state, opt_state, rtol=0)
    assert restored.step == 7
    kernel = restored.params["dense"]["kernel"]
    assert isinstance(kernel, mf.Mirrored) and len(kernel.sharding.device_set) == 3


def test_checkpoint_manager_numbers_prunes_and_goes_on_from_the_directory(tmp_path):
    ckpt = mf.Checkpoint(w=np.zeros(2, np.float32))
    manager = mf.CheckpointManager(ckpt, tmp_path, max_to_keep=2)
    assert manager.latest_checkpoint is None and mf.latest_checkpoint(tmp_path) is None
    for value in (1.0, 2.0, 3.0):
        ckpt.w = np.full(2, value, np.float32)
        saved = manager.save()
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-2", "ckpt-3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "ckpt-2", "ckpt-3"]
    assert mf.latest_checkpoint(tmp_path) == saved == manager.latest_checkpoint
    ckpt.w = np.zeros(2, np.float32)
    ckpt.restore(manager.checkpoints[0])
    np.testing.assert_array_equal(ckpt.w, [2.0, 2.0])
    ckpt.restore(tmp_path)  # a directory restores its newest version
    np.testing.assert_array_equal(ckpt.w, [3.0, 3.0])

    resumed = mf.CheckpointManager(ckpt, tmp_path, max_to_keep=2)  # a restarted run
    assert resumed.checkpoints == manager.checkpoints
    at_step = resumed.save(checkpoint_number=100)
    assert os.path.basename(at_step) == "ckpt-100"
    assert [os.path.basename(p) for p in resumed.checkpoints] == ["ckpt-3", "ckpt-100"]
    assert mf.latest_checkpoint(tmp_path) == at_step


# -- errors --------------------------------------------------------------------------------------


def test_mismatch_names_every_path_expected_and_found_and_restores_nothing(tmp_path):
    model = Stack(seed=0)
    path = mf.Checkpoint(model=model, w=np.ones(3, np.float32)).save(tmp_path / "ckpt")
    other = Stack(seed=1)
    other.layers[1].kernel = mf.Variable(jnp.zeros((8, 5)))  # another architecture
    other.layers[1].extra = mf.Variable(jnp.zeros(2))
    del other.layers[0].bias
    before = _values(other)
    ckpt = mf.Checkpoint(model=other, w=np.ones(4, np.float32))
    with pytest.raises(ValueError) as info:
        ckpt.restore(path)
    message = str(info.value)
    assert "4 mismatching entries; nothing was restored" in message
    assert ("model/layers/1/kernel: expected shape (8, 5) float32, found shape (8, 2) "
            "float32 in the checkpoint") in message
    assert "model/layers/1/extra: expected shape (2,) float32, missing from the checkpoint" \
        in message
    assert ("model/layers/0/bias: found shape (8,) float32 in the checkpoint, but the object "
            "has no such variable") in message
    assert "w: expected shape (4,) float32, found shape (3,) float32" in message
    assert f"Received: save_path={os.fspath(path)!r}" in message
    _assert_bitwise(_values(other), before)
    np.testing.assert_array_equal(ckpt.w, np.ones(4))


def test_unsupported_values_missing_paths_and_reserved_names_are_errors(tmp_path):
    with pytest.raises(TypeError, match="the leaf 'cfg/name' of hparams is of type str"):
        mf.Checkpoint(hparams={"cfg": {"name": "adam"}})
    model = _classifier(1, seed=0)
    with pytest.raises(TypeError, match="optimizer is of type OptimizerHandle.*saved with the "
                                        "model"):
        mf.Checkpoint(optimizer=model.optimizer)
    with pytest.raises(ValueError, match="save_counter is the Checkpoint's own counter"):
        mf.Checkpoint(save_counter=np.zeros(1))
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        mf.Checkpoint(w=np.zeros(1)).restore(tmp_path / "missing")
    with pytest.raises(ValueError, match="max_to_keep must be a positive int"):
        mf.CheckpointManager(mf.Checkpoint(w=np.zeros(1)), tmp_path, max_to_keep=0)


def test_a_fresh_model_and_a_fresh_mf_optimizer_restore_a_custom_loop(tmp_path):
    # The TF tutorial's restore: new objects of the same architecture (the new model gets
    # another default name, which must not matter), then restore, then identical state.
    class Net(mf.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = mf.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    def create():
        model = Net()
        model.build((4,))
        optimizer = mf.optimizers.Adam(0.01)
        optimizer.build(model.trainable_variables)
        return model, optimizer

    x = jnp.ones((8, 4))
    with mirrored_strategy(2).scope():
        model, optimizer = create()
        _, grads = mf.value_and_grad(lambda: jnp.mean(model(x) ** 2),
                                     model.trainable_variables)()
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        path = mf.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))
        fresh_model, fresh_optimizer = create()
        assert fresh_model.name != model.name
        mf.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(path)
    for restored, saved in [(fresh_model.weights, model.weights),
                            (fresh_optimizer.variables, optimizer.variables)]:
        for a, b in zip(restored, saved, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_restore_into_an_unbuilt_model_and_optimizer_waits_for_their_build(tmp_path):
    # TF's training-checkpoints tutorial: a new model and optimizer, not built yet, restore
    # the checkpoint; the values are assigned when each creates its variables (the model at
    # its first call, the optimizer at its first apply_gradients), so training goes on
    # exactly as the saved run did.
    class Net(mf.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.l1 = mf.layers.Dense(5)

        def call(self, x):
            return self.l1(x)

    def train_step(net, opt):
        if not net.built:
            net(X[:1])  # mf.value_and_grad needs the variables: a first call creates them
        loss, grads = mf.value_and_grad(lambda: jnp.mean(jnp.abs(net(X) - Y[:, :1])),
                                        net.trainable_variables)()
        opt.apply_gradients(zip(grads, net.trainable_variables))

    with mirrored_strategy(2).scope():
        net, opt = Net(), mf.optimizers.Adam(0.1)
        for _ in range(3):
            train_step(net, opt)
        path = mf.Checkpoint(step=mf.Variable(3), optimizer=opt, net=net).save(tmp_path / "c")
        for _ in range(2):
            train_step(net, opt)
        fresh_net, fresh_opt, step = Net(), mf.optimizers.Adam(0.1), mf.Variable(0)
        status = mf.Checkpoint(step=step, optimizer=fresh_opt, net=fresh_net).restore(path)
        assert int(step.numpy()) == 3 and status.deferred == ["optimizer", "net"]
        for _ in range(2):
            train_step(fresh_net, fresh_opt)
    assert status.deferred == []
    _assert_bitwise(_values(fresh_net, fresh_opt), _values(net, opt))
    assert int(fresh_opt.iterations.numpy()) == 5


def test_a_deferred_restore_into_another_architecture_raises_at_the_build(tmp_path):
    with mirrored_strategy(1).scope():
        path = mf.Checkpoint(model=_classifier(1, seed=0)).save(tmp_path / "ckpt")
        other = mf.Sequential([nn.Dense(5), nn.Dense(3)])
    mf.Checkpoint(model=other).restore(path)
    with pytest.raises(ValueError, match=r"The restore of 'model' from .*deferred until it was "
                                         r"built, does not match it"):
        other.build((4,))
