"""`mf.constraints`: each formula against NumPy, names and configs, and the built-in layers'
``*_constraint`` arguments applied after every update of a fit (1 and 8 replicas), inside
Keras-style layers, and through save/load."""

import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.layers.graph.functional import functional_module
from mirrorfit._src.layers.graph.model_info import weight_constraints
from mirrorfit._src.layers.graph.sequential import sequential_module
from tests.helpers import mirrored_strategy

EPS = 1e-7  # keras.backend.epsilon()
W = np.random.default_rng(0).normal(size=(3, 2, 4, 5)).astype(np.float32) * 2.0
RNG = np.random.default_rng(1)
X = RNG.normal(size=(32, 6)).astype(np.float32)
Y = 20.0 * RNG.normal(size=(32, 3)).astype(np.float32)  # large targets: big updates


def _norms(w, axis):
    return np.sqrt(np.sum(np.square(w), axis=axis, keepdims=True))


@pytest.mark.parametrize("constraint, expected", [
    (mf.constraints.MaxNorm(), W * np.clip(_norms(W, 0), 0, 2) / (EPS + _norms(W, 0))),
    (mf.constraints.MaxNorm(1.5, axis=[0, 1, 2]),
     W * np.clip(_norms(W, (0, 1, 2)), 0, 1.5) / (EPS + _norms(W, (0, 1, 2)))),
    (mf.constraints.NonNeg(), np.maximum(W, 0)),
    (mf.constraints.UnitNorm(axis=-1), W / (EPS + _norms(W, -1))),
    (mf.constraints.MinMaxNorm(1.0, 3.0, rate=0.5, axis=1),
     W * (0.5 * np.clip(_norms(W, 1), 1.0, 3.0) + 0.5 * _norms(W, 1)) / (EPS + _norms(W, 1))),
    (mf.constraints.Constraint(), W),
])
def test_constraint_matches_keras_formula_in_numpy(constraint, expected):
    np.testing.assert_allclose(np.asarray(constraint(W)), expected, rtol=1e-5, atol=1e-6)


def test_constraints_round_trip_through_names_and_configs():
    assert mf.constraints.get("max_norm") == mf.constraints.MaxNorm()
    assert mf.constraints.get("UnitNorm") == mf.constraints.UnitNorm()
    original = mf.constraints.MinMaxNorm(0.5, 2.0, rate=0.3, axis=[0, 1])
    config = mf.constraints.serialize(original)
    assert config["module"] == "mirrorfit.constraints"
    assert config["config"] == {"min_value": 0.5, "max_value": 2.0, "rate": 0.3, "axis": (0, 1)}
    assert mf.constraints.deserialize(config) == original
    with pytest.raises(ValueError, match="Received: constraint='max'"):
        mf.constraints.get("max")
    with pytest.raises(ValueError, match="can be saved"):
        mf.constraints.serialize(lambda w: w)


def _fit_dense(replicas, epochs=2):
    with mirrored_strategy(replicas).scope():
        model = mf.Sequential([mf.layers.Dense(3, kernel_constraint=mf.constraints.MaxNorm(1.0),
                                               bias_constraint="non_neg")],
                              input_shape=(6,), seed=0)
        model.compile(mf.optimizers.SGD(0.5), "mse")
        model.fit(X, Y, batch_size=16, epochs=epochs, verbose=0, shuffle=False)
    return model


@pytest.fixture(scope="module")
def fitted():
    return {n: _fit_dense(n) for n in (1, 8)}


def test_kernel_constraint_holds_after_fit_and_replicas_agree(fitted):
    kernel, bias = fitted[8].get_weights()
    norms = np.linalg.norm(kernel, axis=0)
    assert (norms <= 1.0 + 1e-6).all()
    np.testing.assert_allclose(norms.max(), 1.0, rtol=1e-5)  # the constraint was binding
    assert (bias >= 0).all() and (bias == 0).any()
    for got, want in zip(fitted[8].get_weights(), fitted[1].get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_saved_model_keeps_the_constraint(fitted, tmp_path):
    fitted[1].save(tmp_path / "model")
    with mirrored_strategy(1).scope():
        restored = mf.load_model(tmp_path / "model")
        restored.compile(mf.optimizers.SGD(0.5), "mse")
        restored.fit(X, 10 * Y, batch_size=32, epochs=1, verbose=0)
    layer = restored.layers[0]
    assert layer.kernel_constraint == mf.constraints.MaxNorm(1.0)
    assert layer.bias_constraint == "non_neg"
    assert (np.linalg.norm(restored.get_weights()[0], axis=0) <= 1.0 + 1e-6).all()


def test_functional_conv_and_embedding_constraints_reach_the_step():
    inputs = mf.Input((4, 4, 2))
    conv = mf.layers.Conv2D(3, 2, kernel_constraint=mf.constraints.UnitNorm([0, 1, 2]))
    x = mf.layers.Flatten()(conv(inputs))
    module = functional_module(inputs,
                               mf.layers.Dense(2, bias_constraint=mf.constraints.NonNeg())(x))
    params = {"conv2d": {"kernel": W[:2, :2, :2, :3], "bias": -np.ones(3, np.float32)},
              "dense": {"kernel": np.ones((27, 2), np.float32), "bias": -np.ones(2, np.float32)}}
    out = weight_constraints(module)(params)
    np.testing.assert_allclose(np.linalg.norm(out["conv2d"]["kernel"].reshape(-1, 3), axis=0),
                               1.0, rtol=1e-5)
    np.testing.assert_array_equal(out["conv2d"]["bias"], params["conv2d"]["bias"])
    np.testing.assert_array_equal(out["dense"]["bias"], 0.0)
    embed = mf.layers.Embedding(5, 2, embeddings_constraint=mf.constraints.NonNeg())
    module, _ = sequential_module([mf.Input((3,), dtype="int32"), embed])
    assert weight_constraints(module)({"embedding": {"embeddings": -np.ones((5, 2))}})[
        "embedding"]["embeddings"].max() == 0


def test_built_in_layer_inside_a_keras_style_layer_puts_its_constraint_on_its_variable():
    class Block(mf.layers.Layer):
        def __init__(self):
            super().__init__()
            self.dense = mf.layers.Dense(2, kernel_constraint=mf.constraints.NonNeg())

        def call(self, x):
            return self.dense(x)

    block = Block()
    block(X[:2])
    constraints = {v.path.split("/")[-1]: v.constraint for v in block.dense.weights}
    assert constraints == {"kernel": mf.constraints.NonNeg(), "bias": None}


def test_constraint_inside_a_plain_flax_module_warns_that_it_is_not_applied():
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return mf.layers.Dense(2, kernel_constraint=mf.constraints.NonNeg())(x)

    with pytest.warns(mf.MirrorfitWarning, match="constraint on 'kernel' is not applied"):
        Net().init(jax.random.PRNGKey(0), X[:2])


def test_add_weight_takes_a_constraint_by_keras_name():
    layer = mf.layers.Layer()
    weight = layer.add_weight(shape=(2,), initializer="zeros", constraint="non_neg")
    assert weight.constraint == mf.constraints.NonNeg()
    with pytest.raises(ValueError, match="Received: constraint=3"):
        layer.add_weight(shape=(2,), initializer="zeros", constraint=3)
