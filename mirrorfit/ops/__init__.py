"""Keras 3's ``keras.ops``: ``from keras import ops`` becomes ``from mirrorfit import ops``.

A name table, not a reimplementation: each op is Keras' name and parameters on the JAX
function that computes it, as Keras' own JAX backend does. ``ops.softmax(x, axis=-1)`` is
``jax.nn.softmax``, ``ops.sum(x, axis=None, keepdims=False)`` is ``jax.numpy.sum``, and
``help(ops.sum)`` names the function. Ops take Keras' arguments, positional or by name,
with Keras' defaults, run wherever JAX runs (a layer's ``call``, ``jax.jit``,
``strategy.run``) and read `mirrorfit.Variable` arguments as their values. Results, dtypes
and errors are the JAX function's.

Differences from Keras:

- On the symbolic tensors of a functional model (``ops.reshape(inputs, (-1, 4))``, also
  Python operators and slicing), an op records a node of the model, as in Keras;
  ``shape``, ``ndim`` and ``dtype`` answer from the tensor (``ndim`` as an int).
- A Python list or tuple given as an op's array (``x``, ``x1``, ``x2``, ``y``) becomes an
  array, as in Keras (``ops.sum([1, 2, 3])``); other arguments take arrays or scalars
  (``ops.average(x, weights=[1, 2])`` raises ``jax.numpy``'s ``TypeError``).
- ``shape`` returns a tuple of ints (JAX shapes are static); ``dtype`` a NumPy dtype, which
  compares equal to Keras' name (``ops.dtype(x) == "float32"``).
- ``leaky_relu``'s slope defaults to Keras' 0.2, not JAX's 0.01.
- Arguments with no JAX counterpart are not accepted: ``sparse=`` (``one_hot``,
  ``bincount``, ``convert_to_tensor``), ``ragged=``, ``dot_product_attention``'s
  ``flash_attention=`` and ``attn_logits_soft_cap=``; ``pad`` takes ``constant_values=`` by
  name only. ``top_k``'s ``sorted=``/``is_stable=`` and ``unstack``'s ``num=`` are accepted
  and ignored, as in Keras' JAX backend.
- ``bincount`` and ``lu_factor`` take no batch axes; ``slice`` takes no ``-1`` sizes.
- Only the flat names: Keras' sub-namespaces ``ops.nn``, ``ops.numpy`` and ``ops.linalg``
  repeat them (``ops.nn.relu`` is ``ops.relu``).

Left out, as they have no direct JAX function:

- core: ``while_loop`` (Keras unpacks the loop variables into ``cond`` and ``body``),
  ``scatter``, ``scatter_update``, ``saturate_cast``, ``vectorized_map`` (use
  ``jax.vmap(f)(x)``), ``is_tensor``, ``custom_gradient``;
- math: ``in_top_k``, ``cdist``, ``extract_sequences``, ``logdet``, ``stft``, ``istft``,
  ``view_as_complex``, ``view_as_real``, and the FFTs (``fft``, ``fft2``, ``ifft2``,
  ``rfft``, ``irfft``), which take and return Keras' (real, imaginary) pairs;
- linalg: ``cholesky_inverse``, ``lstsq`` (Keras returns the solution only);
- nn: pooling and convolution (``max_pool``, ``average_pool``, ``adaptive_max_pool``,
  ``adaptive_average_pool``, ``conv``, ``depthwise_conv``, ``separable_conv``,
  ``conv_transpose``), the losses (``binary_crossentropy``, ``categorical_crossentropy``,
  ``sparse_categorical_crossentropy``, ``ctc_loss``, ``ctc_decode``), the normalizations
  (``moments``, ``batch_normalization``, ``normalize``, ``layer_normalization``,
  ``rms_normalization``), ``multi_hot``, ``soft_shrink``, ``hard_shrink``, ``tanh_shrink``,
  ``threshold``, ``sparsemax``, ``psnr``, ``polar``, ``unfold``, ``fold``,
  ``depth_to_space``, ``space_to_depth``;
- numpy: ``divide_no_nan``, ``view``;
- image: ``ops.image.elastic_transform`` (the others are in `mirrorfit.ops.image`).

Example:
    >>> from mirrorfit import ops
    >>> ops.softmax(jnp.array([[1.0, 1.0]]))
    Array([[0.5, 0.5]], dtype=float32)
    >>> ops.sum(jnp.ones((2, 3)), axis=1)
    Array([3., 3.], dtype=float32)
    >>> ops.shape(jnp.ones((2, 3)))
    (2, 3)
"""

from mirrorfit._src.ops.core import associative_scan as associative_scan
from mirrorfit._src.ops.core import cast as cast
from mirrorfit._src.ops.core import cond as cond
from mirrorfit._src.ops.core import convert_to_numpy as convert_to_numpy
from mirrorfit._src.ops.core import convert_to_tensor as convert_to_tensor
from mirrorfit._src.ops.core import dtype as dtype
from mirrorfit._src.ops.core import fori_loop as fori_loop
from mirrorfit._src.ops.core import map as map
from mirrorfit._src.ops.core import scan as scan
from mirrorfit._src.ops.core import shape as shape
from mirrorfit._src.ops.core import slice as slice
from mirrorfit._src.ops.core import slice_update as slice_update
from mirrorfit._src.ops.core import stop_gradient as stop_gradient
from mirrorfit._src.ops.core import switch as switch
from mirrorfit._src.ops.core import unstack as unstack
from mirrorfit._src.ops.linalg import cholesky as cholesky
from mirrorfit._src.ops.linalg import det as det
from mirrorfit._src.ops.linalg import eig as eig
from mirrorfit._src.ops.linalg import eigh as eigh
from mirrorfit._src.ops.linalg import inv as inv
from mirrorfit._src.ops.linalg import jvp as jvp
from mirrorfit._src.ops.linalg import lu_factor as lu_factor
from mirrorfit._src.ops.linalg import matrix_power as matrix_power
from mirrorfit._src.ops.linalg import matrix_rank as matrix_rank
from mirrorfit._src.ops.linalg import norm as norm
from mirrorfit._src.ops.linalg import pinv as pinv
from mirrorfit._src.ops.linalg import qr as qr
from mirrorfit._src.ops.linalg import solve as solve
from mirrorfit._src.ops.linalg import solve_triangular as solve_triangular
from mirrorfit._src.ops.linalg import svd as svd
from mirrorfit._src.ops.math import erf as erf
from mirrorfit._src.ops.math import erfc as erfc
from mirrorfit._src.ops.math import erfinv as erfinv
from mirrorfit._src.ops.math import gammainc as gammainc
from mirrorfit._src.ops.math import logsumexp as logsumexp
from mirrorfit._src.ops.math import rsqrt as rsqrt
from mirrorfit._src.ops.math import segment_max as segment_max
from mirrorfit._src.ops.math import segment_min as segment_min
from mirrorfit._src.ops.math import segment_prod as segment_prod
from mirrorfit._src.ops.math import segment_sum as segment_sum
from mirrorfit._src.ops.math import top_k as top_k
from mirrorfit._src.ops.nn import celu as celu
from mirrorfit._src.ops.nn import dot_product_attention as dot_product_attention
from mirrorfit._src.ops.nn import elu as elu
from mirrorfit._src.ops.nn import gelu as gelu
from mirrorfit._src.ops.nn import glu as glu
from mirrorfit._src.ops.nn import hard_sigmoid as hard_sigmoid
from mirrorfit._src.ops.nn import hard_silu as hard_silu
from mirrorfit._src.ops.nn import hard_swish as hard_swish
from mirrorfit._src.ops.nn import hard_tanh as hard_tanh
from mirrorfit._src.ops.nn import leaky_relu as leaky_relu
from mirrorfit._src.ops.nn import log_sigmoid as log_sigmoid
from mirrorfit._src.ops.nn import log_softmax as log_softmax
from mirrorfit._src.ops.nn import one_hot as one_hot
from mirrorfit._src.ops.nn import relu as relu
from mirrorfit._src.ops.nn import relu6 as relu6
from mirrorfit._src.ops.nn import selu as selu
from mirrorfit._src.ops.nn import sigmoid as sigmoid
from mirrorfit._src.ops.nn import silu as silu
from mirrorfit._src.ops.nn import softmax as softmax
from mirrorfit._src.ops.nn import softplus as softplus
from mirrorfit._src.ops.nn import softsign as softsign
from mirrorfit._src.ops.nn import sparse_plus as sparse_plus
from mirrorfit._src.ops.nn import sparse_sigmoid as sparse_sigmoid
from mirrorfit._src.ops.nn import squareplus as squareplus
from mirrorfit._src.ops.nn import swish as swish
from mirrorfit._src.ops.numpy import abs as abs
from mirrorfit._src.ops.numpy import absolute as absolute
from mirrorfit._src.ops.numpy import add as add
from mirrorfit._src.ops.numpy import all as all
from mirrorfit._src.ops.numpy import allclose as allclose
from mirrorfit._src.ops.numpy import amax as amax
from mirrorfit._src.ops.numpy import amin as amin
from mirrorfit._src.ops.numpy import angle as angle
from mirrorfit._src.ops.numpy import any as any
from mirrorfit._src.ops.numpy import append as append
from mirrorfit._src.ops.numpy import arange as arange
from mirrorfit._src.ops.numpy import arccos as arccos
from mirrorfit._src.ops.numpy import arccosh as arccosh
from mirrorfit._src.ops.numpy import arcsin as arcsin
from mirrorfit._src.ops.numpy import arcsinh as arcsinh
from mirrorfit._src.ops.numpy import arctan as arctan
from mirrorfit._src.ops.numpy import arctan2 as arctan2
from mirrorfit._src.ops.numpy import arctanh as arctanh
from mirrorfit._src.ops.numpy import argmax as argmax
from mirrorfit._src.ops.numpy import argmin as argmin
from mirrorfit._src.ops.numpy import argpartition as argpartition
from mirrorfit._src.ops.numpy import argsort as argsort
from mirrorfit._src.ops.numpy import array as array
from mirrorfit._src.ops.numpy import array_split as array_split
from mirrorfit._src.ops.numpy import average as average
from mirrorfit._src.ops.numpy import bartlett as bartlett
from mirrorfit._src.ops.numpy import bincount as bincount
from mirrorfit._src.ops.numpy import bitwise_and as bitwise_and
from mirrorfit._src.ops.numpy import bitwise_invert as bitwise_invert
from mirrorfit._src.ops.numpy import bitwise_left_shift as bitwise_left_shift
from mirrorfit._src.ops.numpy import bitwise_not as bitwise_not
from mirrorfit._src.ops.numpy import bitwise_or as bitwise_or
from mirrorfit._src.ops.numpy import bitwise_right_shift as bitwise_right_shift
from mirrorfit._src.ops.numpy import bitwise_xor as bitwise_xor
from mirrorfit._src.ops.numpy import blackman as blackman
from mirrorfit._src.ops.numpy import broadcast_to as broadcast_to
from mirrorfit._src.ops.numpy import cbrt as cbrt
from mirrorfit._src.ops.numpy import ceil as ceil
from mirrorfit._src.ops.numpy import clip as clip
from mirrorfit._src.ops.numpy import column_stack as column_stack
from mirrorfit._src.ops.numpy import concatenate as concatenate
from mirrorfit._src.ops.numpy import conj as conj
from mirrorfit._src.ops.numpy import conjugate as conjugate
from mirrorfit._src.ops.numpy import copy as copy
from mirrorfit._src.ops.numpy import corrcoef as corrcoef
from mirrorfit._src.ops.numpy import correlate as correlate
from mirrorfit._src.ops.numpy import cos as cos
from mirrorfit._src.ops.numpy import cosh as cosh
from mirrorfit._src.ops.numpy import count_nonzero as count_nonzero
from mirrorfit._src.ops.numpy import cross as cross
from mirrorfit._src.ops.numpy import cumprod as cumprod
from mirrorfit._src.ops.numpy import cumsum as cumsum
from mirrorfit._src.ops.numpy import deg2rad as deg2rad
from mirrorfit._src.ops.numpy import diag as diag
from mirrorfit._src.ops.numpy import diagflat as diagflat
from mirrorfit._src.ops.numpy import diagonal as diagonal
from mirrorfit._src.ops.numpy import diff as diff
from mirrorfit._src.ops.numpy import digitize as digitize
from mirrorfit._src.ops.numpy import divide as divide
from mirrorfit._src.ops.numpy import dot as dot
from mirrorfit._src.ops.numpy import dsplit as dsplit
from mirrorfit._src.ops.numpy import dstack as dstack
from mirrorfit._src.ops.numpy import einsum as einsum
from mirrorfit._src.ops.numpy import empty as empty
from mirrorfit._src.ops.numpy import empty_like as empty_like
from mirrorfit._src.ops.numpy import equal as equal
from mirrorfit._src.ops.numpy import exp as exp
from mirrorfit._src.ops.numpy import exp2 as exp2
from mirrorfit._src.ops.numpy import expand_dims as expand_dims
from mirrorfit._src.ops.numpy import expm1 as expm1
from mirrorfit._src.ops.numpy import eye as eye
from mirrorfit._src.ops.numpy import fabs as fabs
from mirrorfit._src.ops.numpy import flip as flip
from mirrorfit._src.ops.numpy import fliplr as fliplr
from mirrorfit._src.ops.numpy import flipud as flipud
from mirrorfit._src.ops.numpy import floor as floor
from mirrorfit._src.ops.numpy import floor_divide as floor_divide
from mirrorfit._src.ops.numpy import fmax as fmax
from mirrorfit._src.ops.numpy import fmin as fmin
from mirrorfit._src.ops.numpy import fmod as fmod
from mirrorfit._src.ops.numpy import full as full
from mirrorfit._src.ops.numpy import full_like as full_like
from mirrorfit._src.ops.numpy import gcd as gcd
from mirrorfit._src.ops.numpy import geomspace as geomspace
from mirrorfit._src.ops.numpy import get_item as get_item
from mirrorfit._src.ops.numpy import greater as greater
from mirrorfit._src.ops.numpy import greater_equal as greater_equal
from mirrorfit._src.ops.numpy import hamming as hamming
from mirrorfit._src.ops.numpy import hanning as hanning
from mirrorfit._src.ops.numpy import heaviside as heaviside
from mirrorfit._src.ops.numpy import histogram as histogram
from mirrorfit._src.ops.numpy import hsplit as hsplit
from mirrorfit._src.ops.numpy import hstack as hstack
from mirrorfit._src.ops.numpy import hypot as hypot
from mirrorfit._src.ops.numpy import i0 as i0
from mirrorfit._src.ops.numpy import identity as identity
from mirrorfit._src.ops.numpy import imag as imag
from mirrorfit._src.ops.numpy import inner as inner
from mirrorfit._src.ops.numpy import isclose as isclose
from mirrorfit._src.ops.numpy import isfinite as isfinite
from mirrorfit._src.ops.numpy import isin as isin
from mirrorfit._src.ops.numpy import isinf as isinf
from mirrorfit._src.ops.numpy import isnan as isnan
from mirrorfit._src.ops.numpy import isneginf as isneginf
from mirrorfit._src.ops.numpy import isposinf as isposinf
from mirrorfit._src.ops.numpy import isreal as isreal
from mirrorfit._src.ops.numpy import kaiser as kaiser
from mirrorfit._src.ops.numpy import kron as kron
from mirrorfit._src.ops.numpy import lcm as lcm
from mirrorfit._src.ops.numpy import ldexp as ldexp
from mirrorfit._src.ops.numpy import left_shift as left_shift
from mirrorfit._src.ops.numpy import less as less
from mirrorfit._src.ops.numpy import less_equal as less_equal
from mirrorfit._src.ops.numpy import linspace as linspace
from mirrorfit._src.ops.numpy import log as log
from mirrorfit._src.ops.numpy import log1p as log1p
from mirrorfit._src.ops.numpy import log2 as log2
from mirrorfit._src.ops.numpy import log10 as log10
from mirrorfit._src.ops.numpy import logaddexp as logaddexp
from mirrorfit._src.ops.numpy import logaddexp2 as logaddexp2
from mirrorfit._src.ops.numpy import logical_and as logical_and
from mirrorfit._src.ops.numpy import logical_not as logical_not
from mirrorfit._src.ops.numpy import logical_or as logical_or
from mirrorfit._src.ops.numpy import logical_xor as logical_xor
from mirrorfit._src.ops.numpy import logspace as logspace
from mirrorfit._src.ops.numpy import matmul as matmul
from mirrorfit._src.ops.numpy import max as max
from mirrorfit._src.ops.numpy import maximum as maximum
from mirrorfit._src.ops.numpy import mean as mean
from mirrorfit._src.ops.numpy import median as median
from mirrorfit._src.ops.numpy import meshgrid as meshgrid
from mirrorfit._src.ops.numpy import min as min
from mirrorfit._src.ops.numpy import minimum as minimum
from mirrorfit._src.ops.numpy import mod as mod
from mirrorfit._src.ops.numpy import moveaxis as moveaxis
from mirrorfit._src.ops.numpy import multiply as multiply
from mirrorfit._src.ops.numpy import nan_to_num as nan_to_num
from mirrorfit._src.ops.numpy import nanargmax as nanargmax
from mirrorfit._src.ops.numpy import nanargmin as nanargmin
from mirrorfit._src.ops.numpy import nancumprod as nancumprod
from mirrorfit._src.ops.numpy import nancumsum as nancumsum
from mirrorfit._src.ops.numpy import nanmax as nanmax
from mirrorfit._src.ops.numpy import nanmean as nanmean
from mirrorfit._src.ops.numpy import nanmedian as nanmedian
from mirrorfit._src.ops.numpy import nanmin as nanmin
from mirrorfit._src.ops.numpy import nanpercentile as nanpercentile
from mirrorfit._src.ops.numpy import nanprod as nanprod
from mirrorfit._src.ops.numpy import nanquantile as nanquantile
from mirrorfit._src.ops.numpy import nanstd as nanstd
from mirrorfit._src.ops.numpy import nansum as nansum
from mirrorfit._src.ops.numpy import nanvar as nanvar
from mirrorfit._src.ops.numpy import ndim as ndim
from mirrorfit._src.ops.numpy import negative as negative
from mirrorfit._src.ops.numpy import nextafter as nextafter
from mirrorfit._src.ops.numpy import nonzero as nonzero
from mirrorfit._src.ops.numpy import not_equal as not_equal
from mirrorfit._src.ops.numpy import ones as ones
from mirrorfit._src.ops.numpy import ones_like as ones_like
from mirrorfit._src.ops.numpy import outer as outer
from mirrorfit._src.ops.numpy import pad as pad
from mirrorfit._src.ops.numpy import percentile as percentile
from mirrorfit._src.ops.numpy import power as power
from mirrorfit._src.ops.numpy import prod as prod
from mirrorfit._src.ops.numpy import ptp as ptp
from mirrorfit._src.ops.numpy import quantile as quantile
from mirrorfit._src.ops.numpy import rad2deg as rad2deg
from mirrorfit._src.ops.numpy import ravel as ravel
from mirrorfit._src.ops.numpy import real as real
from mirrorfit._src.ops.numpy import reciprocal as reciprocal
from mirrorfit._src.ops.numpy import repeat as repeat
from mirrorfit._src.ops.numpy import reshape as reshape
from mirrorfit._src.ops.numpy import right_shift as right_shift
from mirrorfit._src.ops.numpy import roll as roll
from mirrorfit._src.ops.numpy import rot90 as rot90
from mirrorfit._src.ops.numpy import round as round
from mirrorfit._src.ops.numpy import searchsorted as searchsorted
from mirrorfit._src.ops.numpy import select as select
from mirrorfit._src.ops.numpy import sign as sign
from mirrorfit._src.ops.numpy import signbit as signbit
from mirrorfit._src.ops.numpy import sin as sin
from mirrorfit._src.ops.numpy import sinc as sinc
from mirrorfit._src.ops.numpy import sinh as sinh
from mirrorfit._src.ops.numpy import size as size
from mirrorfit._src.ops.numpy import slogdet as slogdet
from mirrorfit._src.ops.numpy import sort as sort
from mirrorfit._src.ops.numpy import split as split
from mirrorfit._src.ops.numpy import sqrt as sqrt
from mirrorfit._src.ops.numpy import square as square
from mirrorfit._src.ops.numpy import squeeze as squeeze
from mirrorfit._src.ops.numpy import stack as stack
from mirrorfit._src.ops.numpy import std as std
from mirrorfit._src.ops.numpy import subtract as subtract
from mirrorfit._src.ops.numpy import sum as sum
from mirrorfit._src.ops.numpy import swapaxes as swapaxes
from mirrorfit._src.ops.numpy import take as take
from mirrorfit._src.ops.numpy import take_along_axis as take_along_axis
from mirrorfit._src.ops.numpy import tan as tan
from mirrorfit._src.ops.numpy import tanh as tanh
from mirrorfit._src.ops.numpy import tensordot as tensordot
from mirrorfit._src.ops.numpy import tile as tile
from mirrorfit._src.ops.numpy import trace as trace
from mirrorfit._src.ops.numpy import transpose as transpose
from mirrorfit._src.ops.numpy import trapezoid as trapezoid
from mirrorfit._src.ops.numpy import tri as tri
from mirrorfit._src.ops.numpy import tril as tril
from mirrorfit._src.ops.numpy import triu as triu
from mirrorfit._src.ops.numpy import true_divide as true_divide
from mirrorfit._src.ops.numpy import trunc as trunc
from mirrorfit._src.ops.numpy import unique as unique
from mirrorfit._src.ops.numpy import unravel_index as unravel_index
from mirrorfit._src.ops.numpy import vander as vander
from mirrorfit._src.ops.numpy import var as var
from mirrorfit._src.ops.numpy import vdot as vdot
from mirrorfit._src.ops.numpy import vectorize as vectorize
from mirrorfit._src.ops.numpy import vsplit as vsplit
from mirrorfit._src.ops.numpy import vstack as vstack
from mirrorfit._src.ops.numpy import where as where
from mirrorfit._src.ops.numpy import zeros as zeros
from mirrorfit._src.ops.numpy import zeros_like as zeros_like
from mirrorfit.ops import image as image

__all__ = [
    "abs", "absolute", "add", "all", "allclose", "amax", "amin", "angle", "any", "append",
    "arange", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh",
    "argmax", "argmin", "argpartition", "argsort", "array", "array_split", "associative_scan",
    "average", "bartlett", "bincount", "bitwise_and", "bitwise_invert", "bitwise_left_shift",
    "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "blackman",
    "broadcast_to", "cast", "cbrt", "ceil", "celu", "cholesky", "clip", "column_stack",
    "concatenate", "cond", "conj", "conjugate", "convert_to_numpy", "convert_to_tensor", "copy",
    "corrcoef", "correlate", "cos", "cosh", "count_nonzero", "cross", "cumprod", "cumsum",
    "deg2rad", "det", "diag", "diagflat", "diagonal", "diff", "digitize", "divide", "dot",
    "dot_product_attention", "dsplit", "dstack", "dtype", "eig", "eigh", "einsum", "elu",
    "empty", "empty_like", "equal", "erf", "erfc", "erfinv", "exp", "exp2", "expand_dims",
    "expm1", "eye", "fabs", "flip", "fliplr", "flipud", "floor", "floor_divide", "fmax", "fmin",
    "fmod", "fori_loop", "full", "full_like", "gammainc", "gcd", "gelu", "geomspace",
    "get_item", "glu", "greater", "greater_equal", "hamming", "hanning", "hard_sigmoid",
    "hard_silu", "hard_swish", "hard_tanh", "heaviside", "histogram", "hsplit", "hstack",
    "hypot", "i0", "identity", "imag", "inner", "inv", "isclose", "isfinite", "isin", "isinf",
    "isnan", "isneginf", "isposinf", "isreal", "jvp", "kaiser", "kron", "lcm", "ldexp",
    "leaky_relu", "left_shift", "less", "less_equal", "linspace", "log", "log1p", "log2",
    "log10", "log_sigmoid", "log_softmax", "logaddexp", "logaddexp2", "logical_and",
    "logical_not", "logical_or", "logical_xor", "logspace", "logsumexp", "lu_factor", "map",
    "matmul", "matrix_power", "matrix_rank", "max", "maximum", "mean", "median", "meshgrid",
    "min", "minimum", "mod", "moveaxis", "multiply", "nan_to_num", "nanargmax", "nanargmin",
    "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmedian", "nanmin", "nanpercentile",
    "nanprod", "nanquantile", "nanstd", "nansum", "nanvar", "ndim", "negative", "nextafter",
    "nonzero", "norm", "not_equal", "one_hot", "ones", "ones_like", "outer", "pad",
    "percentile", "pinv", "power", "prod", "ptp", "qr", "quantile", "rad2deg", "ravel", "real",
    "reciprocal", "relu", "relu6", "repeat", "reshape", "right_shift", "roll", "rot90", "round",
    "rsqrt", "scan", "searchsorted", "segment_max", "segment_min", "segment_prod",
    "segment_sum", "select", "selu", "shape", "sigmoid", "sign", "signbit", "silu", "sin",
    "sinc", "sinh", "size", "slice", "slice_update", "slogdet", "softmax", "softplus",
    "softsign", "solve", "solve_triangular", "sort", "sparse_plus", "sparse_sigmoid", "split",
    "sqrt", "square", "squareplus", "squeeze", "stack", "std", "stop_gradient", "subtract",
    "sum", "svd", "swapaxes", "swish", "switch", "take", "take_along_axis", "tan", "tanh",
    "tensordot", "tile", "top_k", "trace", "transpose", "trapezoid", "tri", "tril", "triu",
    "true_divide", "trunc", "unique", "unravel_index", "unstack", "vander", "var", "vdot",
    "vectorize", "vsplit", "vstack", "where", "zeros", "zeros_like",
]
