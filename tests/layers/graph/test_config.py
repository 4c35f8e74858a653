"""Architectures as JSON: config -> JSON -> module gives the same param tree and outputs."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers
from mirrorfit._src.layers.graph import config as config_lib
from mirrorfit._src.layers.graph import sequential
from mirrorfit._src.layers.graph import functional
from tests.helpers import mirrored_strategy, tree_equal

RNG = np.random.default_rng(4)


def round_trip(module, custom_objects=None):
    text = json.dumps(config_lib.functional_config(module))
    return config_lib.module_from_config(json.loads(text), custom_objects)


def assert_same_model(module, rebuilt, *inputs):
    shapes = jax.eval_shape(module.init, jax.random.key(0), *inputs)
    assert jax.tree.structure(jax.eval_shape(rebuilt.init, jax.random.key(1), *inputs)) == \
        jax.tree.structure(shapes)
    variables = jax.tree.map(lambda s: RNG.uniform(0.5, 1.5, s.shape).astype(s.dtype), shapes)
    out, again = jax.jit(lambda v: (module.apply(v, *inputs), rebuilt.apply(v, *inputs)))(
        variables)
    tree_equal(out, again)


def test_sequential_config_round_trips_through_json():
    module, _ = sequential.sequential_module([
        layers.Input((8, 8, 1)), layers.Conv2D(4, 3, activation="relu", padding="same",
                                               kernel_regularizer=layers.L2(1e-4)),
        layers.BatchNormalization(), layers.MaxPooling2D(), layers.Flatten(),
        layers.Dropout(0.2), layers.Dense(3, activation="softmax", name="probs")])
    module.stack.layers[1].trainable = False
    rebuilt = round_trip(module)
    assert rebuilt.stack.names == module.stack.names
    assert rebuilt.stack.input.shape == (None, 8, 8, 1)
    assert rebuilt.stack.layers[1].trainable is False
    assert rebuilt.stack.layers[0].kernel_regularizer == layers.L2(1e-4)
    assert_same_model(module, rebuilt, RNG.normal(size=(2, 8, 8, 1)).astype(np.float32))


def test_functional_config_round_trips_shared_layers_dicts_and_multiple_outputs():
    tokens = layers.Input((6,), dtype="int32", name="tokens")
    extra = layers.Input((3,), name="extra")
    emb = layers.Embedding(11, 4)(tokens)
    att = layers.MultiHeadAttention(num_heads=2, key_dim=2)(emb, emb, use_causal_mask=True)
    shared = layers.Dense(5)
    merged = layers.Concatenate()([shared(layers.GlobalAveragePooling1D()(att)),
                                   shared(layers.GlobalMaxPooling1D()(emb)), extra])
    outputs = {"a": layers.Dense(1, name="a")(merged), "b": layers.Dense(2, name="b")(merged)}
    module = functional.functional_module({"tokens": tokens, "extra": extra}, outputs,
                                          name="two_heads")
    rebuilt = round_trip(module)
    assert rebuilt.name == "two_heads"
    assert rebuilt.graph.names == module.graph.names
    batch = {"tokens": RNG.integers(0, 11, size=(2, 6)).astype(np.int32),
             "extra": RNG.normal(size=(2, 3)).astype(np.float32)}
    assert_same_model(module, rebuilt, batch)


class CompactScale(layers.FlaxLayer):
    """A custom layer: ``inputs * factor * w`` with one learned scalar ``w``."""

    factor: float = 2.0

    @nn.compact
    def __call__(self, inputs, training=False):
        return inputs * self.factor * self.weight("w", "ones", ())


def test_custom_layers_load_through_custom_objects():
    x = layers.Input((3,))
    module = functional.functional_module(x, layers.Dense(2)(CompactScale(3.0)(x)))
    config = json.loads(json.dumps(config_lib.functional_config(module)))
    with pytest.raises(ValueError, match="custom_objects"):
        config_lib.module_from_config(config)
    rebuilt = config_lib.module_from_config(config, {"CompactScale": CompactScale})
    assert_same_model(module, rebuilt, RNG.normal(size=(2, 3)).astype(np.float32))


def test_unsaveable_arguments_raise_clear_errors():
    x = layers.Input((3,))
    module = functional.functional_module(x, layers.Dense(2, activation=lambda v: v)(x))
    with pytest.raises(ValueError, match="custom activation"):
        config_lib.functional_config(module)
    module, _ = sequential.sequential_module([layers.Dense(2), jnp.sin])
    with pytest.raises(ValueError, match="Activation"):
        config_lib.functional_config(module)
    with pytest.raises(ValueError, match="class_name"):
        config_lib.module_from_config({"class_name": "Pickle"})


@mf.saving.register_serializable("tests")
def scaled(x, factor=1.0):
    return x * factor


def test_issue_29_layers_save_and_load_with_their_weights(tmp_path):
    # One convolution only: each one adds seconds of XLA compile time to the model's init.
    L = layers
    with mirrored_strategy(1).scope():
        volumes = L.Input((4, 4, 4, 2))
        x = L.UpSampling3D()(L.Cropping3D(((1, 1), (1, 1), (1, 1)))(L.ZeroPadding3D(1)(volumes)))
        x = L.AveragePooling3D()(L.MaxPooling3D(pool_size=1)(L.SpatialDropout3D(0.3)(x)))
        v = L.concatenate([L.GlobalMaxPooling3D()(x), L.GlobalAveragePooling3D()(x)])
        steps = L.Reshape((32, 4))(volumes)
        s = L.Conv1DTranspose(3, 2, strides=2)(L.Cropping1D((1, 2))(L.ZeroPadding1D(1)(steps)))
        s = L.UpSampling1D()(L.SpatialDropout1D(0.3)(L.PReLU(shared_axes=[1])(s)))
        s = L.GlobalAveragePooling1D()(L.Softmax()(L.LeakyReLU(alpha=0.1)(s)))
        images = L.SpatialDropout2D(0.3)(L.Cropping2D(1)(L.Reshape((8, 8, 2))(volumes)))
        i = L.GlobalMaxPooling2D()(L.UnitNormalization()(L.ReLU(max_value=1.0)(images)))
        h = L.Dense(4)(L.ELU()(L.GaussianNoise(0.1)(L.GaussianDropout(0.1)(
            L.AlphaDropout(0.1)(L.ActivityRegularization(0.01)(L.concatenate([v, s, i])))))))
        h = L.Lambda(scaled, arguments={"factor": 2.0})(L.Identity()(h))
        merged = [L.add([h, h]), L.subtract([h, h]), L.average([h, h]), L.maximum([h, h]),
                  L.minimum([h, h]), L.multiply([h, h]), L.dot([h, h], axes=1)]
        model = mf.Model(volumes, L.RepeatVector(2)(L.concatenate(merged)))
        model.save(tmp_path / "model.keras")
        loaded = mf.load_model(tmp_path / "model.keras")
    assert [type(l) for l in loaded.layers] == [type(l) for l in model.layers]
    assert [l.get_config() for l in loaded.layers] == [l.get_config() for l in model.layers]
    tree_equal(loaded.get_weights(), model.get_weights())  # same configs and weights
    assert loaded.count_params() == model.count_params()
    text = []
    loaded.summary(print_fn=text.append)
    for layer in loaded.layers:  # one row each, "name (ClassName)"
        assert f"({type(layer).__name__})" in "".join(text)
    # The layers left out of the model (compile time), found by name in the layer registry.
    for layer in (L.Conv3DTranspose(2, 3, strides=2, padding="same"),
                  L.ConvLSTM2D(4, 3, return_sequences=True)):
        saved = json.dumps(mf.saving.serialize_keras_object(layer))
        found = mf.saving.deserialize_keras_object(json.loads(saved))
        assert type(found) is type(layer) and found.get_config() == layer.get_config()
