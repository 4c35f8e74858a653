"""The random draws of image_base (one per row, from the trainer's per-step, per-replica
"dropout" stream), seen through augmentation layers in a Sequential model on 8 replicas: they
change the training forward pass per row and per replica, and are the identity in
evaluate/predict."""

import numpy as np

import mirrorfit as mf
from tests.helpers import mirrored_strategy
from tests.layers.preprocessing.helpers import apply


def _brightness_model(replicas):
    """RandomBrightness then a fixed sum over pixels, compiled with SGD(0): the MAE and MSE
    of a zero target are the mean and mean square of the per-row sums."""
    with mirrored_strategy(replicas).scope():
        model = mf.Sequential([
            mf.layers.RandomBrightness(0.4, value_range=(0, 100)), mf.layers.Flatten(),
            mf.layers.Dense(1, use_bias=False, kernel_initializer="ones")],
            input_shape=(2, 2, 1), seed=0)
        model.compile(mf.optimizers.SGD(0.0), "mse", ["mae", "mse"])
    return model


def _spread(logs):
    """The variance of the per-row outputs over the batch: MSE - MAE**2 (positive outputs)."""
    return logs["mse"] - logs["mae"] ** 2


def test_replicas_draw_different_transforms_in_training_and_none_in_evaluate():
    x, y = np.full((8, 2, 2, 1), 50.0, np.float32), np.zeros((8, 1), np.float32)
    model = _brightness_model(8)  # one row per replica: rows differ only if replicas do
    logs = model.train_on_batch(x, y, return_dict=True)
    assert _spread(logs) > 1.0  # outputs 200 + 4 * U(-40, 40)
    logs = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
    np.testing.assert_allclose([logs["mae"], _spread(logs)], [200.0, 0.0], atol=1e-2)


def test_rows_of_one_replica_draw_different_transforms():
    x, y = np.full((8, 2, 2, 1), 50.0, np.float32), np.zeros((8, 1), np.float32)
    assert _spread(_brightness_model(1).train_on_batch(x, y, return_dict=True)) > 1.0


def test_an_augmented_image_classifier_fits_on_8_replicas_and_predicts_unaugmented():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (32, 8, 8, 1)).astype(np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0.5).astype(np.int32)
    with mirrored_strategy(8).scope():
        model = mf.Sequential([
            # one layer of each module (the affine ones share RandomRotation's resampling)
            mf.layers.RandomFlip("horizontal"), mf.layers.RandomRotation(0.1),
            mf.layers.RandomContrast(0.2, value_range=(0, 1)),
            mf.layers.RandomCrop(6, 6), mf.layers.Flatten(), mf.layers.Dense(2)],
            input_shape=(8, 8, 1), seed=0)
        model.compile(mf.optimizers.Adam(0.01),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    kernel, bias = model.get_weights()
    # In inference RandomCrop resizes the aspect-ratio box (here all) to 6x6; the rest pass.
    resized = apply(mf.layers.Resizing(6, 6), x, training=False).reshape(32, -1)
    np.testing.assert_allclose(model.predict(x, batch_size=16, verbose=0),
                               resized @ kernel + bias, rtol=1e-4, atol=1e-5)
