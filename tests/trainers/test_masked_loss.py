"""The compiled loss honours the model output's Keras mask, as Keras 3's ``Loss.__call__``:
``sum(l * sample_weight * mask) / sum(mask)`` over the element losses, with the sums and the
count of unmasked elements global over replicas (padding rows count in neither); ``accuracy``
counts the unmasked steps only, as Keras' ``MeanMetricWrapper``."""

import numpy as np

import mirrorfit as mf
from mirrorfit import layers
from tests.helpers import mirrored_strategy

ROWS, STEPS, VOCAB, CLASSES = 21, 6, 12, 3


def _data():
    """Token sequences of 1..STEPS tokens, zero-padded at the end; a label per step."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, STEPS + 1, ROWS)
    x = np.where(np.arange(STEPS) < lengths[:, None], rng.integers(1, VOCAB, (ROWS, STEPS)), 0)
    y = rng.integers(0, CLASSES, (ROWS, STEPS))
    weights = rng.uniform(0.5, 2.0, ROWS).astype(np.float32)
    return x.astype(np.int32), y.astype(np.int32), weights


def _model(replicas, initial=None):
    with mirrored_strategy(replicas).scope():
        inputs = mf.Input(shape=(STEPS,), dtype="int32")
        h = layers.Embedding(VOCAB, 4, mask_zero=True)(inputs)
        h = layers.LSTM(5, return_sequences=True)(h)
        model = mf.Model(inputs, layers.TimeDistributed(layers.Dense(CLASSES))(h))
    if initial is not None:
        model.set_weights(initial)
    model.compile(optimizer=mf.optimizers.SGD(0.5),
                  loss=mf.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _keras_masked_loss(logits, x, y, weights):
    """NumPy: Keras' "sum_over_batch_size" loss under the mask ``x != 0``, and accuracy."""
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    element = -np.take_along_axis(log_probs, y[..., None], -1)[..., 0]
    mask = x != 0
    accuracy = np.sum((logits.argmax(-1) == y) * mask) / np.sum(mask)
    return np.sum(element * weights[:, None] * mask) / np.sum(mask), accuracy


def test_loss_is_keras_masked_mean_and_eight_replicas_equal_one():
    x, y, weights = _data()
    eight = _model(8)
    initial = eight.get_weights()
    one = _model(1, initial)
    logits = np.asarray(eight.predict(x, verbose=0), np.float64)
    expected = _keras_masked_loss(logits, x, y, weights)
    unmasked = _keras_masked_loss(logits, np.ones_like(x), y, weights)
    assert np.all(np.abs(np.subtract(expected, unmasked)) > 1e-3)  # the mask matters here
    # One step of 21 rows padded to 24 (3 per replica); then 8-row steps, the last partial.
    for model, batch_size in ((eight, 24), (eight, 8), (one, 8)):
        results = model.evaluate(x, y, sample_weight=weights, batch_size=batch_size, verbose=0)
        np.testing.assert_allclose(results, expected, rtol=1e-5)
    # Training: the logged loss of one full-batch step is the same masked mean (before the
    # update), and eight replicas take the same steps as one.
    history = eight.fit(x, y, sample_weight=weights, batch_size=24, epochs=1, verbose=0)
    logs = history.history
    np.testing.assert_allclose([logs["loss"][0], logs["accuracy"][0]], expected, rtol=1e-5)
    eight.set_weights(initial)
    for model in (eight, one):
        model.fit(x, y, sample_weight=weights, batch_size=8, epochs=2, verbose=0)
    for a, b in zip(eight.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _two_output_model(replicas, initial=None):
    """Per-step tags (masked: SparseCategoricalCrossentropy) and a per-sequence score (the
    mask ends at GlobalAveragePooling1D: mean squared error over rows), loss weights 1, 0.5."""
    with mirrored_strategy(replicas).scope():
        inputs = mf.Input(shape=(STEPS,), dtype="int32")
        h = layers.Embedding(VOCAB, 4, mask_zero=True)(inputs)
        h = layers.LSTM(5, return_sequences=True)(h)
        tags = layers.TimeDistributed(layers.Dense(CLASSES))(h)
        score = layers.Dense(1)(layers.GlobalAveragePooling1D()(h))
        model = mf.Model(inputs, {"tags": tags, "score": score})
    if initial is not None:
        model.set_weights(initial)
    model.compile(optimizer=mf.optimizers.SGD(0.5),
                  loss={"tags": mf.losses.SparseCategoricalCrossentropy(from_logits=True),
                        "score": "mse"},
                  loss_weights={"tags": 1.0, "score": 0.5}, metrics={"tags": ["accuracy"]})
    return model


def test_each_output_loss_uses_its_own_mask_and_eight_replicas_equal_one():
    """A two-output model: the tags' loss and accuracy are Keras' masked means, the score's
    loss the mean over rows; the total weights them. Eight replicas (with padding rows)
    equal one, in evaluate and over two epochs of fit."""
    x, y, weights = _data()
    score = np.random.default_rng(1).normal(size=(ROWS, 1)).astype(np.float32)
    targets = {"tags": y, "score": score}
    eight = _two_output_model(8)
    initial = eight.get_weights()
    one = _two_output_model(1, initial)
    predicted = eight.predict(x, verbose=0)
    tags_loss, accuracy = _keras_masked_loss(np.asarray(predicted["tags"], np.float64), x, y,
                                             weights)
    score_loss = np.sum(weights * (np.asarray(predicted["score"], np.float64) - score)[:, 0]
                        ** 2) / ROWS
    expected = {"loss": tags_loss + 0.5 * score_loss, "tags_loss": tags_loss,
                "score_loss": score_loss, "tags_accuracy": accuracy}
    results = {}
    for model, batch_size in ((eight, 24), (one, 24)):
        results[model] = model.evaluate(x, targets, sample_weight=weights,
                                        batch_size=batch_size, verbose=0, return_dict=True)
        for name, value in expected.items():
            np.testing.assert_allclose(results[model][name], value, rtol=1e-5, err_msg=name)
    for name in expected:
        np.testing.assert_allclose(results[eight][name], results[one][name], rtol=1e-6,
                                   err_msg=name)
    for model in (eight, one):
        model.fit(x, targets, sample_weight=weights, batch_size=8, epochs=2, verbose=0)
    for a, b in zip(eight.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_plain_function_loss_is_masked_when_it_returns_element_losses():
    """A function returning ``[batch, steps]`` (as Keras' ``sparse_categorical_crossentropy``
    function) is masked like a Loss object, as Keras' ``LossFunctionWrapper``: here as the
    tags' loss of the two-output model."""
    x, y, weights = _data()
    score = np.zeros((ROWS, 1), np.float32)
    eight = _two_output_model(8)
    one = _two_output_model(1, eight.get_weights())
    predicted = eight.predict(x, verbose=0)
    tags_loss, _ = _keras_masked_loss(np.asarray(predicted["tags"], np.float64), x, y, weights)
    score_loss = np.sum(weights * np.asarray(predicted["score"], np.float64)[:, 0] ** 2) / ROWS

    def per_step(y_true, y_pred):
        return mf.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    results = []
    for model in (eight, one):
        model.compile(optimizer=mf.optimizers.SGD(0.5), loss={"tags": per_step, "score": "mse"})
        results.append(model.evaluate(x, {"tags": y, "score": score}, sample_weight=weights,
                                      batch_size=24, verbose=0, return_dict=True))
    for got in results:
        np.testing.assert_allclose([got["tags_loss"], got["loss"]],
                                   [tags_loss, tags_loss + score_loss], rtol=1e-5)
    np.testing.assert_allclose(results[0]["loss"], results[1]["loss"], rtol=1e-6)
