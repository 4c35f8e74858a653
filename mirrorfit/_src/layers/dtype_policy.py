"""A Keras-style layer's dtype policy: the dtype it computes in and the one its weights use.

As Keras 3's ``DTypePolicy``: ``"mixed_bfloat16"`` and ``"mixed_float16"`` compute in
bfloat16/float16 with float32 weights; a dtype name (``"float32"``, ``"bfloat16"``) uses
that dtype for both. A layer casts its floating inputs to the compute dtype
(`convert_inputs`, as ``DTypePolicy.convert_input``). A policy object such as
``mf.mixed_precision.Policy`` stands for its ``name``.

A model's policy (`mirrorfit._src.modules.mixed_precision.PolicyAdapter`) casts the params
before the forward pass, except the weights of layers that, as Keras' ``Embedding``
(``autocast = False``), read a few rows of a float32 table and cast those: such a layer names
each such weight while the model's params are created (`keep_uncast`, collected by
`uncast_weights`), and casts what it reads of it to the dtype of the policy's forward pass
(`autocast_dtype`, set by `autocast_scope`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
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


_AUTOCAST: contextvars.ContextVar[Any] = contextvars.ContextVar("mf_autocast", default=None)
_UNCAST: contextvars.ContextVar[set[tuple[str, ...]] | None] = contextvars.ContextVar(
    "mf_uncast", default=None)


@contextlib.contextmanager
def autocast_scope(dtype: Any) -> Iterator[None]:
    """Inside it, `autocast_dtype` is ``dtype``: a model's policy runs its forward pass so."""
    token = _AUTOCAST.set(dtype)
    try:
        yield
    finally:
        _AUTOCAST.reset(token)


def autocast_dtype() -> Any:
    """The compute dtype a model's policy casts its params to in this forward pass, or None."""
    return _AUTOCAST.get()


@contextlib.contextmanager
def uncast_weights() -> Iterator[set[tuple[str, ...]]]:
    """Collects the `keep_uncast` weights of the params created inside it, as paths in the
    ``"params"`` collection of the Flax module initialised (``("embedding", "embeddings")``);
    a layer that keeps its own variables (`mirrorfit._src.layers.flax_bridge`) runs its
    ``init`` outside (under ``uncast_weights`` of its own, whose paths are dropped)."""
    paths: set[tuple[str, ...]] = set()
    token = _UNCAST.set(paths)
    try:
        yield paths
    finally:
        _UNCAST.reset(token)


def keep_uncast(path: tuple[str, ...]) -> None:
    """Asks the policy not to cast the param at ``path`` (its module's path and name)."""
    paths = _UNCAST.get()
    if paths is not None:
        paths.add(path)
