"""Shared pieces of the tests/trainers/data_adapters/test_*.py files: data, a small model, a
recording callback. The model and its initial weights are also the ``model_and_initial``
fixture of tests/conftest.py."""

import flax.linen as nn
import jax
import numpy as np
import optax

import mirrorfit as mf

NUM_FEATURES, NUM_CLASSES = 5, 3
ROWS, BATCH = 35, 10  # 4 steps per epoch, the last with 5 rows (a partial batch)
_rng = np.random.default_rng(7)
X = _rng.normal(size=(ROWS, NUM_FEATURES)).astype(np.float32)
Y = _rng.integers(0, NUM_CLASSES, size=ROWS).astype(np.int32)
W = np.linspace(0.2, 2.0, ROWS).astype(np.float32)


def make_model(num_replicas=3, metrics=("accuracy",)):
    """A 5 -> 3 softmax regression with plain SGD (set_weights resets training)."""
    with mf.MirroredStrategy(jax.devices()[:num_replicas]).scope():
        model = mf.Sequential([nn.Dense(NUM_CLASSES), nn.softmax],
                              input_shape=(NUM_FEATURES,), seed=3)
        model.compile(optax.sgd(0.5), "sparse_categorical_crossentropy", list(metrics))
    return model


def batches(x=X, y=Y, w=None, batch_size=BATCH):
    """A generator of ``(x, y)`` (or ``(x, y, w)``) global batches, in order."""
    for start in range(0, len(x), batch_size):
        part = slice(start, start + batch_size)
        yield (x[part], y[part]) if w is None else (x[part], y[part], w[part])


class RecordSteps(mf.callbacks.Callback):
    """Records ``params["steps"]`` at every epoch begin (what the progress bar's total is)."""

    def __init__(self):
        super().__init__()
        self.totals = []

    def on_epoch_begin(self, epoch, logs=None):
        self.totals.append(self.params["steps"])
