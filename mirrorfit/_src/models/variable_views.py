"""A Flax-module model's weights as `Variable` s: views of its training state.

A functional, Sequential or ``mf.Model(flax_module)`` model keeps its weights in its
`TrainState`. Used as a layer of a Keras-style model (``self.encoder = encoder``), or read
as ``model.trainable_variables`` in a custom loop, it shows them as `StateVariable` s: a
read returns the state's leaf (or, inside a stateless scope, the scope's value) and an
assignment outside a scope replaces the leaf. So an outer model trained with this one as
a layer writes its trained values straight into this model's state: the weights are
shared, not copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from flax import traverse_util

from mirrorfit._src.layers.graph import model_info
from mirrorfit._src.layers.graph.sequential import SequentialModule
from mirrorfit._src.variables import tracking
from mirrorfit._src.variables.variable import Variable

_FIELDS = ("params", "model_state")


class StateVariable(Variable):
    """One leaf of a model's ``params`` or ``model_state`` as a `Variable` (see the module
    docstring). Trainable when it is a param of a trainable layer."""

    def __init__(self, model: Any, field: str, key: tuple[str, ...], trainable: bool,
                 path: str):
        # No Variable.__init__: the value lives in the model's state.
        self._mf_model = model
        self._mf_field = field
        self._mf_key = key
        self.path = path
        self.name = path.rsplit("/", 1)[-1]
        self.trainable = trainable
        self.aggregation = "none" if field == "params" else "mean"
        self.regularizer = None
        self.constraint = None

    @property
    def _value(self) -> Any:  # type: ignore[override]
        tree = getattr(self._mf_model.state, self._mf_field)
        for part in self._mf_key:
            tree = tree[part]
        return tree

    @_value.setter
    def _value(self, value: Any) -> None:
        self._mf_model._assign_leaf(self._mf_field, self._mf_key, value)


def state_variables(model: Any) -> list[tuple[tuple[str, ...], StateVariable]]:
    """The views of ``model`` 's weights (``[]`` when unbuilt) in its ``get_weights`` order
    (Keras' for a layers model: layer by layer, kernel before bias, a nested model's in its
    own order); RNG key leaves (nnx) are not weights. Cached while the structure holds.

    Each view's ``path`` is Keras': ``"dense/kernel"`` for a layer of a functional model, the
    Sequential's name first for a layer of a Sequential (``"sequential/dense/kernel"``, as
    Keras builds those layers in its scope), and a Keras-style layer's or nested model's own
    variable path (``"encoder/dense/kernel"``), never the outer model's name."""
    state = model.state
    if state is None:
        return []
    structure = jax.tree.structure((state.params, state.model_state))
    cached = model.__dict__.get("_mf_views")
    if cached is not None and cached[0] == structure:
        return cached[1]
    frozen = {tuple(p) for p in model._frozen_paths()}
    paths = _keras_paths(model)
    views = []
    for field in _FIELDS:
        tree = getattr(state, field)
        if not isinstance(tree, dict):
            continue
        flat: dict[tuple[str, ...], Any] = traverse_util.flatten_dict(tree)
        for key, leaf in flat.items():
            if np.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                continue
            trainable = field == "params" and not any(key[:len(f)] == f for f in frozen)
            path = key if field == "params" else (field, *key)
            views.append((path, StateVariable(model, field, key, trainable,
                                              paths(field, key))))
    rank = {(_FIELDS[entry[0]], tuple(entry[1:])): i
            for i, entry in enumerate(model._weight_order())}
    views.sort(key=lambda view: rank.get((view[1]._mf_field, view[1]._mf_key), len(rank)))
    model.__dict__["_mf_views"] = (structure, views)
    return views


def _keras_paths(model: Any) -> Callable[[str, tuple[str, ...]], str]:
    """``(field, key) -> path`` of ``model`` 's state leaves (see `state_variables`)."""
    if not model_info.is_layers_model(model.module):
        return lambda field, key: "/".join(key if field == "params" else key[1:])
    inner = {}  # (layer name, joined attribute path) -> the nested variable's own path
    for name, layer in model_info.model_layers(model.module):
        if not isinstance(layer, nn.Module) and hasattr(layer, "__mf_variables__"):
            inner.update({(name, "/".join(p)): v.path for p, v in tracking.walk(layer)})
    prefix = f"{model.name}/" if isinstance(model.module, SequentialModule) else ""

    def path(field: str, key: tuple[str, ...]) -> str:
        key = key if field == "params" else key[1:]  # no collection name
        return inner.get(key[:2]) or prefix + "/".join(key)
    return path


def replaced_leaf(tree: dict[str, Any], key: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``tree`` (nested dicts) with the leaf at ``key`` replaced by ``value``."""
    if len(key) == 1:
        return {**tree, key[0]: value}
    return {**tree, key[0]: replaced_leaf(tree[key[0]], key[1:], value)}
