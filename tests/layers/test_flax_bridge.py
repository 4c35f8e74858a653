"""The bridge between Keras-style layers and Flax modules: Flax layers (and plain
``flax.linen`` modules) inside a `mf.layers.Layer` run on Variables of their own; a
Keras-style layer inside a functional or Sequential model runs as a `LayerNode` (summary,
weights, save/load, fit on 1 and 8 replicas); numbers against NumPy."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from mirrorfit._src.layers import flax_bridge
from mirrorfit._src.layers.graph import summary
from mirrorfit._src.layers.graph import sequential
from mirrorfit._src.layers.graph import functional
from tests.helpers import mirrored_strategy

RNG = np.random.default_rng(1)


class Projection(layers.Layer):
    """A built-in Dense and a plain linen Dense (in a list) inside a Keras-style layer."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense = layers.Dense(units, name="dense")
        self.extra = [nn.Dense(2, name="linen")]

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(self.units,), initializer="ones", name="scale")

    def call(self, x):
        return self.extra[0](self.dense(x) * self.scale)


def test_flax_layers_inside_a_layer_run_on_variables_of_their_own():
    layer = Projection(name="proj")
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    out = layer(x)
    assert isinstance(layer.extra[0], flax_bridge.LinenModule)
    assert layer.extra[0].features == 2  # other attributes are the module's
    assert [v.path for v in layer.weights] == [
        "proj/scale", "proj/dense/kernel", "proj/dense/bias", "proj/linen/kernel",
        "proj/linen/bias"]
    scale, kernel, bias, linen_kernel, linen_bias = layer.get_weights()
    np.testing.assert_allclose(out, ((x @ kernel + bias) * scale) @ linen_kernel + linen_bias,
                               rtol=1e-5)
    layer.set_weights([w + 1 for w in layer.get_weights()])
    np.testing.assert_allclose(
        layer(x), ((x @ (kernel + 1) + bias + 1) * (scale + 1)) @ (linen_kernel + 1)
        + linen_bias + 1, rtol=1e-5)


def test_freezing_reaches_flax_and_linen_layers_inside():
    layer = Projection()
    layer(jnp.ones((1, 5)))
    layer.dense.trainable = False
    assert [v.name for v in layer.non_trainable_weights] == ["kernel", "bias"]
    layer.trainable = False
    assert layer.trainable_weights == [] and not layer.extra[0].trainable
    layer.trainable = True
    assert len(layer.trainable_weights) == 5


def test_linen_module_frozen_before_its_first_call_creates_frozen_weights():
    class Holder(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.linen = nn.Dense(2)

        def call(self, x):
            return self.linen(x)

    layer = Holder()
    layer.linen.trainable = False
    layer(jnp.ones((1, 3)))
    assert not any(v.trainable for v in layer.weights) and len(layer.weights) == 2


def test_flax_layer_called_twice_at_top_level_keeps_one_pass_of_penalties():
    dense = layers.Dense(2, kernel_regularizer=layers.L2(0.5), use_bias=False)
    dense(jnp.ones((1, 3)))
    dense(jnp.ones((1, 3)))
    kernel = dense.__mf_variables__()[0][1].numpy()
    penalties = dense.__dict__["_mf_losses"]
    np.testing.assert_allclose([float(p) for p in penalties], [0.5 * np.sum(kernel ** 2)],
                               rtol=1e-6)


class Residual(layers.Layer):
    """``x + dense(x) * gate`` with an L2 penalty on the gate and an ``add_loss``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = layers.Dense(4)

    def build(self, input_shape):
        self.gate = self.add_weight(shape=(input_shape[-1],), initializer="ones",
                                    regularizer=layers.L2(0.01), name="gate")

    def call(self, x):
        self.add_loss(0.1 * jnp.mean(x ** 2))
        return x + self.dense(x) * self.gate


def functional_model(seed=0):
    inputs = layers.Input((4,))
    hidden = Residual(name="residual")(inputs)
    return mf.Model(inputs, layers.Dense(1, name="head")(hidden), seed=seed)


def test_summary_rows_of_a_keras_style_layer_in_functional_and_sequential():
    with mirrored_strategy(1).scope():
        model = functional_model()
        sequential = mf.Sequential([layers.Input((4,)), Residual(name="res"),
                                    layers.Dense(1, name="out")])
    residual = model.get_layer("residual")
    rows = [line for line in _summary(model).splitlines() if "residual" in line]
    assert rows and "(Residual)" in rows[0] and "(None, 4)" in rows[0]
    assert f"{residual.count_params():,}" in rows[0] and residual.count_params() == 4 + 20
    seq_rows = [line for line in _summary(sequential).splitlines() if "(Residual)" in line]
    assert "(None, 4)" in seq_rows[0] and " 24 " in seq_rows[0]


def _summary(model):
    lines = []
    model.summary(print_fn=lines.append)
    return "\n".join(lines)


def test_sequential_led_by_an_input_builds_its_layers_on_symbolic_tensors():
    seen = []

    class Probe(layers.Layer):
        def build(self, input_shape):
            seen.append(input_shape)

        def call(self, x):
            return x

    module, _ = sequential.sequential_module([layers.Input((3,)), layers.Dense(5), Probe()])
    module.init(jax.random.key(0), jnp.ones((2, 3)))
    assert seen == [(None, 5)]  # as Keras' Sequential.build, once


def test_model_get_weights_lists_the_layer_weights_in_its_own_order():
    with mirrored_strategy(1).scope():
        model = functional_model()
    residual = model.get_layer("residual")
    weights = model.get_weights()
    assert [w.shape for w in weights] == [(4,), (4, 4), (4,), (4, 1), (1,)]
    for got, want in zip(weights, residual.get_weights()):
        np.testing.assert_array_equal(got, want)
    new = [np.asarray(RNG.normal(size=w.shape), np.float32) for w in weights]
    model.set_weights(new)
    gate, kernel, bias, head_kernel, head_bias = new
    x = RNG.normal(size=(6, 4)).astype(np.float32)
    want = (x + (x @ kernel + bias) * gate) @ head_kernel + head_bias
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5)


def test_layer_losses_enter_the_model_loss():
    with mirrored_strategy(1).scope():
        model = functional_model()
        model.compile(mf.optimizers.SGD(0.1), "mse")
    gate, kernel, bias, head_kernel, head_bias = model.get_weights()
    x = RNG.normal(size=(8, 4)).astype(np.float32)
    y = RNG.normal(size=(8, 1)).astype(np.float32)
    pred = (x + (x @ kernel + bias) * gate) @ head_kernel + head_bias
    want = np.mean((pred - y) ** 2) + 0.1 * np.mean(x ** 2) + 0.01 * np.sum(gate ** 2)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=8, verbose=0), want, rtol=1e-5)


class DropoutBlock(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dropout = layers.Dropout(0.5)

    def call(self, x):  # no training argument: the model's flag reaches the Dropout
        return self.dropout(x)


def test_dropout_in_a_layer_of_a_functional_model_follows_the_training_flag():
    inputs = layers.Input((64,))
    module = functional.functional_module(inputs, DropoutBlock()(inputs))
    variables = module.init(jax.random.key(0), jnp.ones((2, 64)))
    x = jnp.ones((2, 64))
    trained = np.asarray(module.apply(variables, x, training=True,
                                      rngs={"dropout": jax.random.key(1)}))
    assert 0.3 < (trained == 0).mean() < 0.7
    np.testing.assert_array_equal(module.apply(variables, x, training=False), x)


def test_batch_norm_in_a_layer_of_a_functional_model_updates_its_statistics():
    class Normed(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.norm = layers.BatchNormalization()

        def call(self, x):
            return self.norm(x)

    inputs = layers.Input((3,))
    module = functional.functional_module(inputs, Normed(name="normed")(inputs))
    x = RNG.normal(1.0, 2.0, size=(16, 3)).astype(np.float32)
    variables = module.init(jax.random.key(0), x)
    _, updated = module.apply(variables, x, training=True, mutable=["non_trainable"])
    stats = updated["non_trainable"]["normed"]
    np.testing.assert_allclose(stats["norm/moving_mean"], 0.01 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats["norm/moving_variance"], 0.99 + 0.01 * x.var(0),
                               rtol=1e-5)


@pytest.mark.parametrize("registered", [False, True])
def test_save_and_load_model_with_a_keras_style_layer(tmp_path, registered):
    class Gated(layers.Layer):
        def __init__(self, units=4, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.dense = layers.Dense(units)

        def build(self, input_shape):
            self.gate = self.add_weight(shape=(self.units,), initializer="ones", name="gate")

        def call(self, x):
            return self.dense(x) * self.gate

    Gated.__name__ = Gated.__qualname__ = f"Gated{int(registered)}"
    if registered:
        mf.saving.register_serializable("test_flax_bridge")(Gated)
    custom_objects = {} if registered else {Gated.__name__: Gated}
    with mirrored_strategy(1).scope():
        model = mf.Sequential([layers.Input((5,)), Gated(3), layers.Dense(1)])
        model.compile(mf.optimizers.SGD(0.1), "mse")
        x = RNG.normal(size=(16, 5)).astype(np.float32)
        model.fit(x, np.ones((16, 1), np.float32), epochs=1, batch_size=8, verbose=0)
        model.save(tmp_path / "m.keras")
        loaded = mf.load_model(tmp_path / "m.keras", custom_objects=custom_objects)
    assert isinstance(loaded.layers[0], Gated) and loaded.layers[0].units == 3
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)


def test_frozen_sublayer_of_a_built_model_gets_no_update():
    with mirrored_strategy(1).scope():
        model = functional_model()
        residual = model.get_layer("residual")
        residual.dense.trainable = False
        model.compile(mf.optimizers.SGD(0.1), "mse")
    before = model.get_weights()
    x = RNG.normal(size=(16, 4)).astype(np.float32)
    model.fit(x, np.ones((16, 1), np.float32), epochs=1, batch_size=8, verbose=0)
    after = model.get_weights()
    np.testing.assert_array_equal(after[1], before[1])  # the frozen Dense's kernel
    np.testing.assert_array_equal(after[2], before[2])
    assert not np.allclose(after[0], before[0])  # the gate trains


def test_summary_counts_weights_frozen_after_init_as_non_trainable():
    inputs = layers.Input((4,))
    residual = Residual(name="residual")
    module = functional.functional_module(inputs, residual(inputs))
    variables = module.init(jax.random.key(0), jnp.ones((1, 4)))
    residual.dense.trainable = False
    rows = summary.summary_rows(module, variables)
    assert (rows.trainable_params, rows.non_trainable_params) == (4, 20)
    assert rows.rows[1].params == residual.count_params() == 24


def test_fit_on_8_replicas_matches_1_replica_with_a_partial_last_batch():
    x = RNG.normal(size=(37, 4)).astype(np.float32)  # 3 epochs of batches 16, 16, 5
    y = RNG.normal(size=(37, 1)).astype(np.float32)
    results, initial = {}, None
    for n in (1, 8):
        with mirrored_strategy(n).scope():
            model = functional_model(seed=3)
            # The layer's weights come from the init stream when it is built (as Keras'):
            # both models start from the same ones.
            initial = initial or model.get_weights()
            model.set_weights(initial)
            model.compile(mf.optimizers.SGD(0.05), "mse")
            model.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
            results[n] = model.get_weights()
    assert not np.allclose(results[1][0], np.ones(4))  # the layer's gate trained
    for one, many in zip(results[1], results[8]):
        np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-7)
