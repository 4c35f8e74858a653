"""Subclassed models, models used as layers, and a model's weights as Variables
(mirrorfit/_src/models/object_model.py)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.variables import call_context
from mirrorfit._src.variables.stateless_scope import StatelessScope
from tests.helpers import mirrored_strategy, tree_allclose

L = mf.layers
RNG = np.random.default_rng(0)
X = RNG.normal(size=(37, 4)).astype(np.float32)
Y = RNG.integers(0, 3, size=37)


class MLP(mf.Model):
    """A subclassed model: layers as attributes (one in a list), ``call``."""

    def __init__(self, units=8, **kwargs):
        super().__init__(**kwargs)
        self.hidden = [L.Dense(units, activation="relu"), L.Dense(units, activation="tanh")]
        self.head = L.Dense(3)

    def call(self, x, training=False):
        for layer in self.hidden:
            x = layer(x)
        return self.head(x)


def _fit_mlp(replicas):
    with mirrored_strategy(replicas).scope():
        model = MLP(seed=3)
        model.compile(mf.optimizers.SGD(0.1),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(X, Y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    return model, history


def test_subclassed_model_trains_to_the_same_weights_on_1_and_8_replicas():
    one, h1 = _fit_mlp(1)
    eight, h8 = _fit_mlp(8)
    tree_allclose(jax.device_get(one.params), jax.device_get(eight.params), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h1.history["loss"], h8.history["loss"], rtol=1e-5)
    assert h1.history["loss"][-1] < h1.history["loss"][0]


def test_fit_writes_the_trained_values_back_to_the_layers_variables():
    model, _ = _fit_mlp(2)
    params = jax.device_get(model.params)
    np.testing.assert_array_equal(model.head.weights[0].numpy(), params["head"]["kernel"])
    np.testing.assert_array_equal(model.hidden[1].weights[1].numpy(),
                                  params["hidden"]["1"]["bias"])
    # Eager object call, jitted model(x) and predict agree with a NumPy forward pass.
    h = np.maximum(X @ params["hidden"]["0"]["kernel"] + params["hidden"]["0"]["bias"], 0)
    h = np.tanh(h @ params["hidden"]["1"]["kernel"] + params["hidden"]["1"]["bias"])
    expected = h @ params["head"]["kernel"] + params["head"]["bias"]
    np.testing.assert_allclose(model.predict(X, verbose=0), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(model(X)), expected, rtol=1e-5, atol=1e-5)
    assert [v.shape for v in model.trainable_variables] == [
        (4, 8), (8,), (8, 8), (8,), (8, 3), (3,)]
    for array, variable in zip(model.get_weights(), model.weights, strict=True):
        np.testing.assert_array_equal(array, variable.numpy())  # Keras: weights' order


def test_a_variable_assigned_between_fits_is_trained_from_its_new_value():
    model, _ = _fit_mlp(2)
    model.head.weights[1].assign(np.full(3, 5.0, np.float32))
    np.testing.assert_array_equal(jax.device_get(model.params)["head"]["bias"], 5.0)
    np.testing.assert_allclose(model.evaluate(X, Y, verbose=0),
                               _numpy_loss(model, X, Y), rtol=1e-5)


def _numpy_loss(model, x, y):
    logits = np.asarray(model.predict(x, verbose=0), np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(y)), y].mean()


class AutoEncoder(mf.Model):
    """A subclassed model holding a functional ``encoder`` model as an attribute."""

    def __init__(self, encoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = L.Dense(4)

    def call(self, x):
        return self.decoder(self.encoder(x))


def _compiled_autoencoder():
    with mirrored_strategy(2).scope():
        inputs = L.Input((4,))
        encoder = mf.Model(inputs, L.Dense(2, name="code")(inputs))
        model = AutoEncoder(encoder)
        model.compile(mf.optimizers.SGD(0.1), "mse")
    return encoder, model


def test_a_functional_model_held_by_a_subclass_shares_its_weights():
    encoder, model = _compiled_autoencoder()
    before = encoder.get_weights()
    model.fit(X, X, batch_size=8, epochs=2, verbose=0)
    trained = jax.device_get(model.params)["encoder"]["code"]
    assert not np.allclose(before[0], trained["kernel"])
    np.testing.assert_allclose(encoder.predict(X, verbose=0),
                               X @ trained["kernel"] + trained["bias"], rtol=1e-5, atol=1e-6)


def test_a_model_called_on_symbolic_tensors_is_a_layer_sharing_its_weights():
    with mirrored_strategy(2).scope():
        inner_in = L.Input((4,))
        inner = mf.Model(inner_in, L.Dense(3, name="inner_dense")(inner_in))
        inputs = L.Input((4,))
        outer = mf.Model(inputs, L.Dense(1, name="out")(inner(inputs)))
        outer.compile(mf.optimizers.SGD(0.1), "mse")
    np.testing.assert_array_equal(  # built from the inner model's current weights
        jax.device_get(outer.params)[inner.name]["inner_dense/kernel"],
        inner.get_weights()[0])
    outer.fit(X, X[:, :1], batch_size=8, epochs=2, verbose=0)
    trained = jax.device_get(outer.params)[inner.name]
    np.testing.assert_allclose(inner.predict(X, verbose=0),
                               X @ trained["inner_dense/kernel"] + trained["inner_dense/bias"],
                               rtol=1e-5, atol=1e-6)


def test_model_call_under_jax_grad_raises_instead_of_zero_gradients():
    model, _ = _fit_mlp(1)
    with pytest.raises(RuntimeError, match="value_and_grad"):
        jax.grad(lambda p: jnp.sum(model(X)))(model.params)


def test_strategy_replicate_refuses_an_empty_tree():
    with pytest.raises(ValueError, match="unbuilt model"):
        mirrored_strategy(2).replicate(None)


class Penalized(mf.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = L.Dense(2, kernel_regularizer=mf.regularizers.L2(0.5))

    def call(self, x):
        y = self.dense(x)
        self.add_loss(jnp.mean(y ** 2))
        return y


def test_losses_belong_to_the_forward_pass_inside_a_scope():
    with mirrored_strategy(1).scope():
        model = Penalized()
        model.build((4,))
    kernel = model.dense.weights[0]
    doubled = 2 * kernel.value
    with StatelessScope([(kernel, doubled)]), call_context.call_context(training=True):
        y = model(jnp.asarray(X))
        losses = model.losses
    assert len(losses) == 2  # add_loss, then the kernel's regularizer (sown by the Dense)
    np.testing.assert_allclose(losses[0], np.mean(np.asarray(y) ** 2), rtol=1e-5)
    np.testing.assert_allclose(losses[1], 0.5 * np.sum(np.asarray(doubled) ** 2), rtol=1e-5)


def test_subclassed_model_saves_and_loads_through_custom_objects(tmp_path):
    model, _ = _fit_mlp(2)
    path = tmp_path / "mlp.keras"
    model.save(path)
    with pytest.raises(ValueError, match="custom_objects"):
        mf.load_model(path)
    with mirrored_strategy(8).scope():
        restored = mf.load_model(path, custom_objects={"MLP": MLP})
    assert isinstance(restored, MLP) and restored.compiled
    # The weights load bitwise; predict on 8 replicas runs other per-replica shapes than on
    # 2, for which XLA may pick other kernels (1.8e-7 apart seen on one CPU): float32 rounding.
    np.testing.assert_array_equal(restored.head.weights[0].numpy(), model.head.weights[0].numpy())
    np.testing.assert_allclose(restored.predict(X, verbose=0), model.predict(X, verbose=0),
                               rtol=1e-6, atol=1e-6)
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations)


def test_summary_of_a_subclassed_model_lists_its_layers():
    lines = []
    model, _ = _fit_mlp(1)
    model.summary(print_fn=lines.append)
    text = lines[0]
    for row in ("dense (Dense)", "dense_1 (Dense)", "dense_2 (Dense)"):
        assert row in text
    assert f"Total params: {sum(w.size for w in model.get_weights()):,}" in text


def test_freezing_a_layer_takes_effect_at_the_next_compile():
    model, _ = _fit_mlp(2)
    model.hidden[0].trainable = False
    frozen = model.hidden[0].weights[0].numpy().copy()
    assert "0" in jax.device_get(model.params)["hidden"]  # still trained until recompiled
    model.compile(mf.optimizers.SGD(0.1),
                  mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert "0" not in jax.device_get(model.params)["hidden"]
    assert [w.shape for w in model.non_trainable_weights] == [(4, 8), (8,)]
    head = model.head.weights[0].numpy().copy()
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0)
    np.testing.assert_array_equal(model.hidden[0].weights[0].numpy(), frozen)
    assert not np.allclose(model.head.weights[0].numpy(), head)


class NonNegative(mf.layers.Layer):
    """A layer whose kernel is constrained to be >= 0 after every update."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 1), name="kernel",
                                      initializer="ones",
                                      constraint=lambda w: jnp.maximum(w, 0.0))

    def call(self, inputs):
        return inputs @ self.kernel


def test_weight_constraints_apply_after_every_fit_update():
    with mirrored_strategy(2).scope():
        inputs = L.Input((4,))
        layer = NonNegative()
        model = mf.Model(inputs, layer(inputs))
        model.compile(mf.optimizers.SGD(1.0), "mse")
    # The target pulls every weight negative; unconstrained SGD would get there in one step.
    model.fit(X, -10.0 * np.abs(X).sum(axis=1, keepdims=True), batch_size=8, epochs=1,
              verbose=0)
    kernel = layer.weights[0].numpy()
    assert (kernel >= 0).all() and (kernel == 0).any()


def test_callbacks_read_the_current_weights_of_layers_and_inner_models_during_fit():
    encoder, model = _compiled_autoencoder()
    seen = []

    class Peek(mf.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):  # the fit donates its state's buffers
            seen.append((model.decoder.weights[0].numpy(), encoder.predict(X, verbose=0)))

    for _ in range(2):  # the second fit starts from the variables the first one wrote
        model.fit(X, X, batch_size=8, epochs=2, verbose=0, callbacks=[Peek()])
    kernels = [kernel for kernel, _ in seen]
    assert all(not np.allclose(a, b) for a, b in itertools.pairwise(kernels))
    np.testing.assert_array_equal(kernels[-1], model.decoder.weights[0].numpy())
    np.testing.assert_allclose(seen[-1][1], encoder.predict(X, verbose=0), rtol=1e-6)


def test_nested_sequentials_in_layers_build_inside_a_functional_model():
    # keras-io's MLP-Mixer: Layer subclasses holding Sequentials, in a Sequential, called on
    # an Input. Building read the outer Sequential's state inside the symbolic call's shape
    # trace, which staged the sync of the inner variables: tracers left in the state raised
    # UnexpectedTracerError when the functional model was built.
    class Block(L.Layer):
        def __init__(self):
            super().__init__()
            self.mlp = mf.Sequential([L.Dense(4, activation="relu"), L.Dense(4)])

        def call(self, x):
            return x + self.mlp(x)

    with mirrored_strategy(2).scope():
        blocks = mf.Sequential([Block(), Block()])
        inputs = mf.Input((3, 4))
        model = mf.Model(inputs, L.Dense(2)(blocks(inputs)))
        model.compile(mf.optimizers.SGD(0.1), "mse")
    x = RNG.normal(size=(8, 3, 4)).astype(np.float32)
    assert all(isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer)
               for leaf in jax.tree.leaves(blocks.state.params))
    history = model.fit(x, np.zeros((8, 3, 2), np.float32), batch_size=4, epochs=2, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    # The trained weights are the inner Sequentials' own: the first block's view agrees.
    inner = blocks.layers[0].mlp.get_weights()[0]
    np.testing.assert_array_equal(inner, model.get_weights()[0])
