"""Framework cases: ``mirrorfit`` fit/evaluate/predict, Keras 3 (JAX backend) and tf.keras.

Each ``make_*`` function returns a runner whose ``run(x, y, repeats)`` blocks until the work is
done and returns the number of examples processed, like the hand-written runners. Frameworks are
imported lazily so that a missing or broken package only fails its own case.
"""

import jax
import numpy as np

from workloads import Workload


class MirrorfitRunner:
    """``mirrorfit`` with the defaults a user gets: progress bar (``verbose=1``) and accuracy.

    Used by ``run.py`` (probabilities, simulated CPU devices) and ``gpu.py`` (logits).

    Args:
        workload: the model to run.
        num_devices: replicas of the ``MirroredStrategy``.
        batch_size: global batch size.
        mode: ``"fit"``, ``"evaluate"`` or ``"predict"``.
        steps_per_execution: train steps fused per device call.
        from_logits: whether the model outputs logits (else probabilities).
        verbose: the ``verbose`` argument of every call (1: progress bar).
    """

    def __init__(self, workload: Workload, num_devices: int, batch_size: int, mode: str,
                 steps_per_execution: int = 1, from_logits: bool = False, verbose: int = 1):
        import mirrorfit as mf

        self.batch_size = batch_size
        self.mode = mode
        self.verbose = verbose
        strategy = mf.MirroredStrategy(devices=jax.devices()[:num_devices])
        with strategy.scope():
            self.model = mf.Model(workload.module, input_shape=workload.input_shape)
            self.model.compile(
                optimizer="adam", metrics=["accuracy"], steps_per_execution=steps_per_execution,
                loss=mf.losses.SparseCategoricalCrossentropy(from_logits=from_logits))

    def run(self, x: np.ndarray, y: np.ndarray, repeats: int) -> int:
        """Fits ``repeats`` epochs, or evaluates/predicts ``repeats`` times, over ``x`` ``[n, ...]``."""
        if self.mode == "fit":
            self.model.fit(x, y, batch_size=self.batch_size, epochs=repeats, verbose=self.verbose)
        else:
            for _ in range(repeats):
                if self.mode == "evaluate":
                    self.model.evaluate(x, y, batch_size=self.batch_size, verbose=self.verbose)
                else:
                    self.model.predict(x, batch_size=self.batch_size, verbose=self.verbose)
        jax.block_until_ready(self.model.params)
        return repeats * len(x)


def _keras_model(keras, workload: Workload):
    """Builds the workload's architecture with the given Keras module (``keras`` or ``tf.keras``)."""
    layers = keras.layers
    if workload.input_shape == (784,):
        body = [layers.Dense(128, activation="relu")]
    else:
        body = [layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
                layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
                layers.Flatten()]
    return keras.Sequential([keras.Input(workload.input_shape), *body,
                             layers.Dense(10, activation="softmax")])


class KerasRunner:
    """Keras 3 on the JAX backend with ``DataParallel``, or tf.keras with ``MirroredStrategy``.

    The subprocess environment selects the backend (``KERAS_BACKEND``) before Keras is imported.

    Args:
        workload: the model to train.
        num_devices: data-parallel replicas.
        batch_size: global batch size.
        flavor: ``"keras3"`` or ``"tf_keras"``.
        steps_per_execution: Keras ``compile(steps_per_execution=...)``.
    """

    def __init__(self, workload: Workload, num_devices: int, batch_size: int, flavor: str,
                 steps_per_execution: int = 1):
        self.batch_size = batch_size
        if flavor == "keras3":
            import keras

            devices = jax.devices()[:num_devices]
            keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
            self.model = self._compiled(keras, workload, steps_per_execution)
        else:
            import tensorflow as tf

            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
            strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(num_devices)])
            with strategy.scope():
                self.model = self._compiled(tf.keras, workload, steps_per_execution)

    @staticmethod
    def _compiled(keras, workload: Workload, steps_per_execution: int):
        model = _keras_model(keras, workload)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"], steps_per_execution=steps_per_execution)
        return model

    def run(self, x: np.ndarray, y: np.ndarray, repeats: int) -> int:
        """Fits ``repeats`` epochs over ``x`` ``[n, ...]``, ``y`` ``[n]``."""
        self.model.fit(x, y, batch_size=self.batch_size, epochs=repeats, verbose=1)
        return repeats * len(x)
