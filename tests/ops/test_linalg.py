"""The linear-algebra ops of ``mf.ops`` against NumPy and SciPy."""

import jax.numpy as jnp
import numpy as np
import scipy.linalg

from mirrorfit import ops
from mirrorfit._src.ops import linalg

RTOL, ATOL = 1e-4, 1e-5  # float32 factorizations of a well-conditioned 3 x 3 matrix
RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 3)).astype(np.float32)
SPD = (A @ A.T + 3 * np.eye(3)).astype(np.float32)
B = RNG.normal(size=(3, 2)).astype(np.float32)


def _close(out, expected):
    np.testing.assert_allclose(np.asarray(out), expected, rtol=RTOL, atol=ATOL)


def test_every_linalg_op_has_a_case():
    table = {name for name, value in vars(linalg).items()
             if getattr(value, "__wrapped__", None) is not None}
    assert table == {"cholesky", "det", "eig", "eigh", "inv", "jvp", "lu_factor",
                     "matrix_power", "matrix_rank", "norm", "pinv", "qr", "solve",
                     "solve_triangular", "svd"}


def test_matrix_functions_match_numpy():
    _close(ops.cholesky(SPD), np.linalg.cholesky(SPD))
    _close(ops.cholesky(SPD, upper=True), np.linalg.cholesky(SPD).T)
    _close(ops.det(A), np.linalg.det(A))
    _close(ops.inv(A), np.linalg.inv(A))
    _close(ops.matrix_power(A, 3), np.linalg.matrix_power(A, 3))
    assert int(ops.matrix_rank(np.outer(B[:, 0], B[:, 1]))) == 1
    _close(ops.norm(A, axis=1, keepdims=True), np.linalg.norm(A, axis=1, keepdims=True))
    _close(ops.norm(A, "fro"), np.linalg.norm(A, "fro"))
    _close(ops.pinv(B), np.linalg.pinv(B))
    _close(ops.solve(A, B), np.linalg.solve(A, B))
    lower = np.tril(SPD)
    _close(ops.solve_triangular(lower, B, lower=True), np.linalg.solve(lower, B))


def test_decompositions_rebuild_the_matrix():
    values, vectors = ops.eigh(SPD)
    _close(vectors @ np.diag(values) @ vectors.T, SPD)
    values, vectors = ops.eig(SPD)
    _close(np.real(vectors @ np.diag(values) @ np.linalg.inv(vectors)), SPD)
    q, r = ops.qr(A)
    _close(q @ r, A)
    q, r = ops.qr(B, mode="complete")
    assert q.shape == (3, 3) and r.shape == (3, 2)
    u, s, vt = ops.svd(B, full_matrices=False)
    _close(u @ np.diag(s) @ vt, B)
    _close(ops.svd(B, compute_uv=False), np.linalg.svd(B, compute_uv=False))
    lu, pivots = ops.lu_factor(A)
    expected_lu, expected_pivots = scipy.linalg.lu_factor(A)
    _close(lu, expected_lu)
    np.testing.assert_array_equal(pivots, expected_pivots)


def test_jvp_is_the_directional_derivative():
    primal, tangent = ops.jvp(jnp.sin, (jnp.asarray(A),), (jnp.ones_like(A),))
    _close(primal, np.sin(A))
    _close(tangent, np.cos(A))
