"""Core layers: Dense, Activation, Dropout, Embedding, Rescaling, Identity, Lambda and
ActivityRegularization (as ``keras.layers``).

Dense, Activation, Dropout and Rescaling pass a Keras mask on (``supports_masking``);
``Embedding(mask_zero=True)`` makes one.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, layer_field, register
from mirrorfit._src.regularizers import regularizers
from mirrorfit._src.utils import registry


@register
class Dense(FlaxLayer):
    """``activation(inputs @ kernel + bias)``, as ``keras.layers.Dense``.

    Input shape ``[..., input_dim]``; output ``[..., units]``. Weights: ``kernel``
    ``[input_dim, units]`` (glorot_uniform), ``bias`` ``[units]`` (zeros).
    ``kernel_constraint`` / ``bias_constraint`` (`mirrorfit.constraints`) project them after
    every optimizer update, as Keras.
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
    kernel_constraint: Any = None
    bias_constraint: Any = None
    input_dim: int | None = layer_field(default=None, kw_only=True)  # legacy tf.keras

    @property
    def declared_input_shape(self) -> tuple[int, ...] | None:
        """``(input_dim,)`` when tf.keras' ``input_dim`` was given, else the
        ``input_shape`` given to the constructor (no batch axis), if any.
        """
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
        return drop(self, x, self.rate, self.noise_shape)


def drop(layer: FlaxLayer, x: jax.Array, rate: float, noise_shape: Any) -> jax.Array:
    """``x`` with entries zeroed with probability ``rate`` (one draw per entry of
    ``noise_shape``, broadcast; ``None`` entries take ``x``'s) and the rest scaled by
    ``1 / (1 - rate)``, from ``layer``'s ``"dropout"`` stream."""
    if rate == 1:
        return jnp.zeros_like(x)
    shape = x.shape if noise_shape is None else tuple(
        d if n is None else n for d, n in zip(x.shape, noise_shape))
    keep = jax.random.bernoulli(layer.make_rng("dropout"), 1.0 - rate, shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


@register
class Embedding(FlaxLayer):
    """Row lookup ``embeddings[inputs]``, as ``keras.layers.Embedding``.

    Input: integer indices ``[batch, ...]``; output ``[batch, ..., output_dim]``. Weight:
    ``embeddings`` ``[input_dim, output_dim]`` (Keras' ``"uniform"``: U(-0.05, 0.05)),
    projected by ``embeddings_constraint`` after every optimizer update.
    With ``mask_zero=True`` index 0 is padding: the layer's output mask is ``inputs != 0``,
    which the next layers (`LSTM`, `GlobalAveragePooling1D`, ...) honour, as Keras.

    As Keras' (``autocast = False``), it gathers the rows from the float32 table and casts the
    rows to the compute dtype, under a mixed policy too: a step's cost follows the rows looked
    up, not the table's size, and the table's gradient is a float32 scatter-add of the rows'.
    """

    autocast: ClassVar[bool] = False

    input_dim: int
    output_dim: int
    embeddings_initializer: Any = "uniform"
    embeddings_regularizer: Any = None
    embeddings_constraint: Any = None
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
        rows = jnp.take(table, jnp.asarray(inputs).astype(jnp.int32), axis=0)
        return self.activity(self.cast_read(rows))


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


@register
class Identity(FlaxLayer):
    """Returns its inputs unchanged, as ``keras.layers.Identity``; any structure in and out."""

    def __call__(self, inputs: Any, training: bool = False) -> Any:
        return inputs


LAMBDA_UNSAVABLE = (
    "A Lambda layer saves its function by name: give it a named function (def, not lambda) "
    "registered with @mf.saving.register_serializable(), or write the layer as an "
    "mf.layers.Layer (Keras, too, refuses to load Python lambdas by default). "
    "Received: function={function!r}")


@register
class Lambda(FlaxLayer):
    """``function(inputs, **arguments)``, as ``keras.layers.Lambda``.

    ``function`` also gets ``training=`` when it takes that argument, and ``mask=`` (always
    ``None`` here) when it takes that. The output shape is traced, so ``output_shape`` and
    ``mask`` are recorded for Keras compatibility only. A saved model stores ``function`` by
    its registered name (`mirrorfit.saving.register_serializable`), never its code.
    """

    function: Any
    output_shape: Any = None
    mask: Any = None
    arguments: Any = None

    def __call__(self, inputs: Any, training: bool = False) -> Any:
        kwargs = dict(self.arguments or {})
        params = inspect.signature(self.function).parameters
        if "training" in params:
            kwargs["training"] = training
        if "mask" in params:
            kwargs["mask"] = None
        return self.function(inputs, **kwargs)

    def get_config(self) -> dict[str, Any]:
        """As `FlaxLayer.get_config`, with ``function`` as its registered name.

        Raises:
            ValueError: ``function`` is a Python lambda, or not registered by name.
        """
        config = super().get_config()
        name = registry.get_registered_name(self.function)
        if name == "<lambda>" or registry.get_registered_object(name) is not self.function:
            raise ValueError(LAMBDA_UNSAVABLE.format(function=self.function))
        config["function"] = name
        config["arguments"] = dict(self.arguments or {})
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Lambda:
        """A Lambda from ``get_config()``; the function is looked up by its name.

        Raises:
            ValueError: the function is neither registered nor in ``custom_objects``.
        """
        function = registry.get_registered_object(config["function"])
        if function is None:
            raise ValueError(
                f"The Lambda layer's function {config['function']!r} is not known: import the "
                "module that registers it with @mf.saving.register_serializable(), or pass it "
                f"in custom_objects. Received: function={config['function']!r}")
        return super().from_config({**config, "function": function})  # type: ignore[return-value]


@register
class ActivityRegularization(FlaxLayer):
    """Returns its inputs and adds ``(l1 * sum(|x|) + l2 * sum(x^2)) / batch_size`` to the
    model's losses, as ``keras.layers.ActivityRegularization``."""

    l1: float = 0.0
    l2: float = 0.0

    @property
    def activity_regularizer(self) -> regularizers.L1L2:
        """``L1L2(l1, l2)``: the penalty on the outputs, as Keras' attribute."""
        return regularizers.L1L2(l1=self.l1, l2=self.l2)

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        return self.activity(self.cast(inputs))
