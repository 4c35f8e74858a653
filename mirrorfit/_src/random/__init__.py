"""Level 3: Keras 3's ``keras.random`` on ``jax.random``: the draws (`random`), `SeedGenerator`
and ``set_random_seed`` (`seed_generator`), with keys from the current forward pass's
call context, folded with the replica's index inside ``strategy.run``.
"""
