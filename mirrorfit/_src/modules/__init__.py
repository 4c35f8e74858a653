"""Level 4: what mirrorfit needs from any Flax module: the linen/NNX adapters, the
mixed-precision policy, per-example input specs and losses sown into ``"losses"``.
"""
