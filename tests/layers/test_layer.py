"""The Keras-style `mf.layers.Layer`: construction, build, weights, call context, losses,
freezing, dtypes and config, as Keras 3's ``keras/src/layers/layer.py``; numbers against
NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers

RNG = np.random.default_rng(28)


class Linear(layers.Layer):
    """``x @ w + b``, Keras' custom-layer guide's ``Linear``."""

    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.build_shapes = []

    def build(self, input_shape):
        self.build_shapes.append(input_shape)
        self.w = self.add_weight(shape=(input_shape[-1], self.units), name="w")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")

    def call(self, inputs):
        return inputs @ self.w + self.b


def test_unknown_keyword_argument_raises_keras_message():
    with pytest.raises(ValueError, match=r"Unrecognized keyword arguments passed to Linear: "
                                         r"\{'unit': 3\}"):
        Linear(unit=3)


def test_trainable_that_is_not_bool_and_name_with_slash_are_rejected():
    with pytest.raises(ValueError, match="Expected `trainable` to be a boolean"):
        Linear(trainable=1)
    with pytest.raises(ValueError, match="cannot contain character `/`"):
        Linear(name="a/b")


def test_forgetting_super_init_says_to_add_it():
    class NoSuper(layers.Layer):
        def __init__(self, units):
            self.units = units

        def call(self, x):
            return x

    layer = NoSuper(3)
    with pytest.raises(RuntimeError, match=r"forgot to call `super\(\).__init__\(\)`"):
        layer(jnp.ones((2, 3)))
    with pytest.raises(RuntimeError, match=r"forgot to call `super\(\).__init__\(\)`"):
        layer.add_weight(shape=(2,))


def test_defining_dunder_call_instead_of_call_is_rejected():
    with pytest.raises(TypeError, match="Rename __call__ to call"):
        class Wrong(layers.Layer):
            def __call__(self, x):
                return x


def test_build_runs_once_on_first_call_with_the_batch_shape():
    layer = Linear(4, name="linear")
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    out = layer(x)
    layer(x)
    assert layer.build_shapes == [(2, 3)] and layer.built
    w, b = layer.get_weights()
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-6)


def test_build_by_hand_is_not_repeated_by_the_first_call():
    layer = Linear(2)
    layer.build((None, 5))
    assert layer.built
    layer(jnp.ones((3, 5)))
    assert layer.build_shapes == [(None, 5)] and len(layer.weights) == 2


def test_build_on_symbolic_input_gets_none_batch():
    layer = Linear(2)
    out = layer(layers.Input((7,)))
    assert layer.build_shapes == [(None, 7)] and out.shape == (None, 2)


def test_build_gets_a_list_of_shapes_for_a_list_input():
    class Pair(layers.Layer):
        def build(self, input_shape):
            self.seen = input_shape

        def call(self, inputs):
            a, b = inputs
            return a.sum(-1) + b.sum(-1)

    layer = Pair()
    layer([jnp.ones((2, 3)), jnp.ones((2, 5))])
    assert layer.seen == [(2, 3), (2, 5)]


def test_build_with_one_shape_per_call_argument():
    class Two(layers.Layer):
        def build(self, a_shape, b_shape):
            self.seen = (a_shape, b_shape)

        def call(self, a, b):
            return a + b.sum()

    layer = Two()
    layer(jnp.ones((2, 3)), jnp.ones((4,)))
    assert layer.seen == ((2, 3), (4,))

    class BadNames(layers.Layer):
        def build(self, first, second):
            pass

        def call(self, a, b):
            return a

    with pytest.raises(ValueError, match="`_shape` suffix"):
        BadNames()(jnp.ones(2), jnp.ones(2))


def test_add_weight_initializers_by_keras_name_and_callable():
    layer = layers.Layer(name="holder")
    ones = layer.add_weight(shape=(2, 3), initializer="ones", name="ones")
    zeros = layer.add_weight(shape=(3,), initializer="zeros", name="zeros")
    by_shape = layer.add_weight(shape=(2,), initializer=lambda shape, dtype: jnp.full(
        shape, 7.0, dtype), name="sevens")
    by_key = layer.add_weight(shape=(2,), initializer=jax.nn.initializers.constant(3.0))
    glorot = layer.add_weight(shape=(40, 60))  # Keras' default for floats
    count = layer.add_weight(shape=(), dtype="int32", trainable=False, name="count")
    np.testing.assert_array_equal(ones.numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(zeros.numpy(), np.zeros(3))
    np.testing.assert_array_equal(by_shape.numpy(), [7.0, 7.0])
    np.testing.assert_array_equal(by_key.numpy(), [3.0, 3.0])
    limit = np.sqrt(6.0 / (40 + 60))
    assert np.abs(glorot.numpy()).max() <= limit and glorot.numpy().std() > limit / 3
    assert count.dtype == jnp.int32 and int(count.numpy()) == 0 and not count.trainable
    assert [v.name for v in (by_key, glorot)] == ["variable_3", "variable_4"]
    assert ones.path == "holder/ones"


def test_add_weight_with_positional_name_says_to_pass_it_by_keyword():
    with pytest.raises(ValueError, match=r"add_weight\(shape=..., name='kernel'\)"):
        layers.Layer().add_weight("kernel", (2, 2))


class Counter(layers.Layer):
    """A non-trainable weight created before a trainable one."""

    def build(self, input_shape):
        self.count = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                     name="count")
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones",
                                     name="scale")

    def call(self, x):
        return x * self.scale


class Stack(layers.Layer):
    """Sub-layers in an attribute, a list and a dict, and one appended later."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first = Linear(3, name="first")
        self.blocks = [Linear(3, name="block_a"), Counter(name="counter")]
        self.heads = {"out": layers.Dense(2, name="out")}

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(2,), initializer="zeros", name="bias")

    def call(self, x):
        x = self.first(x)
        for block in self.blocks:
            x = block(x)
        return self.heads["out"](x) + self.bias


def test_weights_in_keras_order_own_trainable_first_then_sublayers():
    layer = Stack(name="stack")
    layer(jnp.ones((2, 5)))
    assert [v.path for v in layer.weights] == [
        "stack/bias",
        "stack/first/w", "stack/first/b",
        "stack/block_a/w", "stack/block_a/b",
        "stack/counter/scale", "stack/counter/count",  # Keras: trainable first
        "stack/out/kernel", "stack/out/bias"]
    assert [v.path for v in layer.non_trainable_weights] == ["stack/counter/count"]
    assert len(layer.trainable_weights) == 8
    assert layer.layers == [layer.first, *layer.blocks, layer.heads["out"]]


def test_layer_appended_to_a_list_after_construction_is_tracked():
    layer = Stack(name="stack")
    late = Linear(3, name="late")
    layer.blocks.append(late)
    layer(jnp.ones((2, 5)))
    assert late in layer.layers and late.built
    assert {"stack/late/w", "stack/late/b"} <= {v.path for v in layer.trainable_weights}
    assert layer.count_params() == 44 + 12


def test_get_set_weights_and_count_params():
    layer = Stack(name="stack")
    with pytest.raises(ValueError, match="isn't built"):
        layer.count_params()
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    layer(x)
    weights = [np.asarray(RNG.normal(size=w.shape), np.float32) for w in layer.get_weights()]
    layer.set_weights(weights)
    for got, want in zip(layer.get_weights(), weights):
        np.testing.assert_array_equal(got, want)
    assert layer.count_params() == sum(w.size for w in weights) == 2 + 18 + 12 + 4 + 8
    b, w1, b1, w2, b2, scale, _, kernel, bias = weights
    h = ((x @ w1 + b1) @ w2 + b2) * scale
    np.testing.assert_allclose(layer(x), h @ kernel + bias + b, rtol=1e-5)
    with pytest.raises(ValueError, match="expecting 9 weights"):
        layer.set_weights(weights[:-1])
    with pytest.raises(ValueError, match="not compatible"):
        layer.set_weights([np.zeros(3)] + weights[1:])


class Inner(layers.Layer):
    """Dropout and BatchNormalization in a call that takes no ``training``."""

    def __init__(self, rate=0.5, **kwargs):
        super().__init__(**kwargs)
        self.dropout = layers.Dropout(rate)
        self.norm = layers.BatchNormalization()

    def call(self, x):
        return self.norm(self.dropout(x))


class Outer(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Inner(name="inner")

    def call(self, x, training=None):
        return self.inner(x)


class Dropper(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dropout = layers.Dropout(0.5)

    def call(self, x):
        return self.dropout(x)


class Wrapper(layers.Layer):
    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def call(self, x):  # takes no training: Keras' call context carries it
        return self.inner(x)


@pytest.mark.parametrize("training", [True, False, None])
def test_training_reaches_dropout_in_a_call_without_training_argument(training):
    x = jnp.ones((64, 8))
    out = np.asarray(Wrapper(Dropper())(x, training=training))
    if training:
        assert 0.3 < (out == 0).mean() < 0.7
        np.testing.assert_allclose(out[out != 0], 2.0)  # kept values scaled 1 / (1 - rate)
    else:
        np.testing.assert_array_equal(out, np.ones((64, 8)))


def test_training_reaches_batch_norm_in_nested_layer_and_updates_its_statistics():
    layer = Outer(name="outer")
    layer.inner = Inner(rate=0.0, name="inner")
    x = RNG.normal(2.0, 3.0, size=(32, 4)).astype(np.float32)
    layer(x)  # inference: statistics unchanged
    stats = {v.name: v.numpy() for v in layer.non_trainable_weights}
    np.testing.assert_array_equal(stats["moving_mean"], np.zeros(4))
    out = layer(x, training=True)
    stats = {v.name: v.numpy() for v in layer.non_trainable_weights}
    # Keras: moving = moving * 0.99 + batch * 0.01; the output uses the batch statistics.
    np.testing.assert_allclose(stats["moving_mean"], 0.01 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats["moving_variance"], 0.99 + 0.01 * x.var(0), rtol=1e-5)
    np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3), rtol=1e-4,
                               atol=1e-5)


def test_training_is_passed_only_to_a_call_that_takes_it():
    seen = {}

    class TakesKwargs(layers.Layer):
        def call(self, x, **kwargs):
            seen["kwargs"] = kwargs
            return x

    class Default(layers.Layer):
        def call(self, x, training=True):
            seen["default"] = training
            return x

    TakesKwargs()(jnp.ones(2), training=True)
    Default()(jnp.ones(2))
    assert seen == {"kwargs": {}, "default": True}


def test_mask_is_passed_only_when_call_takes_it():
    class Masked(layers.Layer):
        def call(self, x, mask=None):
            return x if mask is None else x * mask

    class Unmasked(layers.Layer):
        def call(self, x):
            return x

    x, mask = jnp.ones(3), jnp.array([1.0, 0.0, 1.0])
    np.testing.assert_array_equal(Masked()(x, mask=mask), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(Unmasked()(x, mask=None), x)
    with pytest.warns(mf.MirrorfitWarning, match="takes no `mask` argument"):
        np.testing.assert_array_equal(Unmasked()(x, mask=mask), x)


class Penalized(layers.Layer):
    """``add_loss`` in call, and an L2-regularized weight."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w",
                                 regularizer=layers.L2(0.1))

    def call(self, x):
        self.add_loss(jnp.mean(x ** 2))
        return x * self.w


def test_losses_belong_to_one_forward_pass_with_weight_penalties():
    layer = Penalized()
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    layer(x)
    layer(2 * x)
    losses = [float(v) for v in layer.losses]
    np.testing.assert_allclose(losses, [np.mean((2 * x) ** 2), 0.1 * 3.0], rtol=1e-6)
    layer.trainable = False  # a frozen weight's penalty is not a loss (Keras 3)
    np.testing.assert_allclose([float(v) for v in layer.losses], [np.mean((2 * x) ** 2)])


def test_losses_of_nested_layers_and_flax_regularizers_are_collected():
    class Parent(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.child = Penalized()
            self.dense = layers.Dense(2, kernel_regularizer=layers.L2(0.5), use_bias=False)

        def call(self, x):
            return self.dense(self.child(x))

    layer = Parent()
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    layer(x)
    layer(x)
    kernel = layer.dense.__mf_variables__()[0][1].numpy()
    want = [np.mean(x ** 2), 0.5 * np.sum(kernel ** 2), 0.1 * 3.0]
    np.testing.assert_allclose([float(v) for v in layer.losses], want, rtol=1e-5)


def test_activity_regularizer_is_divided_by_the_batch_size():
    layer = Linear(2, activity_regularizer=layers.L2(0.1))
    x = RNG.normal(size=(5, 3)).astype(np.float32)
    out = np.asarray(layer(x))
    np.testing.assert_allclose(float(layer.losses[0]), 0.1 * np.sum(out ** 2) / 5, rtol=1e-5)


def test_freezing_moves_weights_to_non_trainable_recursively_and_back():
    layer = Stack(name="stack")
    layer(jnp.ones((2, 5)))
    layer.trainable = False
    assert layer.trainable_weights == [] and len(layer.non_trainable_weights) == 9
    assert not layer.first.trainable and not layer.heads["out"].trainable
    assert not any(v.trainable for v in layer.weights)
    assert layer.first.trainable_weights == []
    layer.trainable = True
    assert [v.path for v in layer.non_trainable_weights] == ["stack/counter/count"]
    layer.blocks[0].trainable = False
    assert len(layer.trainable_weights) == 6 and layer.trainable


def test_weight_added_to_a_frozen_layer_is_trainable_after_unfreezing():
    layer = Linear(2, trainable=False)
    layer(jnp.ones((1, 3)))
    assert layer.trainable_weights == [] and not layer.w.trainable
    layer.trainable = True
    assert layer.trainable_weights == [layer.w, layer.b]


def test_mixed_bfloat16_policy_casts_floating_inputs_and_keeps_float32_weights():
    seen = {}

    class Probe(Linear):
        def call(self, inputs, ids):
            seen["dtypes"] = (inputs.dtype, ids.dtype)
            return super().call(inputs)

    layer = Probe(2, dtype="mixed_bfloat16")
    layer(jnp.ones((2, 3)), jnp.ones((2,), jnp.int32))
    assert seen["dtypes"] == (jnp.bfloat16, jnp.int32)
    assert (layer.compute_dtype, layer.variable_dtype, layer.dtype) == (
        "bfloat16", "float32", "float32")
    assert layer.w.dtype == jnp.float32
    Probe(2)(jnp.ones((2, 3), jnp.bfloat16), jnp.ones((2,), jnp.int32))  # cast up, as Keras
    assert seen["dtypes"][0] == jnp.float32
    Probe(2, dtype="mixed_bfloat16", autocast=False)(jnp.ones((2, 3)), jnp.ones((2,)))
    assert seen["dtypes"][0] == jnp.float32
    with pytest.raises(ValueError, match="dtype policy name"):
        Linear(dtype="mixed_int3")


class Scaled(layers.Layer):
    def __init__(self, units, activation="relu", sizes=(1, 2), **kwargs):
        super().__init__(**kwargs)
        self.units, self.activation, self.sizes = units, activation, sizes

    def call(self, x):
        return x


def test_auto_config_has_constructor_arguments_with_defaults_and_round_trips():
    layer = Scaled(3, name="scaled", trainable=False, autocast=False)
    config = layer.get_config()
    assert config == {"name": "scaled", "units": 3, "activation": "relu", "sizes": (1, 2),
                      "autocast": False, "trainable": False, "dtype": None}
    again = Scaled.from_config(config)
    assert again.get_config() == config and not again.trainable and again.name == "scaled"


def test_auto_config_of_other_values_needs_get_config_and_an_override_extends_the_base():
    with pytest.raises(NotImplementedError, match="override get_config"):
        Scaled(units=Linear(2)).get_config()

    class Explicit(Scaled):
        def get_config(self):
            return {**super().get_config(), "units": self.units.units}

        @classmethod
        def from_config(cls, config):
            return cls(Linear(config.pop("units")), **config)

    config = Explicit(Linear(2), name="explicit", dtype="mixed_bfloat16").get_config()
    assert config == {"name": "explicit", "trainable": True, "dtype": "mixed_bfloat16",
                      "units": 2}
    assert Explicit.from_config(config).units.units == 2


def test_from_config_of_a_constructor_without_kwargs_says_to_take_them():
    class Fixed(layers.Layer):
        def __init__(self, units):
            super().__init__()
            self.units = units

        def call(self, x):
            return x

    config = Fixed(2).get_config()
    assert "name" not in config  # cls(**config) could not take it (Keras 3)
    with pytest.raises(TypeError, match=r"Take \*\*kwargs in __init__"):
        Fixed.from_config(config)


def test_default_names_are_numbered_per_class():
    class Numbered(layers.Layer):
        pass

    assert [Numbered().name for _ in range(3)] == ["numbered", "numbered_1", "numbered_2"]


def test_add_weight_in_call_or_after_build_is_refused_naming_build():
    # Keras locks a built layer's state. Before: add_weight in call was refused only at a
    # second call (a name clash, with advice about name=), and add_weight after build ended
    # in Flax's ScopeParamNotFoundError when the model ran.
    class InCall(mf.layers.Layer):
        def call(self, x):
            return x * self.add_weight(shape=(x.shape[-1],), name="w")

    class Scale(mf.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

        def call(self, x):
            return x * self.w

    with pytest.raises(ValueError, match=r"add new weights to layer 'in_call'.*in __init__\(\) "
                                         r"or in build\(self, input_shape\).*name='w'"):
        InCall()(np.ones((2, 3), np.float32))
    layer = Scale()
    layer(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"already built.*Received: add_weight\(name='extra'\)"):
        layer.add_weight(shape=(3,), name="extra")
    assert [w.name for w in layer.weights] == ["w"]
