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


def keras_resnet18(keras, width: int = 64, stage_blocks: tuple = (2, 2, 2, 2)):
    """``workloads.ResNet18`` in Keras layers: ``[batch, 32, 32, 3]`` -> logits ``[batch, 10]``.

    Same layers and options as the Flax module: 3x3 stem, ``"same"`` padding, convolutions
    without bias, BatchNorm with momentum 0.9 and epsilon 1e-5 (Flax's defaults, not Keras'
    0.99 and 1e-3), a 1x1 projection shortcut where the shape changes, global average pooling
    and a dense logits head.
    """
    layers = keras.layers

    def conv(filters, size, strides=1):
        return layers.Conv2D(filters, size, strides=strides, padding="same", use_bias=False)

    def norm():
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)

    inputs = keras.Input((32, 32, 3))
    x = layers.ReLU()(norm()(conv(width, 3)(inputs)))
    for stage, blocks in enumerate(stage_blocks):
        filters = width * 2**stage
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            y = layers.ReLU()(norm()(conv(filters, 3, strides)(x)))
            y = norm()(conv(filters, 3)(y))
            if strides != 1 or x.shape[-1] != filters:
                x = norm()(conv(filters, 1, strides)(x))
            x = layers.ReLU()(layers.Add()([x, y]))
    return keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(x)))


def keras_decoder_lm(keras, vocab: int, seq: int, layers: int, d_model: int, heads: int,
                     flash_attention: bool):
    """``workloads.DecoderLM`` in Keras: tokens ``[batch, seq]`` -> logits ``[batch, seq, vocab]``.

    Token and position embeddings, pre-LayerNorm blocks (epsilon 1e-5) with a fused QKV
    projection and ``keras.ops.dot_product_attention(..., is_causal=True)`` (on the JAX
    backend, ``flash_attention=True`` calls ``jax.nn.dot_product_attention`` with
    ``implementation="cudnn"``, as the Flax module on a GPU), a tanh-approximated GELU MLP of
    width ``4 * d_model``, a final LayerNorm and the output tied to the token embedding.
    """
    ops, kl = keras.ops, keras.layers

    class Block(kl.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.norm1, self.norm2 = kl.LayerNormalization(epsilon=1e-5), \
                kl.LayerNormalization(epsilon=1e-5)
            self.qkv, self.proj = kl.Dense(3 * d_model), kl.Dense(d_model)
            self.fc, self.out = kl.Dense(4 * d_model), kl.Dense(d_model)

        def call(self, x):
            batch, length = ops.shape(x)[0], ops.shape(x)[1]
            qkv = ops.reshape(self.qkv(self.norm1(x)), (batch, length, 3, heads, d_model // heads))
            y = ops.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2],
                                          is_causal=True, flash_attention=flash_attention)
            x = x + self.proj(ops.reshape(y, (batch, length, d_model)))
            h = keras.activations.gelu(self.fc(self.norm2(x)), approximate=True)
            return x + self.out(h)

    class DecoderLM(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.wte, self.wpe = kl.Embedding(vocab, d_model), kl.Embedding(seq, d_model)
            self.blocks = [Block() for _ in range(layers)]
            self.norm = kl.LayerNormalization(epsilon=1e-5)

        def call(self, tokens):
            x = self.wte(tokens) + self.wpe(ops.arange(ops.shape(tokens)[1]))
            for block in self.blocks:
                x = block(x)
            x = self.norm(x)  # the tied output layer, in the compute dtype as a Dense would be
            return ops.matmul(x, ops.transpose(ops.cast(self.wte.embeddings, x.dtype)))

    return DecoderLM()
