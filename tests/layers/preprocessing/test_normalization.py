"""Normalization: adapt against NumPy's mean/var, the formula, and its weights in a model."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.helpers import mirrored_strategy

DATA = np.random.default_rng(0).normal(3.0, 2.0, (24, 3)).astype(np.float32)


def _normalized(x, mean, var):
    return (x - mean) / np.maximum(np.sqrt(var), 1e-7)


def test_adapt_on_an_array_a_list_of_batches_and_a_generator_matches_numpy():
    for data in (DATA, [DATA[:10], DATA[10:]], (b for b in np.split(DATA, 3))):
        norm = mf.layers.Normalization()
        norm.adapt(data)
        np.testing.assert_allclose(norm.statistics.mean, DATA.mean(axis=0), rtol=1e-5)
        np.testing.assert_allclose(norm.statistics.variance, DATA.var(axis=0), rtol=1e-5)
        np.testing.assert_allclose(norm(DATA[:4]), _normalized(DATA[:4], DATA.mean(0),
                                                                DATA.var(0)), rtol=1e-4,
                                   atol=1e-5)


def test_adapt_on_a_py_dataset_of_x_y_batches_uses_x():
    class Batches(mf.utils.PyDataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return DATA[i * 12:(i + 1) * 12], np.zeros(12)

    norm = mf.layers.Normalization()
    norm.adapt(Batches())
    np.testing.assert_allclose(norm.statistics.mean, DATA.mean(axis=0), rtol=1e-5)


def test_axis_none_given_statistics_and_invert_follow_the_formula():
    norm = mf.layers.Normalization(axis=None)
    norm.adapt(DATA)
    np.testing.assert_allclose(norm(DATA), _normalized(DATA, DATA.mean(), DATA.var()),
                               rtol=1e-4, atol=1e-5)
    given = mf.layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[4.0, 1.0, 0.0])
    np.testing.assert_allclose(given(DATA), _normalized(DATA, [1, 2, 3], [4, 1, 0]), rtol=1e-5)
    inverse = mf.layers.Normalization(mean=2.0, variance=9.0, invert=True)
    np.testing.assert_allclose(inverse(DATA), DATA * 3.0 + 2.0, rtol=1e-6)
    assert given.get_config()["mean"] == [1.0, 2.0, 3.0] and "statistics" not in (
        given.get_config())


def test_adapt_on_a_layer_already_called_updates_its_weights():
    norm = mf.layers.Normalization()
    norm(DATA[:2])
    assert [w.name for w in norm.weights] == ["mean", "variance", "count"]
    norm.adapt(DATA)
    np.testing.assert_allclose(norm.get_weights()[0], DATA.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(norm(DATA[:4]), _normalized(DATA[:4], DATA.mean(0),
                                                            DATA.var(0)), rtol=1e-4, atol=1e-5)


def test_an_adapted_layer_gives_a_model_its_non_trainable_weights_and_fits():
    norm = mf.layers.Normalization()
    norm.adapt(DATA)
    with mirrored_strategy(8).scope():
        model = mf.Sequential([norm, mf.layers.Dense(1)], input_shape=(3,), seed=0)
        model.compile(mf.optimizers.SGD(0.1), "mse")
    model.fit(DATA, DATA[:, :1], batch_size=8, epochs=1, verbose=0)
    weights = model.get_weights()  # Keras' order: mean, variance, count, kernel, bias
    np.testing.assert_allclose(weights[0], DATA.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(weights[1], DATA.var(axis=0), rtol=1e-5)
    assert weights[2] == 0 and len(model.trainable_weights) == 2
    expected = _normalized(DATA, DATA.mean(0), DATA.var(0)) @ weights[3] + weights[4]
    np.testing.assert_allclose(model.predict(DATA, batch_size=8, verbose=0), expected,
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="before building the model"):
        norm.adapt(DATA)


@pytest.mark.parametrize("kwargs", [{"mean": 1.0}, {"mean": [1.0, 2.0], "variance": [1.0]}])
def test_bad_statistics_raise_naming_them(kwargs):
    with pytest.raises(ValueError, match="Received"):
        mf.layers.Normalization(**kwargs)
