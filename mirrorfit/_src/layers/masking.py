"""`Masking`: marks the timesteps whose features all equal ``mask_value`` as padding, as
``keras.layers.Masking`` (``keras/src/layers/core/masking.py``)."""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, register


@register
class Masking(FlaxLayer):
    """Masks the timesteps of ``inputs [batch, timesteps, features]`` whose features all
    equal ``mask_value``, as ``keras.layers.Masking``.

    The output is ``inputs`` with masked timesteps set to 0; its Keras mask, bool ``[batch,
    timesteps]`` (True: keep), reaches the next layers (`LSTM`, `GlobalAveragePooling1D`,
    ...) in a model.

    Args:
        mask_value: the padding value (default 0.0).

    Example:
        >>> x = np.array([[[1.0], [0.0]]])
        >>> np.asarray(mf.layers.Masking().compute_mask(x, None))
        array([[ True, False]])
    """

    supports_masking: ClassVar[bool] = True

    mask_value: float = 0.0

    def compute_mask(self, inputs: Any, mask: Any) -> jax.Array:
        """``any(inputs != mask_value, axis=-1)``, bool ``[batch, timesteps]``."""
        del mask
        return jnp.any(jnp.not_equal(inputs, self.mask_value), axis=-1)

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        keep = jnp.any(jnp.not_equal(x, self.mask_value), axis=-1, keepdims=True)
        return x * keep.astype(x.dtype)
