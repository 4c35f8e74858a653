"""The math ops of ``mf.ops`` against NumPy and SciPy."""

import numpy as np
import pytest
from scipy import special

from mirrorfit import ops
from mirrorfit._src.ops import math

RTOL, ATOL = 1e-5, 1e-6  # float32 special functions of values in [0.1, 0.9]
X = np.random.default_rng(0).uniform(0.1, 0.9, size=(2, 3)).astype(np.float32)
DATA = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
SEGMENTS = np.array([0, 0, 2])
UNARY = {"erf": special.erf, "erfc": special.erfc, "erfinv": special.erfinv,
         "rsqrt": lambda x: 1 / np.sqrt(x)}
SEGMENT = {"segment_max": np.max, "segment_min": np.min, "segment_prod": np.prod,
           "segment_sum": np.sum}


def test_every_math_op_has_a_case():
    table = {name for name, value in vars(math).items()
             if getattr(value, "__wrapped__", None) is not None}
    assert table == {*UNARY, *SEGMENT, "gammainc", "logsumexp", "top_k"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_scipy(name):
    np.testing.assert_allclose(getattr(ops, name)(X), UNARY[name](X), rtol=RTOL, atol=ATOL)


def test_gammainc_matches_scipy():
    np.testing.assert_allclose(ops.gammainc(X + 1, X), special.gammainc(X + 1, X), rtol=RTOL)


def test_logsumexp_matches_numpy():
    expected = np.log(np.exp(X).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(ops.logsumexp(X, 1, True), expected, rtol=RTOL)
    np.testing.assert_allclose(ops.logsumexp(X), np.log(np.exp(X).sum()), rtol=RTOL)


@pytest.mark.parametrize("name", sorted(SEGMENT))
def test_segment_reduction_matches_numpy(name):
    out = getattr(ops, name)(DATA, SEGMENTS, 3, sorted=True)
    reduce = SEGMENT[name]
    np.testing.assert_allclose(out[0], reduce(DATA[:2], axis=0), rtol=RTOL)
    np.testing.assert_allclose(out[2], DATA[2], rtol=RTOL)
    assert out.shape == (3, 2)


def test_top_k_returns_the_largest_in_order():
    values, indices = ops.top_k(np.array([[1.0, 5.0, 3.0, 5.0]], np.float32), k=3)
    assert values.tolist() == [[5.0, 5.0, 3.0]] and indices.tolist() == [[1, 3, 2]]
