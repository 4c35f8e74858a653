"""Level 2: Keras' losses on ``optax.losses``: the `Loss` base and reductions, the
crossentropy and regression families, and their names and aliases.
"""
