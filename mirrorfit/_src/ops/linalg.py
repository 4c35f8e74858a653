"""Keras 3's ``keras.ops`` linear-algebra names (``keras/src/ops/linalg.py``) on
``jax.numpy.linalg`` and ``jax.scipy.linalg``.
"""

from mirrorfit._src.ops.wrapping import keras_op

cholesky = keras_op("cholesky", "jax.numpy.linalg.cholesky", "x, upper=False")
det = keras_op("det", "jax.numpy.linalg.det", "x")
eig = keras_op("eig", "jax.numpy.linalg.eig", "x")
eigh = keras_op("eigh", "jax.numpy.linalg.eigh", "x")
inv = keras_op("inv", "jax.numpy.linalg.inv", "x")
jvp = keras_op("jvp", "jax.jvp", "fun, primals, tangents, has_aux=False")
lu_factor = keras_op("lu_factor", "jax.scipy.linalg.lu_factor", "x")
matrix_power = keras_op("matrix_power", "jax.numpy.linalg.matrix_power", "x, n")
matrix_rank = keras_op("matrix_rank", "jax.numpy.linalg.matrix_rank", "x, tol=None")
norm = keras_op("norm", "jax.numpy.linalg.norm", "x, ord=None, axis=None, keepdims=False")
pinv = keras_op("pinv", "jax.numpy.linalg.pinv", "x, rcond=None")
qr = keras_op("qr", "jax.numpy.linalg.qr", "x, mode='reduced'")
solve = keras_op("solve", "jax.numpy.linalg.solve", "a, b")
solve_triangular = keras_op("solve_triangular", "jax.scipy.linalg.solve_triangular",
                            "a, b, lower=False")
svd = keras_op("svd", "jax.numpy.linalg.svd", "x, full_matrices=True, compute_uv=True")
