"""Models of ``mirrorfit.layers`` in the product: ``mf.Model(inputs, outputs)``,
``mf.Sequential`` (``add``, ``layers``, ``get_layer``), frozen layers, Keras' weight order,
Keras' summary, and the architecture saved with the weights."""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

import mirrorfit as mf
from mirrorfit._src.layers.graph import sequential
from tests.helpers import mirrored_strategy

L = mf.layers
RNG = np.random.default_rng(7)
X = RNG.normal(size=(40, 4)).astype(np.float32)
X2 = RNG.normal(size=(40, 2)).astype(np.float32)
Y = RNG.integers(0, 3, size=40).astype(np.int32)


def _two_in_two_out():
    a, b = mf.Input((4,), name="a"), mf.Input((2,), name="b")
    h = L.Concatenate()([L.Dense(5, activation="relu")(a), b])
    return [a, b], [L.Dense(1, name="reg")(h), L.Dense(3, activation="softmax", name="cls")(h)]


@pytest.mark.parametrize("n", [3])
def test_functional_two_inputs_two_outputs_fit_matches_single_replica(n, allclose):
    results = []
    for replicas in (1, n):
        inputs, outputs = _two_in_two_out()
        with mirrored_strategy(replicas).scope():
            model = mf.Model(inputs=inputs, outputs=outputs)
            assert model.built  # shapes come from the Inputs
            model.compile(optax.sgd(0.1), ["mse", "sparse_categorical_crossentropy"],
                          loss_weights=[0.5, 1.0], metrics=[["mae"], ["accuracy"]])
            before = model.get_weights()
            history = model.fit([X, X2], [X[:, :1], Y], batch_size=16, epochs=2, verbose=0)
        assert {"loss", "reg_loss", "cls_loss", "cls_accuracy"} <= set(
            history.history)
        assert not np.allclose(before[0], model.get_weights()[0])
        results.append((model.get_weights(), model.predict([X, X2], verbose=0)))
    # f32 sums reduced in another order: agreement to rounding.
    allclose(results[0], results[1], rtol=1e-5, atol=1e-6)


def test_model_takes_inputs_and_outputs_positionally_as_keras():
    x = mf.Input((4,))
    y = L.Dense(3)(x)
    with mirrored_strategy(1).scope():
        model = mf.Model(x, y, name="tiny")
    assert model.module.name == "tiny" and model.layers[0].name == "dense"
    assert model.predict(X, verbose=0).shape == (40, 3)


def test_model_with_only_inputs_raises_naming_outputs():
    with mirrored_strategy(1).scope(), pytest.raises(ValueError, match="outputs="):
        mf.Model(inputs=mf.Input((4,)))


def test_sequential_with_input_is_built_and_names_are_param_keys():
    with mirrored_strategy(2).scope():
        model = mf.Sequential([mf.Input((4,)), L.Dense(8, name="hidden"), L.Dense(3)])
    assert model.built
    assert set(model.params) == {"hidden", "dense"}
    assert [layer.name for layer in model.layers] == ["hidden", "dense"]
    assert model.get_layer("hidden") is model.layers[0]
    assert model.get_layer(index=-1) is model.layers[1]


def test_sequential_input_shape_on_first_layer_builds_the_model():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([L.Dense(8, activation="relu", input_shape=(4,)), L.Dense(3)])
    assert model.built and model.input_spec.shape == (4,)


def test_sequential_add_grows_the_model_and_keeps_the_compile():
    with mirrored_strategy(2).scope():
        model = mf.Sequential()
        model.add(mf.Input((4,)))
        model.add(L.Dense(6, activation="relu"))
        model.compile("sgd", "sparse_categorical_crossentropy")
        model.add(L.Dense(3, activation="softmax"))
        assert model.compiled and model.built
        assert [w.shape for w in model.get_weights()] == [(4, 6), (6,), (6, 3), (3,)]
        history = model.fit(X, Y, batch_size=8, epochs=2, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]


def test_sequential_of_flax_modules_keeps_flax_sequential():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([nn.Dense(5), nn.relu, nn.Dense(3)], input_shape=(4,))
    assert set(model.params) == {"layers_0", "layers_2"}
    assert not isinstance(model.module, sequential.SequentialModule)
    assert len(model.layers) == 3


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_frozen_layer_keeps_its_weights_and_batchnorm_stats_in_fit(optimizer):
    with mirrored_strategy(3).scope():
        model = mf.Sequential([mf.Input((4,)), L.Dense(6, name="frozen"),
                               L.BatchNormalization(name="bn"),
                               L.Dense(3, activation="softmax", name="head")])
        model.get_layer("frozen").trainable = False
        model.get_layer("bn").trainable = False
        model.compile(optimizer, "sparse_categorical_crossentropy")
        before = {k: np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(
            (model.params, model.state.model_state))}
        model.fit(X, Y, batch_size=16, epochs=1, verbose=0)
        after = dict(jax.tree_util.tree_leaves_with_path((model.params, model.state.model_state)))
    for path, value in before.items():
        changed = not np.array_equal(value, np.asarray(after[path]))
        key = jax.tree_util.keystr(path)
        assert changed == ("head" in key), key


def test_get_weights_of_flax_module_follow_creation_order():
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3, name="z_out")(nn.Dense(5, name="a_in")(x))

    with mirrored_strategy(1).scope():
        model = mf.Model(Net(), input_shape=(4,))
    # kernel before bias; layers as created (z_out after a_in would sort first by name)
    assert [w.shape for w in model.get_weights()] == [(4, 5), (5,), (5, 3), (3,)]
    weights = [RNG.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    expected = (X @ weights[0] + weights[1]) @ weights[2] + weights[3]
    np.testing.assert_allclose(model.predict(X, verbose=0), expected, rtol=1e-5, atol=1e-5)


def test_keras_ordered_weights_give_numpy_predictions():
    # The list tf.keras' get_weights returns for this model: Conv2D kernel [3,3,1,2], bias,
    # BatchNorm gamma, beta, moving_mean, moving_variance, Dense kernel, bias.
    with mirrored_strategy(2).scope():
        model = mf.Sequential([mf.Input((5, 5, 1)), L.Conv2D(2, 3, activation="relu"),
                               L.BatchNormalization(), L.Flatten(),
                               L.Dense(3, activation="softmax")])
    shapes = [(3, 3, 1, 2), (2,), (2,), (2,), (2,), (2,), (18, 3), (3,)]
    assert [w.shape for w in model.get_weights()] == shapes
    w = [RNG.normal(size=s).astype(np.float32) for s in shapes]
    w[5] = np.abs(w[5]) + 0.5  # a variance
    model.set_weights(w)
    images = RNG.normal(size=(7, 5, 5, 1)).astype(np.float32)
    patches = np.stack([images[:, i:i + 3, j:j + 3, :] for i in range(3) for j in range(3)], 1)
    conv = np.maximum(np.einsum("npijc,ijco->npo", patches, w[0]) + w[1], 0)  # [7, 9, 2]
    bn = (conv - w[4]) / np.sqrt(w[5] + 1e-3) * w[2] + w[3]  # Keras' epsilon=1e-3
    logits = bn.reshape(7, 18) @ w[6] + w[7]
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-5)


def test_summary_prints_keras_table_with_non_trainable_counts():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([mf.Input((4,)), L.Dense(8), L.BatchNormalization()],
                              name="demo")
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    assert 'Model: "demo"' in text and "dense (Dense)" in text and "(None, 8)" in text
    # Dense 4*8+8 = 40 and gamma/beta 16 trainable; moving stats 16 non-trainable.
    assert "Total params: 72" in text and "Trainable params: 56" in text
    assert "Non-trainable params: 16" in text


@pytest.mark.slow
def test_save_and_load_sequential_without_module_round_trips_and_continues(tmp_path):
    with mirrored_strategy(2).scope():
        model = mf.Sequential([mf.Input((4,)), L.Dense(6, activation="relu"),
                               L.Dropout(0.1), L.Dense(3, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
        model.fit(X, Y, batch_size=16, epochs=1, verbose=0)
        model.save(tmp_path / "model")
        restored = mf.load_model(tmp_path / "model")
        np.testing.assert_array_equal(restored.predict(X, verbose=0), model.predict(X, verbose=0))
        assert [l.name for l in restored.layers] == [l.name for l in model.layers]
        first = model.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)
        second = restored.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    # The same optimizer state, step and RNG key: training continues identically.
    np.testing.assert_allclose(second.history["loss"], first.history["loss"], rtol=1e-6)


def test_save_and_load_functional_without_module_gives_equal_predictions(tmp_path):
    inputs, outputs = _two_in_two_out()
    with mirrored_strategy(1).scope():
        model = mf.Model(inputs=inputs, outputs=outputs)
        model.save(tmp_path / "model")
        restored = mf.load_model(tmp_path / "model")
    assert isinstance(restored.predict([X, X2], verbose=0), list)
    for got, want in zip(restored.predict([X, X2], verbose=0), model.predict([X, X2], verbose=0)):
        np.testing.assert_array_equal(got, want)


def test_load_model_of_custom_layer_needs_custom_objects(tmp_path):
    class Scale(L.FlaxLayer):
        factor: float = 2.0

        def __call__(self, inputs, training=False):
            return inputs * self.factor

    with mirrored_strategy(1).scope():
        model = mf.Sequential([mf.Input((4,)), Scale(3.0), L.Dense(2)])
        model.save(tmp_path / "m")
        with pytest.raises(ValueError, match="custom_objects"):
            mf.load_model(tmp_path / "m")
        restored = mf.load_model(tmp_path / "m", custom_objects={"Scale": Scale})
    np.testing.assert_array_equal(restored.predict(X, verbose=0), model.predict(X, verbose=0))


def test_load_model_of_flax_module_without_module_raises(tmp_path):
    with mirrored_strategy(1).scope():
        model = mf.Sequential([nn.Dense(2)], input_shape=(4,))
        model.save(tmp_path / "m")
        with pytest.raises(ValueError, match="needs the model.s Flax module"):
            mf.load_model(tmp_path / "m")
