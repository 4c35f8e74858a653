"""Helpers of the preprocessing-layer tests."""

import jax
import numpy as np


def apply(layer, x, *, training, seed=0):
    """``layer`` (a layer without weights) on ``x``, with ``training`` and a ``"dropout"`` key
    from ``seed``, as NumPy."""
    return np.asarray(layer.apply({}, x, training=training, rngs={"dropout": jax.random.key(seed)}))


def images(batch=4, height=4, width=4, channels=1):
    """``[batch, height, width, channels]`` float32 images of distinct values."""
    return np.arange(batch * height * width * channels, dtype=np.float32).reshape(
        batch, height, width, channels)
