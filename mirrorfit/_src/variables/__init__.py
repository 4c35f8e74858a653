"""Level 1: Keras' stateful `Variable` and the stateless scope that the compiled steps trace it in
(as Keras 3's ``backend/common/variables.py`` and ``stateless_scope.py``). Imports nothing
else from mirrorfit: placement on a strategy's devices arrives through `placement`.
"""
