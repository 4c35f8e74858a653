"""Level 2: Keras' weight penalties (`mirrorfit.regularizers`: `L1`, `L2`, `L1L2`), sown into
the ``"losses"`` collection by the layers, and their names in the registry `REGULARIZERS`.
"""
