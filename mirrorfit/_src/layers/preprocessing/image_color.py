"""Random pixel-value augmentation: RandomContrast, RandomBrightness, with Keras 3's factor
ranges and formulas.

They run on the device inside the step, on channels_last images ``[batch, height, width,
channels]`` (or one image ``[height, width, channels]``); in training each row draws its own
factor from the ``"dropout"`` RNG stream (per step and per replica), otherwise the layer is
the identity.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, register
from mirrorfit._src.layers.preprocessing import image_base
from mirrorfit._src.layers.preprocessing.image_base import factor_range, on_batch, uniform_rows


def _value_range(value_range: Any) -> tuple[float, float]:
    if (not isinstance(value_range, (tuple, list)) or len(value_range) != 2
            or not all(isinstance(v, (int, float)) for v in value_range)):
        raise ValueError("value_range must be a pair of numbers (the pixel values' [low, high]"
                         f", e.g. (0, 255) or (0, 1)). Received: value_range={value_range!r}")
    low, high = sorted(float(v) for v in value_range)
    return low, high


@register
class RandomContrast(FlaxLayer):
    """``clip((x - mean) * f + mean, *value_range)`` in training, with ``mean`` each image's
    per-channel mean over height and width, as ``keras.layers.RandomContrast``.

    ``factor`` within [0, 1]: ``(lo, hi)`` draws ``f`` from ``U(1 - lo, 1 + hi)`` per image.
    A number ``a`` gives Keras 3's range ``(0, a)``, so ``f`` is drawn from ``U(1, 1 + a)``.
    """

    factor: Any
    value_range: Any = (0, 255)
    seed: int | None = None

    def __post_init__(self) -> None:
        factor_range(self.factor, "factor", (0.0, 1.0))
        _value_range(self.value_range)
        super().__post_init__()

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, "RandomContrast")
        if not training:
            return x
        lower, upper = factor_range(self.factor, "factor", (0.0, 1.0))
        low, high = _value_range(self.value_range)

        def contrast(images: jax.Array) -> jax.Array:
            f = uniform_rows(self, images.shape[0], 1.0 - lower, 1.0 + upper)
            f = f[:, None, None, None].astype(images.dtype)
            mean = jnp.mean(images, axis=(1, 2), keepdims=True)
            return jnp.clip((images - mean) * f + mean, low, high)

        return on_batch(contrast, x)


@register
class RandomBrightness(FlaxLayer):
    """``clip(x + delta, *value_range)`` in training, one ``delta`` per image, as
    ``keras.layers.RandomBrightness``.

    ``factor`` within [-1, 1], a fraction of ``value_range``'s width: ``f`` draws ``delta``
    from ``U(-f, f) * (high - low)``, ``(lo, hi)`` from ``U(lo, hi) * (high - low)``.
    """

    factor: Any
    value_range: Any = (0, 255)
    seed: int | None = None

    def __post_init__(self) -> None:
        factor_range(self.factor, "factor")
        _value_range(self.value_range)
        super().__post_init__()

    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = image_base.to_float(self, inputs)
        image_base.check_rank(x, "RandomBrightness")
        if not training:
            return x
        lower, upper = factor_range(self.factor, "factor")
        low, high = _value_range(self.value_range)

        def brighten(images: jax.Array) -> jax.Array:
            delta = uniform_rows(self, images.shape[0], lower, upper) * (high - low)
            return jnp.clip(images + delta[:, None, None, None].astype(images.dtype), low, high)

        return on_batch(brighten, x)
