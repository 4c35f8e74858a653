"""A model's weights as Variables in Keras' order and with Keras' paths, for models nested in
other models (mirrorfit/_src/models/variable_views.py)."""

import numpy as np

import mirrorfit as mf
from tests.helpers import mirrored_strategy

L = mf.layers
RNG = np.random.default_rng(0)


def nested_autoencoder():
    """``Model(inputs, decoder(encoder(inputs)))``: a Sequential encoder and a functional
    decoder with a BatchNormalization, as Keras' guides build them."""
    encoder = mf.Sequential([L.Input((4,)), L.Dense(3, activation="relu"), L.Dense(2)],
                            name="encoder")
    code = L.Input((2,))
    decoder = mf.Model(code, L.Dense(4)(L.BatchNormalization()(code)), name="decoder")
    inputs = L.Input((4,))
    return mf.Model(inputs, decoder(encoder(inputs)), name="autoencoder")


def test_nested_models_list_weights_in_keras_order_and_load_a_keras_list():
    with mirrored_strategy(2).scope():
        model = nested_autoencoder()
    # Keras 3 lists these paths in this order (benchmarks/keras_parity_models.py): per
    # layer, kernel before bias; a Sequential's layers under its name, a functional model's
    # layers by their own names; never the outer model's name.
    assert [w.path for w in model.weights] == [
        "encoder/dense/kernel", "encoder/dense/bias", "encoder/dense_1/kernel",
        "encoder/dense_1/bias", "batch_normalization/gamma", "batch_normalization/beta",
        "batch_normalization/moving_mean", "batch_normalization/moving_variance",
        "dense/kernel", "dense/bias"]
    assert [w.name for w in model.weights][:2] == ["kernel", "bias"]
    assert [w.path for w in model.trainable_weights] == [
        w.path for w in model.weights if "moving" not in w.path]
    # A Keras-ordered list loads into the right places: the NumPy forward pass agrees.
    k1, b1, k2, b2 = (RNG.normal(size=s) for s in [(4, 3), (3,), (3, 2), (2,)])
    gamma, beta, mean = (RNG.normal(size=2) for _ in range(3))
    var = RNG.uniform(0.5, 2.0, size=2)
    k3, b3 = RNG.normal(size=(2, 4)), RNG.normal(size=4)
    weights = [k1, b1, k2, b2, gamma, beta, mean, var, k3, b3]
    model.set_weights(weights)
    x = RNG.normal(size=(6, 4)).astype(np.float32)
    code = np.maximum(x @ k1 + b1, 0) @ k2 + b2
    want = ((code - mean) / np.sqrt(var + 1e-3) * gamma + beta) @ k3 + b3
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-4, atol=1e-5)
    for got, given in zip(model.get_weights(), weights):
        np.testing.assert_allclose(got, given, rtol=1e-6)
    for view, given in zip(model.weights, weights):
        np.testing.assert_allclose(np.asarray(view.value), given, rtol=1e-6)


def test_sequential_keeps_its_name_and_prefixes_its_layers_paths():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([L.Input((3,)), L.Dense(2)], name="head")
    assert model.name == "head"
    assert [w.path for w in model.weights] == ["head/dense/kernel", "head/dense/bias"]
