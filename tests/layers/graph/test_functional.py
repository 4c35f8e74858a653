"""The functional graph and Sequential helper: shapes, names, shared layers, structures,
disconnected-graph errors, trainable flags."""

import functools

import flax.linen as nn
import jax
import numpy as np
import pytest

from mirrorfit import layers
from mirrorfit._src.layers.graph import model_info
from mirrorfit._src.layers.graph import sequential
from mirrorfit._src.layers.graph import functional

RNG = np.random.default_rng(2)


def init(module, *args):
    return jax.jit(module.init)({"params": jax.random.key(0), "dropout": jax.random.key(1)},
                                *args)


def run(module, variables, *args, **kwargs):
    return jax.jit(functools.partial(module.apply, **kwargs))(variables, *args)


def test_symbolic_tensors_carry_keras_shapes():
    x = layers.Input((8, 8, 3), name="image")
    assert x.shape == (None, 8, 8, 3) and x.dtype == np.float32 and x.name == "image"
    y = layers.Conv2D(4, 3, strides=2, padding="same")(x)
    assert y.shape == (None, 4, 4, 4)
    assert layers.Flatten()(y).shape == (None, 64)
    seq, h, c = layers.LSTM(5, return_sequences=True, return_state=True)(layers.Input((7, 2)))
    assert seq.shape == (None, 7, 5) and h.shape == c.shape == (None, 5)
    tokens = layers.Input((6,), dtype="int32")
    assert layers.Embedding(10, 3)(tokens).shape == (None, 6, 3)


def test_functional_module_runs_the_graph_with_keras_names():
    x = layers.Input((4,))
    hidden = layers.Dense(8, activation="relu")(x)
    hidden = layers.Dense(8, activation="relu")(hidden)
    out = layers.Dense(2, name="head")(hidden)
    module = functional.functional_module(x, out)
    data = RNG.normal(size=(3, 4)).astype(np.float32)
    v = init(module, data)
    assert list(v["params"]) == ["dense", "dense_1", "head"]
    p = v["params"]
    h = np.maximum(data @ p["dense"]["kernel"] + p["dense"]["bias"], 0)
    h = np.maximum(h @ p["dense_1"]["kernel"] + p["dense_1"]["bias"], 0)
    np.testing.assert_allclose(run(module, v, data), h @ p["head"]["kernel"] + p["head"]["bias"],
                               rtol=1e-5, atol=1e-5)


def test_layers_keep_their_assigned_names_and_get_layer_finds_them():
    first = layers.Dense(2)
    module, _ = sequential.sequential_module([layers.Input((3,)), first, layers.Dense(1)])
    assert first.name == "dense"
    assert model_info.get_layer(module, "dense_1").units == 1
    with pytest.raises(ValueError, match="No such layer: 'nope'"):
        model_info.get_layer(module, "nope")
    # A later model that reuses `first` keeps its name and numbers the new layer after it.
    x = layers.Input((3,))
    module = functional.functional_module(x, layers.Dense(4)(first(x)))
    assert [name for name, _ in model_info.model_layers(module)] == ["dense", "dense_1"]


def test_shared_layer_reuses_its_params():
    a, b = layers.Input((3,), name="a"), layers.Input((3,), name="b")
    shared = layers.Dense(2)
    out = layers.Add()([shared(a), shared(b)])
    module = functional.functional_module([a, b], out)
    xa, xb = RNG.normal(size=(2, 2, 3)).astype(np.float32)
    v = init(module, xa, xb)
    assert list(v["params"]) == ["dense"]
    p = v["params"]["dense"]
    expected = (xa + xb) @ p["kernel"] + 2 * p["bias"]
    np.testing.assert_allclose(run(module, v, xa, xb), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run(module, v, [xa, xb]), expected, rtol=1e-5, atol=1e-5)
    # Keras also takes a dict keyed by Input names for list inputs.
    np.testing.assert_allclose(run(module, v, {"a": xa, "b": xb}), expected, rtol=1e-5,
                               atol=1e-5)


def test_dict_inputs_and_outputs():
    inputs = {"image": layers.Input((4, 4, 1), name="image"), "meta": layers.Input((2,),
                                                                                 name="meta")}
    features = layers.Flatten()(layers.Conv2D(2, 3)(inputs["image"]))
    merged = layers.Concatenate()([features, inputs["meta"]])
    outputs = {"score": layers.Dense(1, name="score")(merged),
               "probs": layers.Dense(3, activation="softmax", name="probs")(merged)}
    module = functional.functional_module(inputs, outputs)
    batch = {"image": np.ones((2, 4, 4, 1), np.float32), "meta": np.ones((2, 2), np.float32)}
    v = init(module, batch)
    out = run(module, v, batch)
    assert out["score"].shape == (2, 1) and out["probs"].shape == (2, 3)
    np.testing.assert_allclose(np.sum(out["probs"], -1), 1.0, rtol=1e-5)


def test_multi_head_attention_in_a_graph():
    q, kv = layers.Input((4, 6)), layers.Input((5, 6))
    out = layers.MultiHeadAttention(num_heads=2, key_dim=3)(q, kv)
    assert out.shape == (None, 4, 6)
    module = functional.functional_module([q, kv], out)
    v = jax.eval_shape(module.init, jax.random.key(0), np.ones((1, 4, 6)), np.ones((1, 5, 6)))
    assert set(v["params"]["multi_head_attention"]) == {"query", "key", "value",
                                                        "attention_output"}


def test_training_flag_reaches_layers():
    x = layers.Input((100,))
    module = functional.functional_module(x, layers.Dropout(0.5)(x))
    data = np.ones((2, 100), np.float32)
    np.testing.assert_array_equal(module.apply({}, data), data)
    dropped = module.apply({}, data, training=True, rngs={"dropout": jax.random.key(0)})
    assert 0.3 < np.mean(np.asarray(dropped) == 0) < 0.7


def test_output_needing_a_missing_input_is_a_disconnected_graph():
    a, b = layers.Input((2,), name="a"), layers.Input((2,), name="b")
    out = layers.Add()([layers.Dense(2)(a), b])
    with pytest.raises(ValueError, match="Graph disconnected.*'?b'?.*not in `inputs`"):
        functional.functional_module(a, out)


def test_unused_input_is_a_disconnected_graph():
    a, b = layers.Input((2,), name="a"), layers.Input((2,), name="b")
    with pytest.raises(ValueError, match=r"inputs \['b'\] are not used"):
        functional.functional_module([a, b], layers.Dense(1)(a))


def test_non_input_tensors_and_duplicate_names_are_rejected():
    a = layers.Input((2,))
    hidden = layers.Dense(2)(a)
    with pytest.raises(TypeError, match="mirrorfit.layers.Input"):
        functional.functional_module(hidden, layers.Dense(1)(hidden))
    out = layers.Dense(1, name="x")(layers.Dense(2, name="x")(a))
    with pytest.raises(ValueError, match="'x' is used twice"):
        functional.functional_module(a, out)


def test_keras_layer_order_is_by_depth_then_first_visit():
    # As keras map_graph: deeper layers first; equal depth by DFS visit from the outputs.
    x = layers.Input((2,))
    a = layers.Dense(2, name="a")(x)
    c = layers.Dense(2, name="c")(x)
    b = layers.Dense(2, name="b")(a)
    out = layers.Add(name="add")([b, c])
    module = functional.functional_module(x, out)
    assert [name for name, _ in model_info.model_layers(module)] == ["a", "b", "c", "add"]


def test_sequential_module_with_leading_input_and_names():
    module, input_shape = sequential.sequential_module(
        [layers.Input((6,)), layers.Dense(4, name="hidden"), layers.Dense(4), nn.relu,
         layers.Dense(1)])
    assert input_shape == (None, 6)
    v = jax.eval_shape(module.init, jax.random.key(0), np.ones((2, 6), np.float32))
    assert sorted(v["params"]) == ["dense", "dense_1", "hidden"]
    names = [name for name, _ in model_info.model_layers(module)]
    assert names == ["hidden", "dense", "relu", "dense_1"]
    _, shape2 = sequential.sequential_module([layers.Dense(3)])
    assert shape2 is None
    with pytest.raises(TypeError, match="Input may come first only"):
        sequential.sequential_module([layers.Dense(3), layers.Input((2,))])


def test_sequential_takes_legacy_input_shape_on_the_first_layer():
    # The TF "Distributed training with Keras" tutorial model, renamed.
    _, input_shape = sequential.sequential_module([
        layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
        layers.MaxPooling2D(), layers.Flatten(), layers.Dense(64, activation="relu"),
        layers.Dense(10)])
    assert input_shape == (None, 28, 28, 1)
    assert sequential.sequential_module([layers.Dense(2, input_dim=5)])[1] == (None, 5)


def test_non_trainable_layers_are_masked_and_their_batchnorm_infers():
    bn = layers.BatchNormalization()
    module, _ = sequential.sequential_module([layers.Dense(3), bn, layers.Dense(1)])
    x = RNG.normal(size=(8, 2)).astype(np.float32) + 5.0
    v = init(module, x)
    bn.trainable = False
    assert model_info.non_trainable_paths(module) == [("batch_normalization",)]
    mask = model_info.trainable_mask(module, v["params"])
    assert mask["dense"]["kernel"] and not mask["batch_normalization"]["gamma"]
    _, updates = module.apply(v, x, training=True, mutable=["batch_stats"])
    for before, after in zip(jax.tree.leaves(v["batch_stats"]),
                             jax.tree.leaves(updates["batch_stats"])):
        np.testing.assert_array_equal(before, after)  # inference mode: no update


@pytest.mark.parametrize("dtype", ["string", object, str])
def test_a_string_input_names_the_host_side_text_layers(dtype):
    # Before: NumPy's "data type 'string' not understood" (or an object tensor that failed
    # later, inside the model).
    with pytest.raises(ValueError, match=r"Input takes array dtypes.*TextVectorization.*"
                                         r"Received: dtype=.* for Input 'text'"):
        layers.Input(shape=(1,), dtype=dtype, name="text")
    assert layers.Input((2,), dtype="bfloat16").dtype.name == "bfloat16"
