"""Level 2: Keras-compatible layers as ``flax.linen`` modules (public names in `mirrorfit.layers`),
the functional graph and the Keras-style Sequential module, regularizers and initializers,
layer configs, Keras' weight order and summary rows."""
