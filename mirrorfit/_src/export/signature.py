"""Input signatures: the shapes and dtypes an exported function accepts.

An input signature is a list with one entry per positional argument of the function; an
entry is a pytree (an array, or a tuple/list/dict of them) of leaves with ``.shape`` and
``.dtype`` (``jax.ShapeDtypeStruct``, NumPy or JAX arrays, ``tf.TensorSpec``). The leading
dimension of every leaf is the batch dimension; it is exported as one symbolic size shared by
all inputs (any batch size at serving time), whatever number or ``None`` the leaf has there.
Inside this package a signature is kept per example: the same pytree with the batch
dimension dropped (``Signature``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Signature = tuple[Any, ...]  # per positional argument: pytree of ShapeDtypeStruct [...]


def _example_leaf(leaf: Any) -> jax.ShapeDtypeStruct:
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is None or dtype is None or len(tuple(shape)) < 1:
        raise ValueError("Each input_signature leaf needs a .shape whose first dimension is "
                         "the batch and a .dtype, e.g. jax.ShapeDtypeStruct((1, 784), "
                         f"jnp.float32). Received: {leaf!r}")
    rest = tuple(shape)[1:]
    if not all(isinstance(d, (int, np.integer)) for d in rest):
        raise ValueError("Only the batch (first) dimension of an input_signature leaf may be "
                         f"unknown; give the others as ints. Received: shape={tuple(shape)}")
    return jax.ShapeDtypeStruct(tuple(int(d) for d in rest), _numeric_dtype(dtype, leaf))


NOT_NUMERIC = (
    "input_signature leaves must have a numeric or boolean dtype: an exported program takes "
    "arrays, and text is host-side work. Export the model that starts from the token ids "
    "(without TextVectorization/StringLookup) and apply those layers to the strings before "
    "calling the exported function. Received: dtype {dtype!r} in {leaf!r}")


def _numeric_dtype(dtype: Any, leaf: Any) -> np.dtype:
    """``dtype`` as a NumPy dtype (a ``tf.DType`` through ``as_numpy_dtype``).

    Raises:
        ValueError: a string, bytes or object dtype, or one NumPy does not know.
    """
    given = getattr(dtype, "as_numpy_dtype", dtype)
    try:
        numpy_dtype = np.dtype(given)
    except TypeError:
        numpy_dtype = None
    if numpy_dtype is None or not (jnp.issubdtype(numpy_dtype, jnp.number)
                                   or numpy_dtype == np.bool_):  # bfloat16's kind is "V"
        raise ValueError(NOT_NUMERIC.format(dtype=str(dtype), leaf=leaf))
    return numpy_dtype


def _is_leaf(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def from_input_signature(input_signature: Any) -> Signature:
    """The per-example `Signature` of a user's ``input_signature`` (a list, one per argument).

    Raises:
        TypeError: if ``input_signature`` is not a list or tuple.
        ValueError: for a leaf without a shape and dtype, or with unknown non-batch dims.
    """
    if not isinstance(input_signature, (list, tuple)):
        raise TypeError("input_signature must be a list with one entry per positional "
                        "argument of the function, e.g. [jax.ShapeDtypeStruct((1, 784), "
                        f"jnp.float32)]. Received: {type(input_signature).__name__}")
    return tuple(jax.tree.map(_example_leaf, arg, is_leaf=_is_leaf) for arg in input_signature)


def of_model(model: Any) -> Signature:
    """The `Signature` of a built model's inputs: one argument, or one per input of a model
    with several (its input spec is a tuple): ``serve(x1, x2)``, ONNX's ``input_0``,
    ``input_1``. A dict of inputs is one argument."""
    spec = model.input_spec
    return tuple(spec) if isinstance(spec, tuple) else (spec,)


def batched(signature: Signature, batch: Any, make: Callable[[tuple, Any], Any]) -> list[Any]:
    """The arguments' leaves as ``make((batch, *shape), dtype)``, in the signature's pytree."""
    return [jax.tree.map(lambda s: make((batch, *s.shape), s.dtype), arg) for arg in signature]
