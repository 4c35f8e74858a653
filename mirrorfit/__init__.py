"""mirrorfit: tf.keras compile/fit/evaluate/predict with MirroredStrategy semantics on JAX."""
