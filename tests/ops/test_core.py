"""The core ops of ``mf.ops`` (conversions, shapes, control flow) against NumPy and Python
loops."""

import jax
import jax.numpy as jnp
import numpy as np

import mirrorfit as mf
from mirrorfit import ops
from mirrorfit._src.ops import core

X = np.arange(12, dtype=np.float32).reshape(3, 4)
CASES = {"associative_scan", "cast", "cond", "convert_to_numpy", "convert_to_tensor", "dtype",
         "fori_loop", "map", "scan", "shape", "slice", "slice_update", "stop_gradient",
         "switch", "unstack"}


def test_every_core_op_has_a_case():
    table = {name for name, value in vars(core).items()
             if getattr(value, "__wrapped__", None) is not None}
    assert table == CASES


def test_conversions():
    v = mf.Variable(X, name="v")
    out = ops.convert_to_numpy(v)
    assert isinstance(out, np.ndarray) and out.tolist() == X.tolist()
    tensor = ops.convert_to_tensor([1, 2], dtype="float32")
    assert isinstance(tensor, jax.Array) and tensor.dtype == jnp.float32
    assert ops.cast(X, "int32").dtype == jnp.int32
    assert ops.cast(v, "bfloat16").dtype == jnp.bfloat16


def test_shape_and_dtype():
    assert ops.shape(X) == (3, 4) and isinstance(ops.shape(jnp.asarray(X)), tuple)
    assert ops.shape(mf.Variable(X)) == (3, 4)
    assert ops.dtype(X) == "float32" and ops.dtype(jnp.ones(2, jnp.int32)) == "int32"


def test_slices():
    np.testing.assert_array_equal(ops.slice(X, (1, 2), (2, 2)), X[1:3, 2:4])
    updated = ops.slice_update(X, (0, 1), np.zeros((2, 2), np.float32))
    expected = X.copy()
    expected[0:2, 1:3] = 0
    np.testing.assert_array_equal(updated, expected)
    rows = ops.unstack(X, axis=1)
    assert len(rows) == 4 and rows[2].tolist() == X[:, 2].tolist()


def test_stop_gradient_blocks_the_gradient():
    grad = jax.grad(lambda x: jnp.sum(x * ops.stop_gradient(x)))(jnp.asarray(X))
    np.testing.assert_array_equal(grad, X)


def test_control_flow_matches_python():
    assert float(ops.cond(jnp.array(True), lambda: 1.0, lambda: 2.0)) == 1.0
    assert float(ops.cond(False, lambda: 1.0, lambda: 2.0)) == 2.0
    assert float(ops.switch(2, [lambda: 0.0, lambda: 1.0, lambda: 2.0])) == 2.0
    assert float(ops.fori_loop(0, 5, lambda i, total: total + i, 0.0)) == 10.0
    np.testing.assert_array_equal(ops.map(lambda row: row.sum(), X), X.sum(1))
    carry, ys = ops.scan(lambda c, x: (c + x, c * x), 0.0, jnp.arange(4.0))
    assert float(carry) == 6.0 and ys.tolist() == [0.0, 0.0, 2.0, 9.0]
    np.testing.assert_array_equal(ops.associative_scan(jnp.add, X, axis=1), np.cumsum(X, 1))
    reversed_sum = ops.associative_scan(jnp.add, X[0], reverse=True)
    np.testing.assert_array_equal(reversed_sum, np.cumsum(X[0][::-1])[::-1])
