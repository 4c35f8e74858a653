"""Level 1: argument checks and `MirrorfitWarning`, Keras' default names, and the one registry of
serializable names. Imports nothing else from mirrorfit.
"""
