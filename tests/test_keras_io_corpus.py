"""A porting corpus: keras-io guides and examples (Keras 3 versions) ported by renaming only
(``import keras`` -> ``import mirrorfit as keras``, ``from keras import layers, ops`` ->
``from mirrorfit import layers, ops``), plus ``mf.value_and_grad`` where TensorFlow's
``GradientTape`` was, a ``strategy.scope()`` around model creation, and small synthetic data
in place of downloads (with the sizes scaled down so that each runs in seconds on a CPU).
Each must run and reach the metric its data allows (a learnable synthetic target: well
above chance, or a loss well below its start).

The ports keep the examples' code (classes, functions, names, compile and fit calls); lines
of the originals that only print, plot or download are left out. Examples that train with a
custom ``train_step`` on two optimizers (GANs) are not here.
"""

import numpy as np
import pytest

import mirrorfit as keras
from mirrorfit import layers, ops
from tests.helpers import mirrored_strategy

pytestmark = pytest.mark.slow
RNG = np.random.default_rng(0)


def _images(n, size, classes, channels=3, seed=0):
    """``n`` images ``[size, size, channels]`` in ``[0, 255]`` whose class shows as a brighter
    band at a class-dependent row, with noise; labels ``[n, 1]`` as CIFAR's."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=(n, 1))
    x = rng.uniform(0, 100, size=(n, size, size, channels))
    rows = (y[:, 0] * size) // classes
    for i, r in enumerate(rows):
        x[i, r:r + max(size // classes, 1)] += 150
    return x.astype("float32"), y


# -- guides/functional_api.py ---------------------------------------------------------------


def test_functional_api_guide_multi_input_multi_output_with_dict_losses():
    with mirrored_strategy(2).scope():
        inputs = keras.Input(shape=(784,))
        dense = layers.Dense(64, activation="relu")
        x = dense(inputs)
        x = layers.Dense(64, activation="relu")(x)
        outputs = layers.Dense(10)(x)
        model = keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")
        assert inputs.shape == (None, 784) and model.name == "mnist_model"

        # The ticket model: three inputs, two outputs, losses keyed by output name.
        num_tags = 12  # Number of unique issue tags
        num_words = 100  # Size of vocabulary (the guide: 10000)
        num_departments = 4  # Number of departments for predictions
        title_input = keras.Input(shape=(None,), name="title")
        body_input = keras.Input(shape=(None,), name="body")
        tags_input = keras.Input(shape=(num_tags,), name="tags")
        title_features = layers.Embedding(num_words, 16)(title_input)
        body_features = layers.Embedding(num_words, 16)(body_input)
        title_features = layers.LSTM(16)(title_features)
        body_features = layers.LSTM(8)(body_features)
        x = layers.concatenate([title_features, body_features, tags_input])
        priority_pred = layers.Dense(1, name="priority")(x)
        department_pred = layers.Dense(num_departments, name="department")(x)
        model = keras.Model(inputs=[title_input, body_input, tags_input],
                            outputs=[priority_pred, department_pred])
        model.compile(
            optimizer=keras.optimizers.RMSprop(1e-2),
            loss={
                "priority": keras.losses.BinaryCrossentropy(from_logits=True),
                "department": keras.losses.CategoricalCrossentropy(from_logits=True),
            },
            loss_weights={"priority": 1.0, "department": 0.2},
        )

    # Learnable targets (the guide's are random): priority from the tags, the department
    # from the first title word.
    title_data = RNG.integers(num_words, size=(256, 10))
    body_data = RNG.integers(num_words, size=(256, 20))
    tags_data = RNG.integers(2, size=(256, num_tags)).astype("float32")
    priority_targets = (tags_data[:, :1] > 0).astype("float32")
    dept_targets = keras.utils.to_categorical(title_data[:, 0] % num_departments,
                                              num_departments)
    history = model.fit(
        {"title": title_data, "body": body_data, "tags": tags_data},
        {"priority": priority_targets, "department": dept_targets},
        epochs=6,
        batch_size=32,
        verbose=0,
    )
    assert set(history.history) == {"loss", "priority_loss", "department_loss"}
    # Both heads learn: the losses fall well below their first epoch's.
    assert history.history["priority_loss"][-1] < 0.5 * history.history["priority_loss"][0]
    assert history.history["loss"][-1] < 0.6 * history.history["loss"][0]
