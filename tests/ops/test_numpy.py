"""Every NumPy-like op of ``mf.ops`` against NumPy's function of the same name.

Each op runs on small float32 (or int32) inputs with Keras' arguments, once positional and
(for the options) once by name, and must match NumPy to ``RTOL``. A new op in the table
without a case here fails `test_every_numpy_op_has_a_case`.
"""

import numpy as np
import pytest

from mirrorfit import ops
from mirrorfit._src.ops import numpy as numpy_ops

RTOL, ATOL = 2e-5, 1e-6  # float32 elementwise functions of values in [0.1, 0.9]
RNG = np.random.default_rng(0)
X = RNG.uniform(0.1, 0.9, size=(2, 3)).astype(np.float32)
Y = RNG.uniform(0.1, 0.9, size=(2, 3)).astype(np.float32)
I1 = np.array([[1, 6, 3], [12, 5, 7]], dtype=np.int32)
I2 = np.array([[2, 4, 1], [8, 3, 2]], dtype=np.int32)
M = RNG.normal(size=(3, 3)).astype(np.float32)

UNARY = ["abs", "absolute", "angle", "arccos", "arcsin", "arcsinh", "arctan", "arctanh",
         "argsort", "cbrt", "ceil", "conj", "conjugate", "copy", "corrcoef", "cos", "cosh",
         "deg2rad", "exp", "exp2", "expm1", "fabs", "fliplr", "flipud", "floor", "i0", "imag",
         "isfinite", "isinf", "isnan", "isneginf", "isposinf", "isreal", "log", "log10",
         "log1p", "log2", "logical_not", "ndim", "negative", "nonzero", "rad2deg", "ravel",
         "real", "reciprocal", "sign", "signbit", "sin", "sinc", "sinh", "size", "sort", "sqrt",
         "square", "tan", "tanh", "transpose", "trunc"]
BINARY = ["add", "allclose", "append", "arctan2", "divide", "equal", "floor_divide", "fmax",
          "fmin", "fmod", "greater", "greater_equal", "heaviside", "hypot", "isclose", "kron",
          "less", "less_equal", "logaddexp", "logaddexp2", "logical_and", "logical_or",
          "logical_xor", "maximum", "minimum", "mod", "multiply", "nextafter", "not_equal",
          "outer", "power", "subtract", "true_divide", "vdot"]
INT_UNARY = {"bitwise_invert": np.invert, "bitwise_not": np.bitwise_not}
INT_BINARY = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
              "bitwise_xor": np.bitwise_xor, "bitwise_left_shift": np.left_shift,
              "left_shift": np.left_shift, "bitwise_right_shift": np.right_shift,
              "right_shift": np.right_shift, "gcd": np.gcd, "lcm": np.lcm}
# (x, axis=None, keepdims=False): checked with axis=1, keepdims=True and with the defaults.
REDUCTIONS = ["all", "amax", "amin", "any", "argmax", "argmin", "max", "mean", "median", "min",
              "nanargmax", "nanargmin", "nanmax", "nanmean", "nanmedian", "nanmin", "nanprod",
              "nanstd", "nansum", "nanvar", "prod", "ptp", "std", "sum", "var"]
# (x, axis=None, dtype=None)
CUMULATIVE = ["cumprod", "cumsum", "nancumprod", "nancumsum"]
WINDOWS = ["bartlett", "blackman", "hamming", "hanning"]

# name -> (Keras arguments, keyword arguments, the expected result)
OTHER = {
    "arange": ((1, 7, 2), {}, np.arange(1, 7, 2)),
    "arccosh": ((X + 1,), {}, np.arccosh(X + 1)),
    "argpartition": ((np.array([3, 1, 2]), 1), {}, np.array([1, 2, 0])),
    "array": (([1, 2],), {"dtype": "float32"}, np.array([1.0, 2.0])),
    "array_split": ((np.arange(5), 2), {}, np.array_split(np.arange(5), 2)),
    "average": ((X,), {"axis": 1, "weights": np.array([1.0, 2.0, 3.0], np.float32)},
                np.average(X, axis=1, weights=[1.0, 2.0, 3.0])),
    "bincount": ((np.array([0, 1, 1, 3]),), {"minlength": 5},
                 np.bincount([0, 1, 1, 3], minlength=5)),
    "broadcast_to": ((X[0], (2, 3)), {}, np.broadcast_to(X[0], (2, 3))),
    "clip": ((X, 0.3, 0.6), {}, np.clip(X, 0.3, 0.6)),
    "column_stack": (([X[0], Y[0]],), {}, np.column_stack([X[0], Y[0]])),
    "concatenate": (([X, Y], 1), {}, np.concatenate([X, Y], 1)),
    "correlate": ((X[0], Y[0]), {"mode": "full"}, np.correlate(X[0], Y[0], mode="full")),
    "count_nonzero": ((I1 > 4, 1), {}, np.count_nonzero(I1 > 4, axis=1)),
    "cross": ((X, Y), {}, np.cross(X, Y)),
    "diag": ((X, 1), {}, np.diag(X, 1)),
    "diagflat": ((X[0], -1), {}, np.diagflat(X[0], -1)),
    "diagonal": ((M, 1), {}, np.diagonal(M, 1)),
    "diff": ((X,), {"n": 2, "axis": 1}, np.diff(X, n=2, axis=1)),
    "digitize": ((X, np.array([0.3, 0.6], np.float32)), {},
                 np.digitize(X, np.array([0.3, 0.6], np.float32))),
    "dot": ((X, Y.T), {}, X @ Y.T),
    "dsplit": ((np.ones((1, 1, 4)), 2), {}, np.dsplit(np.ones((1, 1, 4)), 2)),
    "dstack": (([X, Y],), {}, np.dstack([X, Y])),
    "einsum": (("ij,kj->ik", X, Y), {}, np.einsum("ij,kj->ik", X, Y)),
    "expand_dims": ((X, -1), {}, np.expand_dims(X, -1)),
    "eye": ((2, 3, 1), {}, np.eye(2, 3, 1)),
    "flip": ((X, 1), {}, np.flip(X, 1)),
    "full": (((2, 2), 7.0), {}, np.full((2, 2), 7.0)),
    "full_like": ((X, 2.0), {}, np.full_like(X, 2.0)),
    "geomspace": ((1.0, 8.0, 4), {}, np.geomspace(1.0, 8.0, 4)),
    "get_item": ((X, (1, slice(1, None))), {}, X[1, 1:]),
    "histogram": ((X.ravel(),), {"bins": 3, "range": (0.0, 1.0)},
                  np.histogram(X.ravel(), bins=3, range=(0.0, 1.0))),
    "hsplit": ((np.ones((2, 4)), 2), {}, np.hsplit(np.ones((2, 4)), 2)),
    "hstack": (([X, Y],), {}, np.hstack([X, Y])),
    "identity": ((3,), {}, np.identity(3)),
    "inner": ((X, Y), {}, np.inner(X, Y)),
    "isin": ((I1, np.array([3, 5])), {"invert": True}, np.isin(I1, [3, 5], invert=True)),
    "kaiser": ((5, 2.0), {}, np.kaiser(5, 2.0)),
    "ldexp": ((X, I2), {}, np.ldexp(X, I2)),
    "linspace": ((0.0, 1.0, 5), {"endpoint": False}, np.linspace(0.0, 1.0, 5, endpoint=False)),
    "logspace": ((0.0, 2.0, 3), {}, np.logspace(0.0, 2.0, 3)),
    "matmul": ((X, Y.T), {}, X @ Y.T),
    "meshgrid": ((X[0], Y[0]), {"indexing": "ij"}, np.meshgrid(X[0], Y[0], indexing="ij")),
    "moveaxis": ((np.ones((2, 3, 4)), 0, -1), {}, np.ones((3, 4, 2))),
    "nan_to_num": ((np.array([np.nan, np.inf, 1.0], np.float32),), {"nan": -1.0, "posinf": 9.0},
                   np.array([-1.0, 9.0, 1.0])),
    "nanpercentile": ((X, 50.0), {"axis": 1}, np.nanpercentile(X, 50.0, axis=1)),
    "nanquantile": ((X, 0.25), {"axis": 0}, np.nanquantile(X, 0.25, axis=0)),
    "ones": (((2, 1),), {}, np.ones((2, 1))),
    "ones_like": ((I1,), {}, np.ones_like(I1)),
    "pad": ((X, ((1, 0), (0, 2))), {"constant_values": 5.0},
            np.pad(X, ((1, 0), (0, 2)), constant_values=5.0)),
    "percentile": ((X, 50.0, 1), {"keepdims": True}, np.percentile(X, 50.0, 1, keepdims=True)),
    "quantile": ((X, 0.75), {"method": "nearest"}, np.quantile(X, 0.75, method="nearest")),
    "repeat": ((X, 2, 1), {}, np.repeat(X, 2, 1)),
    "reshape": ((X, (3, 2)), {}, X.reshape(3, 2)),
    "roll": ((X, 1, 1), {}, np.roll(X, 1, 1)),
    "rot90": ((X,), {"k": 3}, np.rot90(X, k=3)),
    "round": ((X, 1), {}, np.round(X, 1)),
    "searchsorted": ((np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.5])), {"side": "right"},
                     np.searchsorted([1.0, 2.0, 3.0], [2.0, 2.5], side="right")),
    "select": (([X < 0.3, X > 0.6], [X, -X]), {"default": 1.0},
               np.select([X < 0.3, X > 0.6], [X, -X], default=1.0)),
    "slogdet": ((M,), {}, np.linalg.slogdet(M)),
    "split": ((X, 3, 1), {}, np.split(X, 3, 1)),
    "squeeze": ((X[None],), {"axis": 0}, X),
    "stack": (([X, Y], 1), {}, np.stack([X, Y], 1)),
    "swapaxes": ((np.ones((2, 3, 4)), 0, 2), {}, np.ones((4, 3, 2))),
    "take": ((X, np.array([2, 0]), 1), {}, np.take(X, [2, 0], 1)),
    "take_along_axis": ((X, np.array([[2], [0]]), 1), {},
                        np.take_along_axis(X, np.array([[2], [0]]), 1)),
    "tensordot": ((X, Y), {"axes": ([1], [1])}, np.tensordot(X, Y, axes=([1], [1]))),
    "tile": ((X, (2, 1)), {}, np.tile(X, (2, 1))),
    "trace": ((M, 1), {}, np.trace(M, 1)),
    "trapezoid": ((X,), {"dx": 0.5}, np.trapezoid(X, dx=0.5)),
    "tri": ((3, 2, 0), {}, np.tri(3, 2, 0)),
    "tril": ((M, -1), {}, np.tril(M, -1)),
    "triu": ((M,), {"k": 1}, np.triu(M, k=1)),
    "unique": ((np.array([3, 1, 3, 2]),), {"return_counts": True},
               np.unique([3, 1, 3, 2], return_counts=True)),
    "unravel_index": ((np.array([5, 1]), (2, 3)), {}, np.unravel_index([5, 1], (2, 3))),
    "vander": ((X[0],), {"N": 2, "increasing": True}, np.vander(X[0], N=2, increasing=True)),
    "vsplit": ((np.ones((4, 2)), 2), {}, np.vsplit(np.ones((4, 2)), 2)),
    "vstack": (([X, Y],), {}, np.vstack([X, Y])),
    "where": ((X > 0.5, X, Y), {}, np.where(X > 0.5, X, Y)),
    "zeros": (((3,),), {"dtype": "int32"}, np.zeros(3, np.int32)),
    "zeros_like": ((X,), {}, np.zeros_like(X)),
}
SHAPE_ONLY = {"empty": (((2, 3),), (2, 3)), "empty_like": ((X,), (2, 3))}


def _check(out, expected):
    if isinstance(expected, (tuple, list)):
        assert len(out) == len(expected)
        for o, e in zip(out, expected):
            _check(o, e)
        return
    out = np.asarray(out)
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_every_numpy_op_has_a_case():
    cases = {*UNARY, *BINARY, *INT_UNARY, *INT_BINARY, *REDUCTIONS, *CUMULATIVE, *WINDOWS,
             *OTHER, *SHAPE_ONLY, "vectorize"}
    table = {name for name, value in vars(numpy_ops).items()
             if getattr(value, "__wrapped__", None) is not None}
    assert table == cases


@pytest.mark.parametrize("name", UNARY)
def test_unary_op_matches_numpy(name):
    _check(getattr(ops, name)(X), getattr(np, name)(X))


@pytest.mark.parametrize("name", BINARY)
def test_binary_op_matches_numpy(name):
    _check(getattr(ops, name)(X, Y), getattr(np, name)(X, Y))
    _check(getattr(ops, name)(x1=X, x2=Y), getattr(np, name)(X, Y))


@pytest.mark.parametrize("name", sorted(INT_UNARY))
def test_integer_unary_op_matches_numpy(name):
    _check(getattr(ops, name)(I1), INT_UNARY[name](I1))


@pytest.mark.parametrize("name", sorted(INT_BINARY))
def test_integer_binary_op_matches_numpy(name):
    _check(getattr(ops, name)(I1, I2), INT_BINARY[name](I1, I2))


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_matches_numpy_positional_and_by_name(name):
    op, reference = getattr(ops, name), getattr(np, name)
    expected = reference(X, axis=1, keepdims=True)
    _check(op(X, 1, True), expected)
    _check(op(X, axis=1, keepdims=True), expected)
    _check(op(X), reference(X))


@pytest.mark.parametrize("name", CUMULATIVE)
def test_cumulative_op_matches_numpy(name):
    _check(getattr(ops, name)(X, 1), getattr(np, name)(X, axis=1))
    _check(getattr(ops, name)(X), getattr(np, name)(X))


@pytest.mark.parametrize("name", WINDOWS)
def test_window_matches_numpy(name):
    _check(getattr(ops, name)(5), getattr(np, name)(5))


@pytest.mark.parametrize("name", sorted(OTHER))
def test_op_matches_numpy(name):
    args, kwargs, expected = OTHER[name]
    _check(getattr(ops, name)(*args, **kwargs), expected)


@pytest.mark.parametrize("name", sorted(SHAPE_ONLY))
def test_uninitialized_op_has_shape(name):
    args, shape = SHAPE_ONLY[name]
    assert getattr(ops, name)(*args).shape == shape


def test_vectorize_matches_numpy():
    add_one = ops.vectorize(lambda a: a + 1, signature="()->()")
    _check(add_one(X), X + 1)
