"""Keras-compatible layers as ``flax.linen`` modules; public names in `mirrorfit.layers`."""
