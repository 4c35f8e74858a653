"""`Model` as a Keras object: its variables, subclassing, and use as a layer.

A `mirrorfit.Model` is a `mirrorfit.layers.Layer`, as in Keras. Two kinds share this face:

* a **subclassed** model (``class M(mf.Model)`` with ``__init__`` and ``call``) owns
  `mirrorfit.Variable` s through its attributes. Its `TrainState` is the working copy the
  compiled steps update: `ObjectModel._pull` copies changed variable values into it when
  ``fit``/``evaluate``/``predict``/``model(x)`` start, and `ObjectModel._push` writes the
  state back into the variables when ``fit`` ends (also after an error) and after every
  ``assign_state`` (``set_weights``, ``load_weights``, restores), as Keras 3's JAX trainer
  syncs its variables after ``fit``;
* a **Flax-module** model (functional, Sequential, ``mf.Model(module)``) keeps its weights in
  its state and shows them as `StateVariable` views. A functional model whose graph calls
  Keras-style layers or other models pulls their variables into its state and pushes the
  trained values back the same way, so a model used as a layer shares its weights.

Called inside a stateless scope or another layer's call (a custom ``train_step``,
``strategy.run``, `mirrorfit.value_and_grad`), ``model(x)`` runs on the scope's values, so it
is differentiable there; called under ``jax.grad`` outside one, it raises instead of
silently treating the weights as constants (under ``jax.jit`` alone it reads them as
constants, the weights of that moment).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util
from jax._src import core as jax_core

from mirrorfit._src.distribute import fsdp
from mirrorfit._src.layers import flax_bridge
from mirrorfit._src.layers.graph import model_info
from mirrorfit._src.layers.layer import Layer
from mirrorfit._src.metrics.metric import Metric
from mirrorfit._src.models.variable_views import replaced_leaf, state_variables
from mirrorfit._src.modules.objects import NON_TRAINABLE, variable_pairs, variable_trees
from mirrorfit._src.modules.sown_losses import loss_values
from mirrorfit._src.trainers.state import require_state
from mirrorfit._src.variables import call_context, stateless_scope, tracking
from mirrorfit._src.variables import variable as variables_lib

# Model's own attributes: never part of the variables a subclass's attributes hold (nor
# searched for them when set: ``fit`` sets ``state`` after every step).
INTERNAL = frozenset({"module", "_compile_config", "_layer_list", "_sown", "history",
                      "_adapter", "_trainer", "_strategy", "_state", "state",
                      "_creation_order"})
TRACED_CALL = (
    "model(x) was called under jax.grad outside a stateless scope: it would read the "
    "stored weights as constants, so gradients with respect to them would be all zeros. "
    "Differentiate with `loss, grads = mf.value_and_grad(loss_fn, "
    "model.trainable_variables)()`, compile with `strategy.run` or `@mf.function`, or use "
    "the pure `model.apply(params, x)` with params you pass in.")


_DIFFERENTIATING = ("JVPTrace", "LinearizeTrace")


def is_differentiating() -> bool:
    """Whether ``jax.grad`` (or ``jvp``/``linearize``) is tracing the current call."""
    trace = getattr(getattr(jax_core, "trace_ctx", None), "trace", None)
    return type(trace).__name__ in _DIFFERENTIATING


def in_object_context() -> bool:
    """Whether a stateless scope or a layer call is active (a traced object-model pass)."""
    return stateless_scope.in_stateless_scope() or call_context.current() is not None


class ObjectModel:
    """`Model` 's Keras-object face; see the module docstring. Mixed into `Model`."""

    module: Any
    strategy: Any  # owned by Model
    _adapter: Any  # owned by Model
    _check_input: Any  # owned by Model
    _mf_skip = INTERNAL

    @property
    def is_subclassed(self) -> bool:
        """Whether this model is a Keras-style subclass (``call`` defined, no Flax module)."""
        return self.module is self

    # -- variables ---------------------------------------------------------------------
    def __mf_variables__(self) -> list[tuple[Any, Any]]:
        if self.is_subclassed:
            return Layer.__mf_variables__(self)  # type: ignore[arg-type]
        return list(state_variables(self))

    def _mf_children(self) -> list[tuple[str, Any]]:
        # As Keras, metrics held as attributes (a train_step's trackers) are no layers and
        # their variables no weights: fit's step carries them apart (`keras_steps`).
        return [(name, value) for name, value in Layer._mf_children(self)  # type: ignore[arg-type]
                if not _is_metrics(value)]

    def _frozen_paths(self) -> list[tuple[str, ...]]:
        if model_info.is_layers_model(self.module):
            return model_info.non_trainable_paths(self.module)
        return []

    def _assign_leaf(self, field: str, key: tuple[str, ...], value: Any) -> None:
        state = require_state(self.state)
        tree = getattr(state, field)
        value = jnp.asarray(value, tree_leaf(tree, key).dtype)
        placed = (fsdp.place_params(self.strategy, value) if field == "params"
                  else self.strategy.replicate_arrays(value))
        self.state = state._replace(**{field: replaced_leaf(tree, key, placed)})

    def _object_nodes(self) -> list[tuple[str, Any]]:
        """``(name, layer)`` of the Keras-style layers and models a functional or Sequential
        model's graph calls."""
        if not model_info.is_layers_model(self.module):
            return []
        return [(name, layer) for name, layer in model_info.model_layers(self.module)
                if not isinstance(layer, nn.Module) and hasattr(layer, "__mf_variables__")]

    # -- the working copy: variables -> state -> variables ------------------------------
    def _pull(self) -> None:
        """Copies variable values that changed since the last sync into the state, each
        where the state holds it (a `trainable` flag changed since the state was split takes
        effect at the next ``compile``, as in Keras)."""
        state = self.__dict__.get("_mf_state")
        if state is None or self.__dict__.get("_mf_generation") == variables_lib.generation():
            return
        self.__dict__["_mf_generation"] = variables_lib.generation()
        carried = self._carried_variables()
        if carried and not all(_synced(self, v) for _, v in carried):
            flat = traverse_util.flatten_dict(state.other_variables or {})
            flat.update({path: self._carried_copy(v) for path, v in carried if path in flat})
            state = state._replace(other_variables=traverse_util.unflatten_dict(flat))
            self.state = state
            _remember(self, carried)
        groups = ([((), tracking.walk(self))] if self.is_subclassed else
                  [((name,), tracking.walk(layer)) for name, layer in self._object_nodes()])
        for prefix, pairs in groups:
            if all(_synced(self, v) for _, v in pairs):
                continue
            nested = self.is_subclassed  # a LayerNode keys its variables by "a/b" strings
            # The stored values (not a stateless scope's), copied and placed now even when
            # the state is read inside a trace (a symbolic call's shape inference): staged,
            # the copies would be tracers left in the state.
            values = {prefix + (path if nested else ("/".join(path),)): v._value
                      for path, v in pairs}
            with jax.ensure_compile_time_eval():
                values = _copied(values)  # fit donates the state; the variables keep theirs
                rest = dict(state.model_state)
                params = _refreshed(state.params, values)
                if NON_TRAINABLE in rest:
                    rest[NON_TRAINABLE] = _refreshed(rest[NON_TRAINABLE], values)
                state = state._replace(**fsdp.place_fields(
                    self.strategy, {"params": params, "model_state": rest}))
            self.state = state
            _remember(self, pairs)

    def _resplit(self) -> None:
        """Splits a subclassed model's state again by its variables' current ``trainable``
        flags (``compile`` calls it, before creating the optimizer state)."""
        state = self.__dict__.get("_mf_state")
        if state is None or not self.is_subclassed:
            return
        params, model_state = _copied(variable_trees(self))
        self.state = state._replace(**fsdp.place_fields(
            self.strategy, {"params": params, "model_state": model_state}))
        _remember(self, tracking.walk(self))

    def _push(self) -> None:
        """Writes the state's values into the variables (subclassed models and the
        Keras-style layers of a functional graph)."""
        state = self.__dict__.get("_mf_state")
        if state is None or self.__dict__.get("_mf_pushed") is state:  # already written
            return
        self.__dict__["_mf_pushed"] = state
        # Copies of the values written only: fit donates the state's buffers, which the
        # variables must not share. A model without variables (a plain Flax module) copies
        # nothing: ``fit`` calls this at its end, and each copy is one device op.
        carried = self._carried_variables()
        if carried:
            flat = traverse_util.flatten_dict(state.other_variables or {})
            for path, variable in carried:
                if path in flat:
                    variable._value = _copied(flat[path])
            _remember(self, carried)
        if self.is_subclassed:
            pairs = variable_pairs(self, state.params, state.model_state)
            for (target, _), value in zip(pairs, _copied([value for _, value in pairs])):
                target._value = value
            _remember(self, tracking.walk(self))
            return
        rest = state.model_state.get(NON_TRAINABLE, {})
        for name, layer in self._object_nodes():
            params, non_trainable = _copied((state.params.get(name), rest.get(name)))
            flax_bridge.write_back(layer, params, non_trainable)
            _remember(self, tracking.walk(layer))
            for inner in (layer, *getattr(layer, "_sublayers", list)()):
                if isinstance(inner, ObjectModel) and not inner.is_subclassed:
                    inner._push()  # on into the Keras-style layers (and models) it calls

    # -- the other variables fit's step carries --------------------------------------------
    def _carried_variables(self) -> list[tuple[tuple[str, ...], Any]]:
        """``(path, variable)`` of the variables ``fit`` 's step carries besides the
        weights and metric trackers (`TrainState.other_variables`), in the order found."""
        return list(self.__dict__.get("_mf_carried", {}).items())

    def _carry(self, variables: list[Any]) -> None:
        """Carries ``variables`` (found by the first trace of the model's own train_step:
        `mirrorfit._src.trainers.object_step.discovering`) in the state's
        ``other_variables``, keyed by their attribute path from the model (a GAN's
        ``("d_optimizer", "slot", "0")``). Weights of the model the state lacks (built
        inside the step) are left out, as before."""
        state = require_state(self.state)
        weights = {id(v) for _, v in tracking.walk(self)}
        named = {id(v): path for name, child in tracking.attribute_children(self)
                 for path, v in tracking.walk(child, (name,))}
        carried = dict(self.__dict__.get("_mf_carried", {}))
        taken = set(carried)
        new = {}
        for variable in variables:
            if id(variable) in weights:
                continue
            path = named.get(id(variable)) or tuple(str(variable.path).split("/"))
            while path in taken:
                path = (*path[:-1], path[-1] + "_")
            taken.add(path)
            carried[path] = new[path] = variable
        if not new:
            return
        flat = traverse_util.flatten_dict(state.other_variables or {})
        flat.update({path: self._carried_copy(v) for path, v in new.items()})
        self.__dict__["_mf_carried"] = carried
        self.state = state._replace(other_variables=traverse_util.unflatten_dict(flat))
        _remember(self, list(new.items()))

    def _carried_copy(self, variable: Any) -> Any:
        """A copy of ``variable`` 's value for the state: placed as it is when it lives on
        this model's devices (an optimizer slot split under ``shard_optimizer_state``),
        else mirrored."""
        value = variable._value  # the stored value, copied now even inside a trace
        with jax.ensure_compile_time_eval():
            if isinstance(value, jax.Array) and value.sharding.device_set == set(
                    self.strategy.devices):
                return jnp.copy(value)
            return self.strategy.replicate_arrays(value)

    # -- calls inside other objects' passes ----------------------------------------------
    def _object_call(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """``model(x)`` inside a stateless scope or a layer call (see the module docstring)."""
        if self.is_subclassed:
            return Layer.__call__(self, *args, **kwargs)  # type: ignore[arg-type]
        training = kwargs.pop("training", None)
        context = call_context.current()
        if training is None:
            training = bool(context.training) if context is not None else False
        x = args[0] if len(args) == 1 else tuple(args)
        if self.state is None:
            with jax.ensure_compile_time_eval():
                self._check_input(jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), x))
        views = state_variables(self)
        state = require_state(self.state)
        values = {(v._mf_field, v._mf_key): v.value for _, v in views}
        trees = {}
        for field in ("params", "model_state"):
            trees[field] = jax.tree_util.tree_map_with_path(
                lambda p, leaf, f=field: values.get(
                    (f, tuple(getattr(k, "key", k) for k in p)), leaf),
                getattr(state, field))
        y, new_state, losses = self._adapter.apply_with_losses(
            trees["params"], trees["model_state"], x, train=bool(training),
            rng=call_context.next_rng())
        if training:
            flat = dict(jax.tree_util.tree_flatten_with_path(new_state)[0])
            for _, view in views:
                if view._mf_field == "model_state":
                    key = tuple(jax.tree_util.DictKey(k) for k in view._mf_key)
                    if key in flat:
                        view.assign(flat[key])
        self._mf_losses = loss_values(losses)
        return y

    def _scope_losses(self) -> list[Any]:
        if self.is_subclassed:
            return Layer.losses.fget(self)  # type: ignore[attr-defined]
        return list(self._mf_losses)


def _is_metrics(value: Any) -> bool:
    """Whether ``value`` is a `Metric`, or a non-empty list, tuple or dict of them."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return bool(value) and all(isinstance(item, Metric) for item in value)
    return isinstance(value, Metric)


def tree_leaf(tree: Any, key: tuple[str, ...]) -> Any:
    for part in key:
        tree = tree[part]
    return tree


def _copied(tree: Any) -> Any:
    """New buffers for every array of ``tree``: a model's state and its variables never
    share one, since ``fit`` donates the state's buffers to each step."""
    return jax.tree.map(jnp.copy, tree)


def _refreshed(tree: Any, values: dict[tuple[str, ...], Any]) -> Any:
    """``tree`` (nested dicts) with the leaves at the paths of ``values`` replaced."""
    flat = traverse_util.flatten_dict(tree)
    return traverse_util.unflatten_dict({k: values.get(k, leaf) for k, leaf in flat.items()})


def _synced(model: Any, variable: Any) -> bool:
    remembered = model.__dict__.get("_mf_synced", {})
    return remembered.get(id(variable)) is variable._value


def _remember(model: Any, pairs: list[tuple[Any, Any]]) -> None:
    synced = model.__dict__.setdefault("_mf_synced", {})
    for _, variable in pairs:
        synced[id(variable)] = variable._value

