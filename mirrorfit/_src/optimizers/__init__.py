"""Level 2: Keras' optimizers as Optax transformations: the base with its config, the update
rules, the options (clipping, weight decay, EMA, accumulation), the classes and names, the
loss-scale optimizer, and the functional ``mf.apply_gradients`` of a custom loop.
"""
