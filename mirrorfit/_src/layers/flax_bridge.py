"""The bridge between Keras-style `Layer` objects and the Flax modules of ``mirrorfit.layers``.

Both directions:

* `call_unbound`: a Flax layer called outside a Flax ``apply`` (as ``self.dense(x)`` inside a
  Keras-style layer's ``call``, or eagerly) keeps its collections in `Variable` s of its own,
  created on the first call from ``module.init``: ``params`` leaves are trainable, the others
  (BatchNorm's ``batch_stats``) are not and are assigned after a training call; values sown
  into ``"losses"`` become the layer's ``losses``. `flax_variables` lists them for tracking.
* `LayerNode`: a Keras-style layer (or a model used as a layer) inside a functional or
  Sequential model, which runs as a Flax module: its variables become that module's
  ``params`` (trainable) and ``non_trainable`` collection, initialised from the variables'
  values, and the layer runs in a stateless scope mapping its variables to them.
"""

from __future__ import annotations

import inspect
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import call_context, tracking
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

LOSSES = "losses"
NON_TRAINABLE = "non_trainable"
_BRIDGE = "_mf_bridge"  # {collection: {flat path: Variable}} on the Flax module


def _mode_kwargs(module: nn.Module, training: bool) -> dict[str, bool]:
    try:
        params = inspect.signature(type(module).__call__).parameters
    except (TypeError, ValueError):
        return {}
    return {"training": training} if "training" in params else {}


def _concrete_zeros(tree: Any) -> Any:
    """Zeros shaped like the arrays of ``tree`` (maybe tracers), computed now."""
    def zeros(leaf: Any) -> Any:
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            return jnp.zeros(leaf.shape, leaf.dtype)
        return leaf
    with jax.ensure_compile_time_eval():
        return jax.tree.map(zeros, tree)


def _create(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The module's collections as Variables, from ``module.init`` on zeros of the inputs'
    shapes (initialisers depend on shapes and the key only)."""
    rngs = {"params": call_context.init_rng(), "dropout": call_context.init_rng()}
    with jax.ensure_compile_time_eval():
        call_kwargs: dict[str, Any] = {**_concrete_zeros(kwargs), **_mode_kwargs(module, False)}
        variables = dict(module.init(rngs, *_concrete_zeros(args), **call_kwargs))
    variables.pop(LOSSES, None)
    bridge: dict[str, Any] = {}
    for collection, tree in variables.items():
        trainable = collection == "params"
        bridge[collection] = {
            path: Variable(leaf, trainable=trainable and getattr(module, "trainable", True),
                           name="/".join(path), aggregation="none" if trainable else "mean")
            for path, leaf in traverse_util.flatten_dict(tree).items()}
    owner = module.name or snake_case(type(module).__name__)
    for tree in bridge.values():
        for variable in tree.values():
            variable.path = f"{owner}/{variable.name}"
    return bridge


def flax_variables(module: nn.Module) -> list[tuple[tuple[str, ...], Variable]]:
    """The Variables standing for ``module`` 's collections (``[]`` before its first call)."""
    bridge = module.__dict__.get(_BRIDGE) or {}
    return [(path, variable) for tree in bridge.values() for path, variable in tree.items()]


def call_unbound(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Runs a Flax layer outside ``apply`` on Variables of its own; see the module docstring."""
    kwargs = dict(kwargs)
    training = kwargs.pop("training", None)
    context = call_context.current()
    if training is None:
        training = bool(context.training) if context is not None else False
    bridge = module.__dict__.get(_BRIDGE)
    if bridge is None:
        bridge = _create(module, args, kwargs)
        object.__setattr__(module, _BRIDGE, bridge)
    variables = {collection: traverse_util.unflatten_dict(
        {path: v.value for path, v in tree.items()}) for collection, tree in bridge.items()}
    mutable = [c for c in bridge if c != "params"] + [LOSSES] if training else [LOSSES]
    call_kwargs: dict[str, Any] = {**kwargs, **_mode_kwargs(module, training)}
    outputs, mutated = module.apply(variables, *args, rngs={"dropout": call_context.next_rng()},
                                    mutable=mutable, **call_kwargs)
    mutated = dict(mutated)
    losses = mutated.pop(LOSSES, {})
    for collection, tree in mutated.items():
        for path, value in traverse_util.flatten_dict(tree).items():
            bridge[collection][path].assign(value)
    penalties = list(module.__dict__.get("_mf_losses") or [])
    object.__setattr__(module, "_mf_losses", penalties + jax.tree.leaves(losses))
    return outputs


class LayerNode(nn.Module):
    """A Keras-style layer run as a Flax module inside a functional or Sequential model."""

    layer: Any

    @nn.compact
    def __call__(self, *args: Any, training: bool = False, **kwargs: Any) -> Any:
        layer = self.layer
        if self.is_initializing():
            with StatelessScope():  # builds lazily created weights; changes nothing
                jax.eval_shape(lambda *a: layer(*a, training=False, **kwargs), *args)
        mapping = []
        for path, variable in tracking.walk(layer):
            key = "/".join(path)
            if variable.trainable:
                value = self.param(key, lambda _, v=variable: v.value)
            else:
                value = self.variable(NON_TRAINABLE, key, lambda v=variable: v.value).value
            mapping.append((variable, value))
        rng = self.make_rng("dropout") if training and self.has_rng("dropout") else None
        with StatelessScope(mapping) as scope, call_context.call_context(training, rng):
            outputs = layer(*args, training=training, **kwargs)
            losses = list(layer.losses)
        keys = {id(v): "/".join(p) for p, v in tracking.walk(layer)}
        if self.is_mutable_collection(NON_TRAINABLE):
            for variable, value in scope.updates:
                if not variable.trainable and id(variable) in keys:
                    self.put_variable(NON_TRAINABLE, keys[id(variable)], value)
        for i, loss in enumerate(losses):
            self.sow(LOSSES, f"loss_{i}", loss)
        layer._clear_losses()
        return outputs


def write_back(layer: Any, params: Any, non_trainable: Any) -> None:
    """Assigns a `LayerNode` 's trained values (its ``params`` and ``non_trainable``
    collections) to the layer's variables, so the layer object shares the trained weights."""
    for path, variable in tracking.walk(layer):
        key = "/".join(path)
        tree = params if variable.trainable else non_trainable
        if tree is not None and key in tree:
            variable.assign(tree[key])
