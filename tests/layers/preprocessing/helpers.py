"""Helpers of the preprocessing-layer tests."""

import functools

import jax
import numpy as np


@functools.partial(jax.jit, static_argnames=("layer", "training"))
def _apply(layer, x, key, training):
    return layer.apply({}, x, training=training, rngs={"dropout": key})


def apply(layer, x, *, training, seed=0):
    """``layer`` (a layer without weights) on ``x``, with ``training`` and a ``"dropout"`` key
    from ``seed``, as NumPy (jitted: one compile per layer config and shape)."""
    return np.asarray(_apply(layer, x, jax.random.key(seed), training))


def images(batch=4, height=4, width=4, channels=1):
    """``[batch, height, width, channels]`` float32 images of distinct values."""
    return np.arange(batch * height * width * channels, dtype=np.float32).reshape(
        batch, height, width, channels)
