"""A Keras-style layer's dtype policy: the dtype it computes in and the one its weights use.

As Keras 3's ``DTypePolicy``: ``"mixed_bfloat16"`` and ``"mixed_float16"`` compute in
bfloat16/float16 with float32 weights; a dtype name (``"float32"``, ``"bfloat16"``) uses
that dtype for both. A layer casts its floating inputs to the compute dtype
(`convert_inputs`, as ``DTypePolicy.convert_input``). A policy object such as
``mf.mixed_precision.Policy`` stands for its ``name``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
                  "mixed_bfloat16": jnp.bfloat16, "mixed_float16": jnp.float16,
                  "float64": jnp.float64}
"""Dtype policy names (Keras') -> the dtype layers compute in."""
MIXED = ("mixed_bfloat16", "mixed_float16")  # float32 weights, lower-precision compute


def policy_name(dtype: Any) -> str | None:
    """The policy name for a layer's ``dtype=`` (a name, a dtype, or a policy object with
    ``.name``); ``None`` for ``None``.

    Raises:
        ValueError: a name that is neither a policy nor a dtype.
    """
    if dtype is None:
        return None
    name = getattr(dtype, "name", dtype)
    if isinstance(name, str) and name in COMPUTE_DTYPES:
        return name
    try:
        return jnp.dtype(name).name
    except TypeError as err:
        raise ValueError(f"dtype must be a dtype policy name ({sorted(COMPUTE_DTYPES)}) or a "
                         f"dtype. Received: dtype={dtype!r}") from err


def compute_dtype(name: str | None) -> str:
    """The compute dtype of policy ``name`` (float32 for ``None``)."""
    name = name or "float32"
    return jnp.dtype(COMPUTE_DTYPES.get(name, name)).name


def variable_dtype(name: str | None) -> str:
    """The dtype weights are created in under policy ``name`` (float32 for the mixed ones)."""
    return "float32" if name in MIXED else compute_dtype(name)


def convert_inputs(tree: Any, dtype: str) -> Any:
    """``tree`` with its floating arrays of another dtype cast to ``dtype`` (Keras 3 casts
    float64 and bfloat16 inputs of a float32 layer too)."""
    target = jnp.dtype(dtype)

    def convert(x: Any) -> Any:
        if (isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating)
                and x.dtype != target):
            return jnp.asarray(x, target)
        return x
    return jax.tree.map(convert, tree)
