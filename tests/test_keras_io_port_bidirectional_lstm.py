"""keras-io's examples/nlp/bidirectional_lstm_imdb.py ported by renaming only (``keras`` ->
``mirrorfit``, ``keras.layers`` -> ``mirrorfit.layers``), with ``mask_zero=True`` on the
Embedding, on small synthetic data instead of IMDB (sizes scaled down: 50 words, 8-wide
embeddings, LSTM(4), maxlen 12), on 8 replicas and, for comparison, on one."""

import numpy as np

import mirrorfit as keras
from mirrorfit import layers
from tests.helpers import mirrored_strategy

max_features = 50  # Only consider the top 50 words (the example: 20000)
maxlen = 12  # Only consider the first 12 words of each review (the example: 200)


def build_model():
    # Input for variable-length sequences of integers
    inputs = keras.Input(shape=(None,), dtype="int32")
    # Embed each integer in an 8-dimensional vector (the example: 128); 0 is padding
    x = layers.Embedding(max_features, 8, mask_zero=True)(inputs)
    # Add 2 bidirectional LSTMs
    x = layers.Bidirectional(layers.LSTM(4, return_sequences=True))(x)
    x = layers.Bidirectional(layers.LSTM(4))(x)
    # Add a classifier
    outputs = layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model(inputs, outputs)
    return model


def synthetic_reviews(n, seed):
    """Reviews of 2..maxlen words, zero-padded in front (as keras' pad_sequences does); the
    label says whether most words are in the lower half of the vocabulary."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, maxlen), np.int32)
    y = np.zeros(n, np.float32)
    for i, length in enumerate(rng.integers(2, maxlen + 1, n)):
        words = rng.integers(1, max_features, length)
        x[i, maxlen - length:] = words
        y[i] = float(np.mean(words < max_features // 2) > 0.5)
    return x, y


def test_bidirectional_lstm_imdb_ports_by_renaming_and_matches_one_replica(allclose):
    (x_train, y_train), (x_val, y_val) = synthetic_reviews(64, 0), synthetic_reviews(32, 1)
    histories, models, initial = [], [], None
    for replicas in (8, 1):
        with mirrored_strategy(replicas).scope():
            model = build_model()
        if initial is None:
            initial = model.get_weights()
        else:  # the one-replica run starts from the 8-replica run's initial weights
            model.set_weights(initial)
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
        histories.append(model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0,
                                   validation_data=(x_val, y_val)).history)
        models.append(model)
    eight, one = histories
    # Keras' count: embedding 50 * 8; each LSTM 4 * (inputs * 4 + 4 * 4 + 4), both ways;
    # the classifier 8 + 1.
    assert models[0].count_params() == 400 + 2 * 4 * (8 * 4 + 16 + 4) * 2 + 9
    assert eight["loss"][-1] < eight["loss"][0]
    # The same global batches on 8 replicas and on 1: equal up to float32 summation order.
    np.testing.assert_allclose(eight["loss"], one["loss"], rtol=1e-5)
    np.testing.assert_allclose(eight["val_loss"], one["val_loss"], rtol=1e-5)
    allclose(models[0].get_weights(), models[1].get_weights(), rtol=1e-4, atol=1e-6)
