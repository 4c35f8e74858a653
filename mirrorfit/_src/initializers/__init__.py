"""Level 2: Keras' initializers (`mirrorfit.initializers`) as ``(key, shape, dtype)`` callables
on ``jax.nn.initializers`` and ``jax.random``, with Keras' fans and defaults, and their names in
the registry `INITIALIZERS`.
"""
