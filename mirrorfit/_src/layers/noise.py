"""Random regularization layers: SpatialDropout1D/2D/3D, GaussianNoise, GaussianDropout,
AlphaDropout (as ``keras.layers``; formulas from ``keras/src/layers/regularization/``).

They act only with ``training=True`` and are the identity otherwise. Like `Dropout`, they
draw from the ``"dropout"`` RNG stream, which the trainer (and ``strategy.run``) seeds per
step and per replica, so each replica draws its own noise; ``seed`` is accepted so Keras code
ports unchanged but does not pick the stream.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax

from mirrorfit._src.layers.base import FlaxLayer, register
from mirrorfit._src.layers.core import drop

# keras.activations.selu's constants, which AlphaDropout keeps the statistics of.
_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def _check_rate(layer: FlaxLayer, name: str, value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{name} of {type(layer).__name__} must be in [0, 1]. "
                         f"Received: {name}={value!r}")


class _SpatialDropout(FlaxLayer):
    """Dropout of whole channels: one draw per ``[batch, 1, ..., 1, channels]`` entry."""

    rank: ClassVar[int]

    rate: float

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _check_rate(self, "rate", self.rate)
        data_format = getattr(self, "data_format", None)
        if data_format not in (None, "channels_last"):
            raise ValueError("Only data_format='channels_last' (inputs [batch, ..., channels]) "
                             f"is supported. Received: data_format={data_format!r}")
        x = self.cast(inputs)
        if x.ndim != self.rank + 2:
            raise ValueError(f"{type(self).__name__} expects inputs of rank {self.rank + 2} "
                             f"[batch, ..., channels]. Received shape {x.shape}")
        if not training or self.rate == 0:
            return x
        return drop(self, x, self.rate, (None,) + (1,) * self.rank + (None,))


@register
class SpatialDropout1D(_SpatialDropout):
    """Drops whole channels of ``[batch, steps, channels]``, as
    ``keras.layers.SpatialDropout1D``: one mask ``[batch, 1, channels]``."""

    rank: ClassVar[int] = 1

    seed: int | None = None


@register
class SpatialDropout2D(_SpatialDropout):
    """Drops whole feature maps of ``[batch, rows, cols, channels]``, as
    ``keras.layers.SpatialDropout2D``: one mask ``[batch, 1, 1, channels]``."""

    rank: ClassVar[int] = 2

    data_format: str | None = None
    seed: int | None = None


@register
class SpatialDropout3D(_SpatialDropout):
    """Drops whole feature volumes of ``[batch, d1, d2, d3, channels]``, as
    ``keras.layers.SpatialDropout3D``: one mask ``[batch, 1, 1, 1, channels]``."""

    rank: ClassVar[int] = 3

    data_format: str | None = None
    seed: int | None = None


@register
class GaussianNoise(FlaxLayer):
    """Adds N(0, ``stddev``²) noise in training, as ``keras.layers.GaussianNoise``."""

    stddev: float
    seed: int | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _check_rate(self, "stddev", self.stddev)
        x = self.cast(inputs)
        if not training or self.stddev == 0:
            return x
        noise = jax.random.normal(self.make_rng("dropout"), x.shape, x.dtype)
        return x + self.stddev * noise


@register
class GaussianDropout(FlaxLayer):
    """Multiplies by N(1, ``rate / (1 - rate)``) noise in training, as
    ``keras.layers.GaussianDropout``."""

    rate: float
    seed: int | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _check_rate(self, "rate", self.rate)
        x = self.cast(inputs)
        if not training or self.rate == 0:
            return x
        stddev = math.sqrt(self.rate / (1.0 - self.rate))
        return x * (1.0 + stddev * jax.random.normal(self.make_rng("dropout"), x.shape, x.dtype))


@register
class AlphaDropout(FlaxLayer):
    """Dropout that keeps SELU's mean and variance, as ``keras.layers.AlphaDropout``.

    In training, dropped entries become ``alpha' = -1.6733 * 1.0507`` and the result is
    ``a * x + b`` with ``a = ((1 - rate) * (1 + rate * alpha'^2)) ** -0.5`` and
    ``b = -a * alpha' * rate``. ``noise_shape`` entries of ``None`` take the input's.
    """

    rate: float
    noise_shape: Any = None
    seed: int | None = None

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        _check_rate(self, "rate", self.rate)
        x = self.cast(inputs)
        if not training or self.rate == 0:
            return x
        shape = x.shape if self.noise_shape is None else tuple(
            d if n is None else n for d, n in zip(x.shape, self.noise_shape))
        alpha_p = -_SELU_ALPHA * _SELU_SCALE
        kept = (jax.random.uniform(self.make_rng("dropout"), shape) >= self.rate).astype(x.dtype)
        a = ((1 - self.rate) * (1 + self.rate * alpha_p**2)) ** -0.5
        b = -a * alpha_p * self.rate
        return a * (x * kept + alpha_p * (1 - kept)) + b
