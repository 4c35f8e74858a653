"""Architectures as JSON: config -> JSON -> module gives the same param tree and outputs."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mirrorfit import layers
from mirrorfit._src.layers import functional, sequential
from mirrorfit._src.layers import config as config_lib
from tests.helpers import tree_equal

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
