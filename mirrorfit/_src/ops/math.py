"""Keras 3's ``keras.ops`` math names (``keras/src/ops/math.py``) on ``jax.lax``, ``jax.ops``
and ``jax.scipy.special``.
"""

from mirrorfit._src.ops.wrapping import keras_op

erf = keras_op("erf", "jax.lax.erf", "x")
erfc = keras_op("erfc", "jax.scipy.special.erfc", "x")
erfinv = keras_op("erfinv", "jax.scipy.special.erfinv", "x")
gammainc = keras_op("gammainc", "jax.scipy.special.gammainc", "x1, x2")
logsumexp = keras_op("logsumexp", "jax.scipy.special.logsumexp", "x, axis=None, keepdims=False")
rsqrt = keras_op("rsqrt", "jax.lax.rsqrt", "x")
segment_max = keras_op("segment_max", "jax.ops.segment_max",
                       "data, segment_ids, num_segments=None, sorted=False")
segment_min = keras_op("segment_min", "jax.ops.segment_min",
                       "data, segment_ids, num_segments=None, sorted=False")
segment_prod = keras_op("segment_prod", "jax.ops.segment_prod",
                        "data, segment_ids, num_segments=None, sorted=False")
segment_sum = keras_op("segment_sum", "jax.ops.segment_sum",
                       "data, segment_ids, num_segments=None, sorted=False")
top_k = keras_op("top_k", "jax.lax.top_k", "x, k, sorted=True, is_stable=True",
                 drop=("sorted", "is_stable"))
