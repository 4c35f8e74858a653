"""Dtype policies (mixed precision), as ``keras.mixed_precision``.

This module owns `Policy` (a name -> compute and variable dtypes), the global policy
(`set_global_policy`, `global_policy`) and `PolicyAdapter`, which applies a policy to any
Flax module from the outside, so the steps need not know about it:

* the master params keep the variable dtype (float32 under the ``"mixed_*"`` policies), so
  the optimizer state and the gradients the optimizer sees are float32 too;
* on every forward pass (inside the compiled step) the params and the floating inputs are
  cast to the compute dtype, and the outputs back to float32, before losses and metrics;
* the other collections (BatchNorm ``batch_stats``) are never cast: they keep the dtype
  they were created with (float32) however the module computes its updates;
* the weights of layers with ``autocast = False`` (``mf.layers.Embedding``'s table, as Keras'
  ``Embedding``) are not cast either: the layer casts the rows it reads to the compute dtype
  (`mirrorfit._src.layers.dtype_policy`), so no step converts a whole table, and the table's
  gradient is a float32 scatter-add, not a bf16 one converted whole.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers import dtype_policy
from mirrorfit._src.modules.adapters import ModuleAdapter

_POLICIES = {  # name -> (compute dtype, variable dtype), as keras.DTypePolicy._parse_name
    "float32": ("float32", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "mixed_float16": ("float16", "float32"),
    "bfloat16": ("bfloat16", "bfloat16"),
    "float16": ("float16", "float16"),
}


class Policy:
    """A dtype policy: the dtype a model computes in and the dtype its params are kept in.

    As ``keras.mixed_precision.Policy`` (``keras.DTypePolicy``): ``"mixed_bfloat16"`` and
    ``"mixed_float16"`` compute in bfloat16/float16 with float32 params; ``"bfloat16"``,
    ``"float16"`` and ``"float32"`` use that one dtype for both.

    Args:
        name: one of ``"float32"``, ``"mixed_bfloat16"``, ``"mixed_float16"``,
            ``"bfloat16"``, ``"float16"``; ``None``: the global policy's name.

    Raises:
        TypeError: if ``name`` is not a string.
        ValueError: for an unknown name.

    Example:
        >>> policy = mf.mixed_precision.Policy("mixed_bfloat16")
        >>> policy.compute_dtype, policy.variable_dtype
        ('bfloat16', 'float32')
    """

    def __init__(self, name: str | None = None):
        if name is None:
            name = global_policy().name
        if not isinstance(name, str):
            raise TypeError("name must be a string, such as 'mixed_bfloat16'. "
                            f"Received: name={name!r} (of type {type(name).__name__})")
        if name not in _POLICIES:
            raise ValueError(f"Unknown dtype policy. Expected one of {sorted(_POLICIES)}. "
                             f"Received: name={name!r}")
        self._name = name
        self._compute_dtype, self._variable_dtype = _POLICIES[name]

    @property
    def name(self) -> str:
        """The policy's name, e.g. ``"mixed_bfloat16"``."""
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype of params and floating inputs inside the forward pass."""
        return self._compute_dtype

    @property
    def variable_dtype(self) -> str:
        """The dtype the params (and so the optimizer state) are kept in."""
        return self._variable_dtype

    def get_config(self) -> dict[str, str]:
        """Keras' config: ``{"name": name}``."""
        return {"name": self._name}

    @classmethod
    def from_config(cls, config: dict[str, str]) -> Policy:
        """The policy of a `get_config` output."""
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and other._name == self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f'<Policy "{self._name}">'


_global_policy: Policy | None = None


def set_global_policy(policy: str | Policy) -> None:
    """Sets the policy of models created from now on, as ``keras.mixed_precision``'s.

    Args:
        policy: a `Policy` or its name (``"mixed_bfloat16"``, ``"mixed_float16"``, ...).

    Raises:
        TypeError: if ``policy`` is neither a string nor a `Policy`.
        ValueError: for an unknown name.

    Example:
        >>> mf.mixed_precision.set_global_policy("mixed_bfloat16")
        >>> mf.mixed_precision.global_policy()
        <Policy "mixed_bfloat16">
        >>> mf.mixed_precision.set_global_policy("float32")
    """
    global _global_policy
    _global_policy = get(policy)


def global_policy() -> Policy:
    """The policy models get unless given ``dtype_policy``; ``"float32"`` until set."""
    return _global_policy if _global_policy is not None else Policy("float32")


def get(policy: str | Policy | None) -> Policy:
    """``policy`` as a `Policy`; ``None`` gives the global policy.

    Raises:
        TypeError: if ``policy`` is neither ``None``, a string nor a `Policy`.
        ValueError: for an unknown name.
    """
    if policy is None:
        return global_policy()
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        return Policy(policy)
    raise TypeError("dtype_policy must be a policy name (e.g. 'mixed_bfloat16') or an "
                    f"mf.mixed_precision.Policy. Received: {policy!r} of type "
                    f"{type(policy).__name__}")


def cast_floating(tree: Any, dtype: Any) -> Any:
    """``tree`` with every floating leaf cast to ``dtype``; other leaves (ints, keys) kept."""
    return jax.tree.map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def _cast_params(params: Any, dtype: Any, uncast: frozenset[tuple[str, ...]]) -> Any:
    """`cast_floating` of ``params`` but for the leaves at the paths in ``uncast``."""
    def cast(path: Any, a: Any) -> Any:
        keys = tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)
        floating = jnp.issubdtype(a.dtype, jnp.floating)
        return a.astype(dtype) if floating and keys not in uncast else a
    return jax.tree_util.tree_map_with_path(cast, params)


def _keep_dtypes(new: Any, old: Any) -> Any:
    """``new`` with each floating leaf cast back to the dtype of the matching ``old`` leaf."""
    return jax.tree.map(
        lambda n, o: n.astype(o.dtype) if jnp.issubdtype(o.dtype, jnp.floating) else n,
        new, old)


class PolicyAdapter(ModuleAdapter):
    """A `ModuleAdapter` whose forward pass follows a `Policy` (see the module docstring).

    Args:
        inner: the module's own adapter.
        policy: the policy to apply.
    """

    def __init__(self, inner: ModuleAdapter, policy: Policy):
        self.inner = inner
        self.policy = policy
        # Paths of the params the forward pass leaves uncast; known from init.
        self._uncast: frozenset[tuple[str, ...]] | None = None

    def init(self, rng, x):
        with dtype_policy.uncast_weights() as uncast:
            params, model_state = self.inner.init(rng, x)
        self._uncast = frozenset(uncast)
        return cast_floating(params, self.policy.variable_dtype), model_state

    def _uncast_paths(self, rng: jax.Array, x: Any) -> frozenset[tuple[str, ...]]:
        """`dtype_policy.keep_uncast` 's paths, from an abstract init if none ran here."""
        if self._uncast is None:
            jax.eval_shape(self.init, *jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(jnp.shape(a), a.dtype), (rng, x)))
        assert self._uncast is not None  # set by init
        return self._uncast

    def apply_with_losses(self, params, model_state, x, *, train, rng):
        return self.apply_with_mask(params, model_state, x, train=train, rng=rng)[:3]

    def apply_with_mask(self, params, model_state, x, *, train, rng):
        compute = self.policy.compute_dtype
        cast = _cast_params(params, compute, self._uncast_paths(rng, x))
        with dtype_policy.autocast_scope(compute):
            y, new_state, losses, mask = self.inner.apply_with_mask(
                cast, model_state, cast_floating(x, compute), train=train, rng=rng)
        return (cast_floating(y, jnp.float32), _keep_dtypes(new_state, model_state),
                cast_floating(losses, jnp.float32), mask)

    def tabulate(self, rng, x):
        return self.inner.tabulate(rng, x)


def with_policy(adapter: ModuleAdapter, policy: Policy) -> ModuleAdapter:
    """``adapter`` under ``policy``: itself for ``"float32"``, else a `PolicyAdapter`."""
    return adapter if policy.name == "float32" else PolicyAdapter(adapter, policy)
