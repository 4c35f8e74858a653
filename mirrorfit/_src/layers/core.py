"""Core layers: Dense, Activation, Dropout, Embedding, Rescaling (as ``keras.layers``).

Dense, Activation, Dropout and Rescaling pass a Keras mask on (``supports_masking``);
``Embedding(mask_zero=True)`` makes one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, layer_field, register


@register
class Dense(FlaxLayer):
    """``activation(inputs @ kernel + bias)``, as ``keras.layers.Dense``.

    Input shape ``[..., input_dim]``; output ``[..., units]``. Weights: ``kernel``
    ``[input_dim, units]`` (glorot_uniform), ``bias`` ``[units]`` (zeros).
    """

    supports_masking: ClassVar[bool] = True

    units: int
    activation: Any = None
    use_bias: bool = True
    kernel_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    input_dim: int | None = layer_field(default=None, kw_only=True)  # legacy tf.keras

    @property
    def declared_input_shape(self) -> tuple[int, ...] | None:
        return (self.input_dim,) if self.input_dim is not None else super().declared_input_shape

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        if not isinstance(self.units, int) or self.units <= 0:
            raise ValueError(f"units must be a positive int. Received: units={self.units!r}")
        x = self.cast(inputs)
        kernel = self.weight("kernel", self.kernel_initializer, (x.shape[-1], self.units),
                             self.kernel_regularizer)
        y = jnp.matmul(x, kernel)
        return self.bias_and_activation(y)


@register
class Activation(FlaxLayer):
    """``activation(inputs)``, as ``keras.layers.Activation``; any shape in and out."""

    supports_masking: ClassVar[bool] = True

    activation: Any

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        return self.activation_fn()(self.cast(inputs))


@register
class Dropout(FlaxLayer):
    """Zeroes inputs with probability ``rate`` in training and scales the rest by
    ``1 / (1 - rate)``, as ``keras.layers.Dropout``; any shape in and out.

    Uses the ``"dropout"`` RNG stream, which the trainer seeds per step and replica; ``seed``
    is accepted so Keras code ports unchanged but does not pick the stream. ``noise_shape``
    entries of ``None`` take the input's.
    """

    supports_masking: ClassVar[bool] = True

    rate: float
    noise_shape: Any = None
    seed: int | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        if not 0 <= self.rate <= 1:
            raise ValueError(f"rate must be in [0, 1]. Received: rate={self.rate!r}")
        x = self.cast(inputs)
        if not training or self.rate == 0:
            return x
        if self.rate == 1:
            return jnp.zeros_like(x)
        shape = x.shape if self.noise_shape is None else tuple(
            d if n is None else n for d, n in zip(x.shape, self.noise_shape))
        keep = jax.random.bernoulli(self.make_rng("dropout"), 1.0 - self.rate, shape)
        return jnp.where(keep, x / (1.0 - self.rate), jnp.zeros_like(x))


@register
class Embedding(FlaxLayer):
    """Row lookup ``embeddings[inputs]``, as ``keras.layers.Embedding``.

    Input: integer indices ``[batch, ...]``; output ``[batch, ..., output_dim]``. Weight:
    ``embeddings`` ``[input_dim, output_dim]`` (Keras' ``"uniform"``: U(-0.05, 0.05)).
    With ``mask_zero=True`` index 0 is padding: the layer's output mask is ``inputs != 0``,
    which the next layers (`LSTM`, `GlobalAveragePooling1D`, ...) honour, as Keras.
    """

    input_dim: int
    output_dim: int
    embeddings_initializer: Any = "uniform"
    embeddings_regularizer: Any = None
    activity_regularizer: Any = None
    mask_zero: bool = False

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> jax.Array | None:
        """With ``mask_zero``, ``inputs != 0`` (bool, the inputs' shape), as Keras."""
        del mask
        return jnp.not_equal(inputs, 0) if self.mask_zero else None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        table = self.weight("embeddings", self.embeddings_initializer,
                            (self.input_dim, self.output_dim), self.embeddings_regularizer)
        return self.activity(jnp.take(table, jnp.asarray(inputs).astype(jnp.int32), axis=0))


@register
class Rescaling(FlaxLayer):
    """``inputs * scale + offset``, as ``keras.layers.Rescaling``; any shape in and out."""

    supports_masking: ClassVar[bool] = True

    scale: float
    offset: float = 0.0

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(jnp.asarray(inputs, jnp.float32) if not jnp.issubdtype(
            jnp.result_type(inputs), jnp.floating) else inputs)
        return x * jnp.asarray(self.scale, x.dtype) + jnp.asarray(self.offset, x.dtype)
