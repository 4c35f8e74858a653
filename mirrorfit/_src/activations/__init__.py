"""Level 2: Keras 3's activation functions (`mirrorfit.activations`) on ``jax.nn``, and their
names in the registry `ACTIVATIONS`; the layers read them by name.
"""
