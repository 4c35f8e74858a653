"""Questions about a model module of ``mirrorfit.layers``: its layers, inputs and frozen params.

These work on both a `FunctionalModule` and a `SequentialModule` (`is_layers_model`), and
`freeze_non_trainable` turns the frozen params into an optimizer that leaves them alone. A
frozen layer freezes its whole param subtree; a Keras-style layer also freezes each of its
weights that is not trainable now (a sub-layer set ``trainable = False`` after the model
was built), under the key `mirrorfit._src.layers.flax_bridge.LayerNode` stores it at.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import traverse_util

from mirrorfit._src.constraints.constraints import layer_constraints
from mirrorfit._src.layers.graph.functional import FunctionalModule, KerasTensor, probe_shape
from mirrorfit._src.layers.graph.sequential import SequentialModule
from mirrorfit._src.variables import tracking


def is_layers_model(module: Any) -> bool:
    """Whether ``module`` is a functional or Sequential module of ``mirrorfit.layers``."""
    return isinstance(module, (FunctionalModule, SequentialModule))


def model_layers(module: nn.Module) -> list[tuple[str, Any]]:
    """``(name, layer)`` of a `FunctionalModule` / `SequentialModule`, in Keras' order.

    Raises:
        TypeError: ``module`` is neither.
    """
    if isinstance(module, FunctionalModule):
        return list(zip(module.graph.names, module.graph.layers))
    if isinstance(module, SequentialModule):
        return list(zip(module.stack.names, module.stack.layers))
    raise TypeError("Expected a module from functional_module or sequential_module. "
                    f"Received: module={type(module).__name__}")


def output_names(module: nn.Module) -> list[str]:
    """Keras 3's ``model.output_names``: the name of the layer that makes each output, in the
    outputs' flat order (an output that is an `Input` by its name).

    Raises:
        TypeError: ``module`` is not a functional or sequential module.
    """
    if isinstance(module, SequentialModule):
        return list(module.stack.names[-1:])
    if not isinstance(module, FunctionalModule):
        model_layers(module)  # raises the TypeError
    graph = module.graph
    return [graph.name_of(t.node.layer) if t.node is not None else str(t.name)
            for t in jax.tree.leaves(graph.outputs)]


def list_output_names(module: Any) -> list[str] | None:
    """`output_names` of a functional model whose outputs are a list or tuple of distinct
    layers' outputs (what ``compile``'s per-output dicts and the logs are keyed by); ``None``
    for any other model."""
    if not isinstance(module, FunctionalModule) or not isinstance(module.graph.outputs,
                                                                  (list, tuple)):
        return None
    names = output_names(module)
    return names if len(set(names)) == len(names) else None


def get_layer(module: nn.Module, name: str) -> Any:
    """The layer saved under ``name``, as ``keras.Model.get_layer``.

    Raises:
        ValueError: no layer has that name.
    """
    layers = dict(model_layers(module))
    if name not in layers:
        raise ValueError(f"No such layer: {name!r}. Existing layers are: {list(layers)}. "
                         f"Received: name={name!r}")
    return layers[name]


def non_trainable_paths(module: nn.Module) -> list[tuple[str, ...]]:
    """Param-tree prefixes of frozen weights: ``(layer_name,)`` for a layer with
    ``trainable=False``, ``(layer_name, key)`` for a non-trainable weight of a trainable
    Keras-style layer (``key``: its ``"/"``-joined attribute path)."""
    paths: list[tuple[str, ...]] = []
    for name, layer in model_layers(module):
        if not getattr(layer, "trainable", True):
            paths.append((name,))
        elif not isinstance(layer, nn.Module) and hasattr(layer, "__mf_variables__"):
            paths += [(name, "/".join(path)) for path, variable in tracking.walk(layer)
                      if not variable.trainable]
    return paths


def frozen_tree(params: Any, frozen: Any) -> Any:
    """A bool pytree like ``params``: ``True`` under the prefixes in ``frozen``."""
    def mark(tree: Any, path: tuple[str, ...]) -> Any:
        if path in frozen:
            return jax.tree.map(lambda _: True, tree)
        if isinstance(tree, dict) and len(path) < 2:
            return {key: mark(value, (*path, key)) for key, value in tree.items()}
        return jax.tree.map(lambda _: False, tree)
    return mark(params, ())


def trainable_mask(module: nn.Module, params: Any) -> Any:
    """A bool pytree like ``params``: ``False`` under frozen layers and weights
    (`non_trainable_paths`), for ``optax.masked`` / ``optax.set_to_zero`` freezing."""
    frozen = frozen_tree(params, set(non_trainable_paths(module)))
    return jax.tree.map(lambda f: not f, frozen)


def freeze_non_trainable(tx: optax.GradientTransformation, module: Any
                         ) -> optax.GradientTransformation:
    """``tx`` with zero updates for the params of layers that are ``trainable=False`` now.

    As Keras, freezing is read at ``compile``: the frozen layers get no update and no weight
    decay (their update, decay included, is set to zero after ``tx``). Returns ``tx`` itself
    when nothing is frozen.
    """
    frozen = set(non_trainable_paths(module)) if is_layers_model(module) else set()
    if not frozen:
        return tx
    return optax.chain(tx, optax.masked(optax.set_to_zero(),
                                        lambda params: frozen_tree(params, frozen)))


def input_spec(module: nn.Module) -> Any:
    """The model's `Input` tensors (the functional ``inputs`` structure, or a Sequential's
    leading `Input`); ``None`` for a Sequential built without one."""
    if isinstance(module, FunctionalModule):
        return module.graph.inputs
    if isinstance(module, SequentialModule):
        return module.stack.input
    raise TypeError("Expected a module from functional_module or sequential_module. "
                    f"Received: module={type(module).__name__}")


def sample_inputs(module: nn.Module, batch_size: int = 1) -> Any:
    """Zero arrays shaped as `input_spec` with ``batch_size`` rows (for ``init``).

    Raises:
        ValueError: a Sequential without a leading `Input` (its input shape is unknown).
    """
    spec = input_spec(module)
    if spec is None:
        raise ValueError("This Sequential model has no Input layer; pass sample inputs or "
                         "start the layer list with mirrorfit.layers.Input(shape).")

    def zeros(t: KerasTensor):  # a variable (None) length as functional.PROBE_LENGTHS[0]
        return jnp.zeros((batch_size, *probe_shape(t.shape)[1:]), t.dtype)
    return jax.tree.map(zeros, spec)


def weight_constraints(module: Any) -> Callable[[Any], Any] | None:
    """``params -> params`` applying each weight's constraint (as Keras does after every
    optimizer update), for a subclassed model or a functional/Sequential model; ``None`` for
    other modules or when nothing is constrained.

    The constraints are a built-in layer's ``*_constraint`` arguments
    (`mirrorfit._src.constraints.constraints.layer_constraints`) and each Keras-style weight's
    ``constraint`` (a built-in layer called inside a Keras-style one gets its arguments' on
    its Variables), read from the variables when the step is traced (a subclassed model
    builds on its first batch)."""
    if isinstance(module, nn.Module) and not is_layers_model(module):
        return None
    if is_layers_model(module):
        nodes = [(name, layer) for name, layer in model_layers(module)
                 if not isinstance(layer, nn.Module) and hasattr(layer, "__mf_variables__")]
        built_in = {(name, weight): constraint for name, layer in model_layers(module)
                    if isinstance(layer, nn.Module)
                    for weight, constraint in layer_constraints(layer).items()}
        if not nodes and not built_in:
            return None

        def table() -> dict[tuple[str, ...], Any]:
            return {**built_in, **{(name, "/".join(path)): v.constraint for name, layer in nodes
                                   for path, v in tracking.walk(layer)
                                   if v.constraint is not None}}
    elif hasattr(module, "__mf_variables__"):
        def table() -> dict[tuple[str, ...], Any]:
            return {path: v.constraint for path, v in tracking.walk(module)
                    if v.constraint is not None}
    else:
        return None

    def constrain(params: Any) -> Any:
        found = table()
        if not found:
            return params
        flat = traverse_util.flatten_dict(params)
        return traverse_util.unflatten_dict(
            {k: found[k](v) if k in found else v for k, v in flat.items()})

    return constrain
