"""The bridge between Keras-style `Layer` objects and the Flax modules of ``mirrorfit.layers``.

Both directions:

* `call_unbound`: a Flax layer called outside a Flax ``apply`` (as ``self.dense(x)`` inside a
  Keras-style layer's ``call``, or eagerly) keeps its collections in `Variable` s of its own,
  created on the first call from ``module.init``: ``params`` leaves are trainable, the others
  (BatchNorm's ``batch_stats``) are not and are assigned after a training call; values sown
  into ``"losses"`` become the layer's ``losses``. `flax_variables` lists them for tracking.
  A plain ``flax.linen`` module (not a ``mirrorfit.layers`` one) assigned to a Keras-style
  layer is wrapped in a `LinenModule` (`wrap_linen`), which runs it the same way.
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

from mirrorfit._src.constraints.constraints import layer_constraints
from mirrorfit._src.layers import dtype_policy
from mirrorfit._src.layers.name_scope import unique_name, weight_path
from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import call_context, tracking
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

SOWN_LOSSES = "losses"
"""The Flax collection of loss terms a forward pass sows (regularization penalties, `add_loss`
values): added to the training loss, never kept as state."""
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
    # Its weights are Variables, the paths of its own params none of an enclosing model's.
    with jax.ensure_compile_time_eval(), dtype_policy.uncast_weights():
        call_kwargs: dict[str, Any] = {**_concrete_zeros(kwargs), **_mode_kwargs(module, False)}
        variables = dict(module.init(rngs, *_concrete_zeros(args), **call_kwargs))
    variables.pop(SOWN_LOSSES, None)
    bridge: dict[str, Any] = {}
    constrained = {(name,): c for name, c in layer_constraints(module).items()}
    for collection, tree in variables.items():
        trainable = collection == "params"
        bridge[collection] = {
            path: Variable(leaf, trainable=trainable and getattr(module, "trainable", True),
                           name="/".join(path), aggregation="none" if trainable else "mean",
                           constraint=constrained.get(path) if trainable else None)
            for path, leaf in traverse_util.flatten_dict(tree).items()}
    owner = module.name or unique_name(snake_case(type(module).__name__))
    for tree in bridge.values():
        for variable in tree.values():
            variable.path = weight_path(owner, module, variable.name)
    return bridge


def set_trainable(module: nn.Module, trainable: bool) -> None:
    """Marks the Variables of ``module`` 's ``params`` trainable or not (``layer.trainable =
    False`` on a Flax layer inside a Keras-style one; its other collections stay
    non-trainable)."""
    bridge = module.__dict__.get(_BRIDGE) or {}
    for variable in bridge.get("params", {}).values():
        variable.trainable = bool(trainable)


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
    mutable = [c for c in bridge if c != "params"] + [SOWN_LOSSES] if training else [SOWN_LOSSES]
    call_kwargs: dict[str, Any] = {**kwargs, **_mode_kwargs(module, training)}
    outputs, mutated = module.apply(variables, *args, rngs={"dropout": call_context.next_rng()},
                                    mutable=mutable, **call_kwargs)
    mutated = dict(mutated)
    losses = mutated.pop(SOWN_LOSSES, {})
    for collection, tree in mutated.items():
        for path, value in traverse_util.flatten_dict(tree).items():
            bridge[collection][path].assign(value)
    # One forward pass's penalties: a call outside any layer's call starts a new pass.
    penalties = list(module.__dict__.get("_mf_losses") or []) if context is not None else []
    object.__setattr__(module, "_mf_losses", penalties + jax.tree.leaves(losses))
    return outputs


class LinenModule:
    """A plain ``flax.linen`` module held by a Keras-style layer, run by `call_unbound`.

    ``self.proj = flax.linen.Dense(4)`` in a `mirrorfit.layers.Layer` stores one of these
    (`wrap_linen`): calling it runs the module on Variables of its own (``params``
    trainable), which the layer tracks; other attributes are the module's. The module's
    ``__call__`` gets ``training`` only if it takes that argument (pass Flax's
    ``deterministic=`` yourself), and a ``"dropout"`` key.

    Args:
        module: an unbound ``flax.linen.Module``.
    """

    def __init__(self, module: nn.Module):
        self.__dict__["module"] = module
        self.__dict__["_mf_trainable"] = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        outputs = call_unbound(self.module, args, kwargs)
        if not self._mf_trainable:  # weights created by this call follow the flag
            set_trainable(self.module, False)
        return outputs

    def __mf_variables__(self) -> list[tuple[tuple[str, ...], Variable]]:
        return flax_variables(self.module)

    @property
    def trainable(self) -> bool:
        return self._mf_trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self.__dict__["_mf_trainable"] = bool(value)
        set_trainable(self.module, value)

    @property
    def _mf_losses(self) -> list[Any]:  # the module's penalties of this forward pass
        return self.module.__dict__.get("_mf_losses") or []

    @_mf_losses.setter
    def _mf_losses(self, value: list[Any]) -> None:
        object.__setattr__(self.module, "_mf_losses", value)

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("module")
        if module is None:
            raise AttributeError(name)
        return getattr(module, name)

    def __repr__(self) -> str:
        return f"LinenModule({self.module!r})"


def wrap_linen(value: Any) -> Any:
    """``value`` with every plain ``flax.linen`` module in it (also in a list, tuple or dict)
    wrapped in a `LinenModule`; ``mirrorfit.layers`` ones run through `call_unbound`
    already and stay as they are. Returns ``value`` itself when nothing needs wrapping."""
    if isinstance(value, nn.Module):
        return value if hasattr(value, "__mf_variables__") else LinenModule(value)
    if type(value) in (list, tuple):
        items = [wrap_linen(v) for v in value]
        changed = any(new is not old for new, old in zip(items, value))
        return type(value)(items) if changed else value
    if type(value) is dict:
        entries = {k: wrap_linen(v) for k, v in value.items()}
        return entries if any(entries[k] is not v for k, v in value.items()) else value
    return value


class LayerNode(nn.Module):
    """A Keras-style layer run as a Flax module inside a functional or Sequential model.

    Its variables (`tracking.walk` order, keyed by their ``"/"``-joined attribute paths)
    are this module's ``params`` when trainable at ``init``, else its ``non_trainable``
    collection; the layer runs in a stateless scope mapping them to the values ``apply``
    gets, assigned non-trainable values (BatchNormalization's statistics) are written back
    to the collection when it is mutable, and the layer's ``losses`` are sown into
    ``"losses"``.
    """

    layer: Any

    @nn.compact
    def __call__(self, *args: Any, training: bool = False, **kwargs: Any) -> Any:
        layer = self.layer
        if self.is_initializing():
            with StatelessScope():  # builds lazily created weights; changes nothing
                jax.eval_shape(lambda *a: layer(*a, training=False, **kwargs), *args)
        mapping, non_trainable_keys = [], {}
        for path, variable in tracking.walk(layer):
            key = "/".join(path)
            # Where init put it: freezing a weight later does not move it between collections.
            in_params = self.has_variable("params", key) or (
                variable.trainable and not self.has_variable(NON_TRAINABLE, key))
            if in_params:
                value = self.param(key, lambda _, v=variable: v.value)
            else:
                value = self.variable(NON_TRAINABLE, key, lambda v=variable: v.value).value
                non_trainable_keys[id(variable)] = key
            mapping.append((variable, value))
        rng = self.make_rng("dropout") if training and self.has_rng("dropout") else None
        layer._clear_losses()
        with StatelessScope(mapping) as scope, call_context.call_context(training, rng):
            outputs = layer(*args, training=training, **kwargs)
            losses = list(layer.losses)
        layer._clear_losses()  # their values are traced: they leave through "losses" only
        if self.is_mutable_collection(NON_TRAINABLE):
            for variable, value in scope.updates:
                if id(variable) in non_trainable_keys:
                    self.put_variable(NON_TRAINABLE, non_trainable_keys[id(variable)], value)
        for i, loss in enumerate(losses):
            self.sow(SOWN_LOSSES, f"loss_{i}", loss)
        return outputs


def write_back(layer: Any, params: Any, non_trainable: Any) -> None:
    """Assigns a `LayerNode` 's trained values (its ``params`` and ``non_trainable``
    collections) to the layer's variables, so the layer object shares the trained weights."""
    for path, variable in tracking.walk(layer):
        key = "/".join(path)
        for tree in (params, non_trainable):
            if tree is not None and key in tree:
                variable.assign(tree[key])
                break
