"""Host layers (TextVectorization first in a Sequential) survive save/load_model, and are
applied to raw strings by model(x) and the *_on_batch methods."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.helpers import mirrored_strategy

TEXTS = np.array(["good movie", "bad movie", "good good fun", "bad awful"] * 2)
LABELS = np.array([1, 0, 1, 0] * 2, np.int32)


@pytest.fixture(scope="module")
def text_model():
    """A fitted Sequential([TextVectorization, Embedding, pooling, Dense]) on 2 replicas."""
    vectorize = mf.layers.TextVectorization(output_sequence_length=5)
    vectorize.adapt(TEXTS)
    with mirrored_strategy(2).scope():
        model = mf.Sequential([vectorize, mf.layers.Embedding(8, 4),
                               mf.layers.GlobalAveragePooling1D(), mf.layers.Dense(2)], seed=0)
        model.compile(mf.optimizers.Adam(0.05),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(TEXTS, LABELS, batch_size=4, epochs=1, verbose=0)
    return model, vectorize


@pytest.mark.parametrize("name", ["model.keras", "checkpoint"])
def test_load_model_rebuilds_the_host_layers_with_their_vocabulary(text_model, tmp_path, name):
    model, vectorize = text_model
    model.save(tmp_path / name)
    with mirrored_strategy(2).scope():
        loaded = mf.load_model(tmp_path / name)
    np.testing.assert_allclose(loaded.predict(TEXTS, batch_size=4, verbose=0),
                               model.predict(TEXTS, batch_size=4, verbose=0), rtol=1e-6)
    restored = loaded.layers[0]
    assert restored is not vectorize and restored.get_config() == vectorize.get_config()
    assert restored.get_vocabulary() == vectorize.get_vocabulary()


def test_model_call_and_on_batch_methods_apply_host_layers_to_strings(text_model):
    model, vectorize = text_model
    ids = vectorize(TEXTS[:3])
    expected = np.asarray(model(ids))  # integer ids: the host layers' outputs, as before
    np.testing.assert_allclose(model(TEXTS[:3]), expected, rtol=1e-6)
    np.testing.assert_allclose(model(list(TEXTS[:3])), expected, rtol=1e-6)
    np.testing.assert_allclose(model.predict_on_batch(list(TEXTS[:3])), expected, rtol=1e-6)
    strings = model.test_on_batch(list(TEXTS[:3]), LABELS[:3])
    assert strings == pytest.approx(model.test_on_batch(TEXTS[:3], LABELS[:3]), rel=1e-6)
    before = np.asarray(model(ids))
    assert np.isfinite(model.train_on_batch(list(TEXTS[:3]), LABELS[:3]))
    assert not np.allclose(model(ids), before)  # the step trained on the vectorized strings


def test_host_layers_lead_model_layers_and_summary_without_weights(text_model):
    model, vectorize = text_model
    assert model.layers[0] is vectorize and model.get_layer(vectorize.name) is vectorize
    assert [w.shape for w in model.get_weights()] == [(8, 4), (4, 2), (2,)]  # Keras' order
    lines = []
    model.summary(print_fn=lines.append)
    rows = [line for line in lines[0].splitlines() if line.startswith("│ ")]
    cells = [cell.strip() for cell in rows[0].split("│")[1:4]]
    assert cells == [vectorize.name, "(None, 5)", "0"]  # the type wraps to the next line
    assert "Total params: 42" in lines[0]  # Embedding 8*4 + Dense 4*2+2


def test_a_functional_model_on_a_list_of_inputs_takes_a_dict_by_input_name():
    a, b = mf.Input((3,), name="a"), mf.Input((2,), name="b")
    with mirrored_strategy(2).scope():
        model = mf.Model([a, b], mf.layers.Dense(1)(mf.layers.concatenate([a, b])))
        model.compile(mf.optimizers.SGD(0.1), "mse")
    xa, xb = np.ones((8, 3), np.float32), np.zeros((8, 2), np.float32)
    y = np.ones((8, 1), np.float32)
    by_name = model.evaluate({"b": xb, "a": xa}, y, verbose=0)
    assert by_name == model.evaluate([xa, xb], y, verbose=0)
    np.testing.assert_array_equal(model.predict({"a": xa, "b": xb}, verbose=0),
                                  model.predict([xa, xb], verbose=0))
    model.fit({"a": xa, "b": xb}, y, epochs=1, verbose=0, validation_data=({"a": xa, "b": xb}, y))
