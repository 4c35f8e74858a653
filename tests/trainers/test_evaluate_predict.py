"""Tests for Model.evaluate and Model.predict: exact over all examples despite padding.

References are computed in NumPy from the model's params: Keras' sparse categorical
crossentropy (probabilities renormalized, clipped to [1e-7, 1 - 1e-7]) and accuracy, over
every example, with N not divisible by the global batch or the replica count.
"""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

import mirrorfit as mf

NUM_FEATURES, NUM_CLASSES, N = 12, 4, 203
_rng = np.random.default_rng(1)
X = _rng.normal(size=(N, NUM_FEATURES)).astype(np.float32)
Y = _rng.integers(0, NUM_CLASSES, size=N).astype(np.int32)
W = _rng.uniform(0.0, 3.0, size=N).astype(np.float32)
RTOL = 1e-5


def _make_model(n):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = mf.Sequential([nn.Dense(16), nn.relu, nn.Dense(NUM_CLASSES), nn.softmax],
                              input_shape=(NUM_FEATURES,))
    # Larger weights than the init: confident predictions, accuracy well away from chance.
    rng = np.random.default_rng(2)
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()])
    return model


@pytest.fixture(scope="module", params=[8, 3], ids=["8_replicas", "3_replicas"])
def model(request):
    model = _make_model(request.param)
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _numpy_probs(params):
    p = jax.tree.map(np.asarray, params)
    h = np.maximum(X @ p["layers_0"]["kernel"] + p["layers_0"]["bias"], 0.0)
    z = h @ p["layers_2"]["kernel"] + p["layers_2"]["bias"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _numpy_loss_and_correct(params):
    probs = _numpy_probs(params)
    probs = np.clip(probs / probs.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)
    losses = -np.log(probs[np.arange(N), Y])
    correct = (probs.argmax(-1) == Y).astype(np.float64)
    return losses, correct


@pytest.mark.parametrize("batch_size", [32, 20])
def test_evaluate_equals_numpy_over_all_examples(model, batch_size):
    losses, correct = _numpy_loss_and_correct(model.params)
    logs = model.evaluate(X, Y, batch_size=batch_size, verbose=0, return_dict=True)
    assert list(logs) == ["loss", "accuracy"]
    assert 0.0 < correct.mean() < 1.0  # neither all nor nothing right
    np.testing.assert_allclose(logs["loss"], losses.mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["accuracy"], correct.mean(), rtol=RTOL)


def test_evaluate_with_sample_weight_uses_keras_weighted_semantics():
    model = _make_model(3)
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"],
                  weighted_metrics=["accuracy"])
    losses, correct = _numpy_loss_and_correct(model.params)
    logs = model.evaluate(X, Y, batch_size=32, sample_weight=W, verbose=0, return_dict=True)
    # Keras 3: loss = sum(w * l) / num_examples; `metrics` ignore sample_weight, and
    # `weighted_metrics` give sum(w * correct) / sum(w) (named weighted_* on a clash).
    assert list(logs) == ["loss", "accuracy", "weighted_accuracy"]
    np.testing.assert_allclose(logs["loss"], (W * losses).sum() / N, rtol=RTOL)
    np.testing.assert_allclose(logs["accuracy"], correct.mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["weighted_accuracy"], (W * correct).sum() / W.sum(),
                               rtol=RTOL)


def test_evaluate_on_fewer_examples_than_replicas(model):
    losses, correct = _numpy_loss_and_correct(model.params)
    logs = model.evaluate(X[:2], Y[:2], batch_size=32, verbose=0, return_dict=True)
    np.testing.assert_allclose(logs["loss"], losses[:2].mean(), rtol=RTOL)
    np.testing.assert_allclose(logs["accuracy"], correct[:2].mean(), rtol=RTOL)


def test_evaluate_leaves_params_unchanged(model, allclose):
    before = model.get_weights()
    model.evaluate(X, Y, batch_size=32, verbose=0)
    allclose(model.get_weights(), before, rtol=0)


def test_evaluate_returns_loss_then_metrics_as_keras(model):
    logs = model.evaluate(X, Y, batch_size=32, verbose=0, return_dict=True)
    values = model.evaluate(X, Y, batch_size=32, verbose=0)
    assert values == pytest.approx([logs["loss"], logs["accuracy"]], rel=1e-6)


def test_evaluate_without_metrics_returns_the_loss_as_a_float():
    model = _make_model(2)
    model.compile(optax.sgd(0.1), "sparse_categorical_crossentropy")
    losses, _ = _numpy_loss_and_correct(model.params)
    loss = model.evaluate(X, Y, batch_size=64, verbose=0)
    assert isinstance(loss, float)
    np.testing.assert_allclose(loss, losses.mean(), rtol=RTOL)


def test_evaluate_on_iterable_equals_array_input(model):
    expected = model.evaluate(X, Y, batch_size=32, sample_weight=W, verbose=0, return_dict=True)
    batches = ((X[i:i + 32], Y[i:i + 32], W[i:i + 32]) for i in range(0, N, 32))
    logs = model.evaluate(batches, verbose=0, return_dict=True)
    assert logs == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("batch_size", [32, 20, 500])
def test_predict_returns_every_row_in_order(model, batch_size):
    pred = model.predict(X, batch_size=batch_size, verbose=0)
    assert isinstance(pred, np.ndarray)
    assert pred.shape == (N, NUM_CLASSES)
    np.testing.assert_allclose(pred, _numpy_probs(model.params), rtol=RTOL, atol=1e-7)


def test_predict_on_fewer_examples_than_replicas(model):
    pred = model.predict(X[:2], verbose=0)
    assert pred.shape == (2, NUM_CLASSES)
    np.testing.assert_allclose(pred, _numpy_probs(model.params)[:2], rtol=RTOL, atol=1e-7)


def test_predict_on_generator_of_input_batches(model):
    batches = (X[i:i + 32] for i in range(0, N, 32))
    pred = model.predict(batches, verbose=0)
    assert pred.shape == (N, NUM_CLASSES)
    np.testing.assert_allclose(pred, _numpy_probs(model.params), rtol=RTOL, atol=1e-7)
