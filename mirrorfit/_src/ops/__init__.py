"""Level 2: Keras 3's ``keras.ops`` as a table of names on JAX functions, in Keras' modules
(`core`, `linalg`, `math`, `nn`, `numpy`; ``mirrorfit.ops`` re-exports them flat), and
`wrapping.keras_op`, which gives a JAX function Keras' parameters and reads `Variable` s.
"""
