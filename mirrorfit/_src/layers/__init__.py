"""Level 3: Keras-compatible layers as ``flax.linen`` modules (public names in `mirrorfit.layers`)
and the Keras-style `Layer` you subclass, the functional graph and the Keras-style Sequential
module, layer configs, Keras' weight order and summary rows."""
