"""The peers users would pick instead of mirrorfit: Keras 3 (JAX backend) and tf.keras.

Runs inside a peer's own virtualenv (see ``venvs.py``), so this module imports nothing of
mirrorfit, JAX, Flax or the other benchmark modules at the top: only NumPy, and the framework
inside ``KerasRunner``. The subprocess environment picks the Keras backend (``KERAS_BACKEND``)
and, for Keras 3, the simulated device count (``XLA_FLAGS``) before Keras is imported.

The model is the benchmark's architecture written with Keras layers (the MLP 784 -> 128 relu
-> 10 softmax, or the CNN of ``workloads.CNN``), compiled with what mirrorfit's cases use:
``optimizer="adam"`` (Keras defaults, learning rate 1e-3), sparse categorical crossentropy on
probabilities and the accuracy metric.
"""

import numpy as np

FLAVORS = ("keras3", "tf_keras")


def keras_model(keras, input_shape: tuple):
    """The benchmark model for one example of ``input_shape`` with ``keras`` (``keras`` or ``tf.keras``).

    ``(784,)`` gives the MLP, ``(32, 32, 3)`` the CNN; outputs probabilities ``[batch, 10]``.
    """
    layers = keras.layers
    if input_shape == (784,):
        body = [layers.Dense(128, activation="relu")]
    else:
        body = [layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
                layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
                layers.Flatten()]
    return keras.Sequential([keras.Input(input_shape), *body,
                             layers.Dense(10, activation="softmax")])


class KerasRunner:
    """Keras 3 on the JAX backend, or tf.keras with ``tf.distribute.MirroredStrategy``.

    Keras 3 at one device runs as a user would write it, with no distribution (Keras then jits a
    plain train step, no mesh); at ``num_devices > 1`` it sets
    ``keras.distribution.DataParallel`` over the first ``num_devices`` (simulated) devices.
    tf.keras always runs under ``MirroredStrategy``, over ``num_devices`` logical CPU devices
    made with ``tf.config.set_logical_device_configuration``. With TensorFlow 2.16 and later,
    ``tf.keras`` is Keras 3 on the TensorFlow backend.

    Args:
        input_shape: one example's shape, which picks the model (see ``keras_model``).
        num_devices: data-parallel replicas.
        batch_size: global batch size.
        flavor: ``"keras3"`` or ``"tf_keras"``.
        steps_per_execution: Keras ``compile(steps_per_execution=...)``, train steps per call.

    Raises:
        ValueError: if ``flavor`` is not one of ``FLAVORS``.
    """

    def __init__(self, input_shape: tuple, num_devices: int, batch_size: int, flavor: str,
                 steps_per_execution: int = 1):
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}. Received: flavor={flavor!r}")
        self.batch_size = batch_size
        if flavor == "keras3":
            import keras

            if num_devices > 1:
                devices = keras.distribution.list_devices()[:num_devices]
                keras.distribution.set_distribution(
                    keras.distribution.DataParallel(devices=devices))
            self.model = self._compiled(keras, input_shape, steps_per_execution)
        else:
            import tensorflow as tf

            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
            strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(num_devices)])
            with strategy.scope():
                self.model = self._compiled(tf.keras, input_shape, steps_per_execution)

    @staticmethod
    def _compiled(keras, input_shape: tuple, steps_per_execution: int):
        model = keras_model(keras, input_shape)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"], steps_per_execution=steps_per_execution)
        return model

    def run(self, x: np.ndarray, y: np.ndarray, repeats: int) -> int:
        """Fits ``repeats`` epochs over ``x`` ``[n, ...]``, ``y`` ``[n]``; returns the examples seen.

        ``fit`` returns only when its last step's logs are fetched, so the work is done.
        """
        self.model.fit(x, y, batch_size=self.batch_size, epochs=repeats, verbose=1)
        return repeats * len(x)
