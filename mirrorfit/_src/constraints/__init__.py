"""Level 2: Keras' weight constraints (`mirrorfit.constraints`), projections applied after
every optimizer update, their names in the registry `CONSTRAINTS`, and which layer argument
constrains which weight (`layer_constraints`).
"""
