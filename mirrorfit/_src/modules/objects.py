"""`ObjectAdapter`: the pure ``init``/``apply`` of a Keras-style object model.

A subclassed `mirrorfit.Model` (or any `mirrorfit.layers.Layer`) owns `mirrorfit.Variable` s.
The steps see it through the same `ModuleAdapter` interface as a Flax module, as Keras 3's
JAX trainer sees its models through ``stateless_call``:

* ``params`` is ``{path: value}`` of the trainable variables, nested by attribute path
  (``{"encoder": {"dense": {"kernel": ...}}}``); ``model_state`` is
  ``{"non_trainable": {...}}`` for the others;
* ``apply`` runs the layer inside a `StatelessScope` mapping every variable to its value in
  those trees and a call context holding ``training`` and the step's key; it returns the
  new non-trainable values (BatchNorm statistics) in training, and the forward pass's
  ``losses`` (``add_loss`` values, weight regularizers, and what Flax layers sowed).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import traverse_util

from mirrorfit._src.modules.adapters import ModuleAdapter, call_inputs
from mirrorfit._src.variables import call_context, tracking
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

NON_TRAINABLE = "non_trainable"


def variable_trees(layer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(params, model_state)`` of ``layer`` 's current variable values, nested by path."""
    params: dict[tuple[str, ...], Any] = {}
    rest: dict[tuple[str, ...], Any] = {}
    for path, variable in tracking.walk(layer):
        (params if variable.trainable else rest)[path] = variable.value
    state = {NON_TRAINABLE: traverse_util.unflatten_dict(rest)} if rest else {}
    return traverse_util.unflatten_dict(params), state


def variable_pairs(layer: Any, params: Any, model_state: Any) -> list[tuple[Variable, Any]]:
    """``(variable, value)`` for every variable of ``layer`` found in the two trees."""
    flat = {("p", *k): v for k, v in traverse_util.flatten_dict(params or {}).items()}
    rest = (model_state or {}).get(NON_TRAINABLE, {})
    flat.update({("s", *k): v for k, v in traverse_util.flatten_dict(rest).items()})
    pairs = []
    for path, variable in tracking.walk(layer):
        key = ("p" if variable.trainable else "s", *path)
        if key in flat:
            pairs.append((variable, flat[key]))
    return pairs


class ObjectAdapter(ModuleAdapter):
    """Adapter for a Keras-style layer or subclassed model; see the module docstring.

    Args:
        layer: the object; calls go to ``call_fn(*inputs, training=...)``.
        call_fn: its Keras ``__call__`` (``mirrorfit.layers.Layer.__call__`` bound to it:
            a model's own ``__call__`` is the jitted eager entry point, not this).
        seed: seeds the weights built on the first batch.
    """

    jit_init = False  # building creates Variables: a Python side effect, not traceable

    def __init__(self, layer: Any, call_fn: Any, seed: int = 0):
        self.module = layer
        self._call = call_fn
        self._seed = seed

    def init(self, rng: jax.Array, x: Any) -> tuple[Any, Any]:
        del rng  # the weights come from the variables' initializers, seeded by ``seed``
        with call_context.init_seed(self._seed), StatelessScope():
            self._call(*call_inputs(x), training=False)
        self.module._clear_losses()
        # Copies: fit donates the state's buffers, which the variables must keep.
        return jax.tree.map(jnp.copy, variable_trees(self.module))

    def apply_with_losses(self, params, model_state, x, *, train, rng):
        pairs = variable_pairs(self.module, params, model_state)
        with StatelessScope(pairs) as scope, call_context.call_context(train, rng):
            outputs = self._call(*call_inputs(x), training=train)
            losses = list(self.module.losses)
        self.module._clear_losses()
        if not train or not model_state:
            return outputs, model_state, losses
        updated = {id(v): value for v, value in scope.updates}
        rest = {path: updated.get(id(variable), variable_value)
                for path, variable, variable_value in _non_trainable(self.module, model_state)}
        return outputs, {**model_state, NON_TRAINABLE: traverse_util.unflatten_dict(rest)}, losses

    def tabulate(self, rng: jax.Array, x: Any) -> str:
        del rng, x
        raise NotImplementedError("summary() of a subclassed model is printed by the model")


def _non_trainable(layer: Any, model_state: Any) -> list[tuple[tuple[str, ...], Variable, Any]]:
    flat = traverse_util.flatten_dict(model_state.get(NON_TRAINABLE, {}))
    return [(path, variable, flat[path]) for path, variable in tracking.walk(layer)
            if not variable.trainable and path in flat]
