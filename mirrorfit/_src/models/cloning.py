"""``keras.models``' functions on `Model`: `clone_model`, `model_from_json` and `save_model`.

`clone_model` builds the same architecture again with new layers (fresh weights), as Keras 3's
``keras/src/models/cloning.py``: a Sequential's layer list, or a functional model's recorded
calls replayed on new `Input` tensors in run order (ops recorded on symbolic tensors are
recorded again), each layer replaced by ``clone_function(layer)``; a subclassed model is
``cls.from_config(model.get_config())``. `model_from_json` rebuilds what ``model.to_json()``
wrote (layer configs, never code).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import jax

from mirrorfit._src.layers.graph import config as config_lib
from mirrorfit._src.layers.graph.functional import FunctionalModule, Input, KerasTensor
from mirrorfit._src.layers.graph.sequential import SequentialModule
from mirrorfit._src.layers.graph.symbolic import Operation
from mirrorfit._src.models.model import Model
from mirrorfit._src.models.sequential import Sequential

_NO_ARCHITECTURE = (
    "clone_model needs a functional or Sequential model of mirrorfit.layers, or a subclassed "
    "model with get_config(), to build the architecture again. Received: a model of {kind}")


def _default_clone(layer: Any) -> Any:
    """Keras' default ``clone_function``: a new layer from the layer's config (a nested
    model cloned whole); an op recorded on symbolic tensors is itself again."""
    if isinstance(layer, Operation):
        return layer
    if isinstance(layer, Model):
        return clone_model(layer)
    return type(layer).from_config(layer.get_config())


def clone_model(model: Model, input_tensors: Any = None,
                clone_function: Callable[[Any], Any] | None = None,
                call_function: Callable[..., Any] | None = None,
                recursive: bool = False) -> Model:
    """A new model of ``model`` 's architecture with new weights, as
    ``keras.models.clone_model``; it is not compiled.

    Args:
        model: a functional or Sequential model, or a subclassed model with ``get_config``.
        input_tensors: new `mirrorfit.layers.Input` tensors for a functional model (in the
            structure of its inputs), or one for a Sequential; default new ones alike.
        clone_function: ``layer -> layer`` for each layer (return the layer itself to share
            it); default a new layer from its config, a nested model cloned.
        call_function: ``(layer, *args, **kwargs) -> outputs`` for each call of a functional
            model's graph; default ``layer(*args, **kwargs)``.
        recursive: whether a ``clone_function`` given also clones the layers of nested
            functional and Sequential models (otherwise it gets the nested model).

    Returns:
        The new `Model` (a `Sequential` for a Sequential), mirrored on the current
        strategy's devices.

    Raises:
        ValueError: a model with no architecture to rebuild, or ``call_function`` /
            ``input_tensors`` for a subclassed model.

    Example:
        >>> inputs = mf.Input((4,))
        >>> with mf.MirroredStrategy().scope():
        ...     functional = mf.Model(inputs, mf.layers.Dense(2)(inputs))
        ...     twin = mf.models.clone_model(functional)  # the layers' configs, new weights
        >>> [layer.name for layer in twin.layers]
        ['dense']
    """
    clone = clone_function or _default_clone
    if recursive and clone_function is not None:
        clone = functools.partial(_recursive_clone, given=clone_function)
    module = model.module
    if isinstance(module, SequentialModule):
        first = module.stack.input if input_tensors is None else input_tensors
        head = [] if first is None else [first if input_tensors is not None
                                         else _new_input(first)]
        return Sequential(head + [clone(layer) for layer in module.stack.layers],
                          name=model.name)
    if isinstance(module, FunctionalModule):
        return _clone_functional(model, module, input_tensors, clone, call_function)
    if model.is_subclassed and input_tensors is None and call_function is None:
        return cast(Model, type(model).from_config(model.get_config()))
    raise ValueError(_NO_ARCHITECTURE.format(kind=type(module).__name__))


def _recursive_clone(layer: Any, given: Callable[[Any], Any]) -> Any:
    """``given(layer)``, or for a nested functional or Sequential model its clone by
    ``given`` (``clone_model(..., recursive=True)``)."""
    if isinstance(layer, Model) and isinstance(layer.module, (FunctionalModule,
                                                              SequentialModule)):
        return clone_model(layer, clone_function=given, recursive=True)
    return layer if isinstance(layer, Operation) else given(layer)


def _new_input(tensor: KerasTensor) -> KerasTensor:
    """A new `Input` of ``tensor`` 's shape, dtype and name."""
    return Input(batch_shape=tensor.shape, dtype=tensor.dtype, name=tensor.name)


def _clone_functional(model: Model, module: FunctionalModule, input_tensors: Any,
                      clone: Callable[[Any], Any], call_function: Callable[..., Any] | None
                      ) -> Model:
    graph = module.graph
    new_inputs = (jax.tree.map(_new_input, graph.inputs) if input_tensors is None
                  else input_tensors)
    tensors = dict(zip(map(id, jax.tree.leaves(graph.inputs)), jax.tree.leaves(new_inputs),
                       strict=True))
    layers = {id(layer): clone(layer) for layer in graph.layers}
    for node in graph.nodes:
        leaves, treedef = jax.tree.flatten(node.args)
        args, kwargs = jax.tree.unflatten(treedef, [
            tensors[id(x)] if isinstance(x, KerasTensor) else x for x in leaves])
        layer = layers[id(node.layer)]
        outputs = (call_function(layer, *args, **kwargs) if call_function is not None
                   else layer(*args, **kwargs))
        tensors.update(zip(map(id, node.output_tensors), jax.tree.leaves(outputs), strict=True))
    outputs = jax.tree.map(lambda t: tensors[id(t)], graph.outputs)
    return Model(new_inputs, outputs, name=model.name)


def model_from_json(json_string: str, custom_objects: Mapping[str, Any] | None = None
                    ) -> Model:
    """The model ``model.to_json()`` described, with new weights, as
    ``keras.models.model_from_json``.

    Args:
        json_string: the JSON text of ``to_json``.
        custom_objects: ``{class_name: class}`` for layers of yours not registered with
            ``mf.saving.register_serializable``.

    Returns:
        A new, built `Model` (a `Sequential` for a Sequential's JSON).

    Raises:
        ValueError: JSON that is no model architecture, or a layer class not found.
    """
    module = config_lib.module_from_config(json.loads(json_string), dict(custom_objects or {}))
    if isinstance(module, SequentialModule):
        head = [] if module.stack.input is None else [module.stack.input]
        return Sequential(head + list(module.stack.layers), name=module.name)
    return Model(module, name=module.name)


def save_model(model: Model, filepath: str | os.PathLike, overwrite: bool = True) -> None:
    """``model.save(filepath)``, as ``keras.models.save_model``.

    Raises:
        ValueError: ``overwrite=False`` and ``filepath`` exists; or as ``Model.save``.
    """
    if not overwrite and os.path.exists(filepath):
        raise ValueError(f"{os.fspath(filepath)!r} exists; pass overwrite=True to replace it. "
                         "Received: overwrite=False")
    model.save(filepath)
