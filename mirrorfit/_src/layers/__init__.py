"""Keras-compatible layers as ``flax.linen`` modules; the public names live in `mirrorfit.layers`."""
