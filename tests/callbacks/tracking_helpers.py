"""Shared pieces of test_wandb_logger.py and test_mlflow_logger.py: a tiny 2-replica model,
its data, and a callback that records what the loggers should have logged, independently."""

import flax.linen as nn
import jax
import numpy as np

import mirrorfit as mf
from tests.helpers import compiled_classifier

ROWS, BATCH, EPOCHS = 40, 8, 2
VALIDATION_SPLIT = 0.2  # 32 training rows: 4 global batches (train steps) per epoch
STEPS = 4
NUM_REPLICAS = 2


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype(np.float32)
    return x, (x[:, 0] > x[:, 1]).astype(np.int32)


def make_model(dtype_policy=None):
    """A 4 -> 2 softmax regression on 2 replicas, compiled with SGD(0.1) and accuracy."""
    return compiled_classifier([nn.Dense(2), nn.softmax], seed=1, replicas=NUM_REPLICAS,
                               dtype_policy=dtype_policy)


def fit(model, callbacks, **kwargs):
    """``model.fit`` on `data` with the tests' settings (2 epochs, 4 steps each)."""
    x, y = data()
    settings = {"batch_size": BATCH, "epochs": EPOCHS, "verbose": 0,
                "validation_split": VALIDATION_SPLIT}
    return model.fit(x, y, callbacks=callbacks, **{**settings, **kwargs})


class Expected(mf.callbacks.Callback):
    """Records, by global train step (read from the model), each train step's scalar logs,
    and the optimizer's learning rate at each epoch end: what the loggers should log."""

    def __init__(self):
        super().__init__()
        self.batches: dict[int, dict[str, float]] = {}
        self.learning_rates: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        step = int(jax.device_get(self.model.state.step))
        self.batches[step] = {k: float(v) for k, v in (logs or {}).items()}

    def on_epoch_end(self, epoch, logs=None):
        self.learning_rates.append(float(self.model.optimizer.learning_rate))


def halving(epoch):
    """A `LearningRateScheduler` schedule: 0.2, 0.1, ..."""
    return 0.2 * 0.5 ** epoch
