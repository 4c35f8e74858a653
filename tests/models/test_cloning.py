"""``mf.models``: clone_model, to_json/model_from_json, save_model
(mirrorfit/_src/models/cloning.py)."""

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import ops
from tests.helpers import mirrored_strategy

L = mf.layers
RNG = np.random.default_rng(0)
X = RNG.normal(size=(6, 4)).astype(np.float32)


def _functional():
    encoder = mf.Sequential([L.Input((4,)), L.Dense(3, activation="relu")], name="encoder")
    inputs = mf.Input((4,), name="features")
    code = encoder(inputs)
    outputs = [L.Dense(2, name="head")(ops.concatenate([code, code * 2.0], axis=-1)),
               L.Dense(1, name="aux")(inputs)]
    return mf.Model(inputs, outputs, name="model")


def test_clone_model_builds_the_same_graph_with_new_weights():
    with mirrored_strategy(2).scope():
        model = _functional()
        twin = mf.models.clone_model(model)
    assert twin.name == "model" and twin.output_names == ["head", "aux"]
    assert [w.path for w in twin.weights] == [w.path for w in model.weights]
    assert twin.layers[0] is not model.layers[0]  # the nested encoder is cloned too
    # Its own weights (initialised from the same default seed, as mirrorfit's models are).
    initial = twin.get_weights()
    trained = [RNG.normal(size=w.shape).astype(np.float32) for w in initial]
    model.set_weights(trained)
    for got, want in zip(twin.get_weights(), initial):
        np.testing.assert_array_equal(got, want)
    twin.set_weights(trained)
    for got, want in zip(twin.predict(X, verbose=0), model.predict(X, verbose=0)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_clone_function_returning_the_layer_shares_it():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([L.Input((4,)), L.Dense(3), L.Dense(2)], name="stack")
        shared = mf.models.clone_model(model, clone_function=lambda layer: layer)
        fresh = mf.models.clone_model(model)
    assert isinstance(shared, mf.Sequential) and shared.name == "stack"
    assert shared.layers[0] is model.layers[0] and fresh.layers[0] is not model.layers[0]
    np.testing.assert_allclose(shared.predict(X, verbose=0), model.predict(X, verbose=0),
                               rtol=1e-6)


def test_model_from_json_rebuilds_to_json():
    with mirrored_strategy(1).scope():
        model = mf.Sequential([L.Input((4,)), L.Dense(3, activation="tanh"), L.Dropout(0.2)])
        text = model.to_json()
        rebuilt = mf.models.model_from_json(text)
    assert isinstance(rebuilt, mf.Sequential) and rebuilt.to_json() == text
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(rebuilt.predict(X, verbose=0), model.predict(X, verbose=0),
                               rtol=1e-6)


def test_models_module_has_keras_names(tmp_path):
    assert mf.models.Model is mf.Model and mf.models.load_model is mf.load_model
    with mirrored_strategy(1).scope():
        model = mf.Sequential([L.Input((4,)), L.Dense(2)])
        mf.models.save_model(model, tmp_path / "m.keras")
        with pytest.raises(ValueError, match="pass overwrite=True"):
            mf.models.save_model(model, tmp_path / "m.keras", overwrite=False)
        loaded = mf.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded.predict(X, verbose=0), model.predict(X, verbose=0))
    assert mf.preprocessing.sequence.pad_sequences is mf.utils.pad_sequences


def test_recursive_clone_applies_clone_function_inside_nested_models():
    with mirrored_strategy(1).scope():
        model = _functional()
        twin = mf.models.clone_model(model, clone_function=lambda layer: layer, recursive=True)
    encoder, twin_encoder = model.get_layer("encoder"), twin.get_layer("encoder")
    assert twin_encoder is not encoder  # the nested model is rebuilt ...
    assert twin_encoder.layers[0] is encoder.layers[0]  # ... from the layers clone_function gave
