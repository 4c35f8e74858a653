"""Architectures as JSON: layer and model configs, as Keras' ``get_config``/``from_config``.

`functional_config` describes a `FunctionalModule` or `SequentialModule` with plain JSON
values (no pickling); `module_from_config` rebuilds it, finding layer classes in the
registry (`mirrorfit._src.utils.registry`: the built-in `LAYERS`, classes registered with
``register_serializable``, and ``custom_objects``). A rebuilt model has the same param tree,
so saved weights load into it.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax

from mirrorfit._src.activations import activations
from mirrorfit._src.layers import base
from mirrorfit._src.layers.core import Activation
from mirrorfit._src.layers.graph import functional, sequential
from mirrorfit._src.layers.graph.functional import KerasTensor
from mirrorfit._src.utils import registry

FORMAT_VERSION = 1
_TENSOR, _TUPLE = "__tensor__", "__tuple__"


def serialize_layer(layer: Any, name: str) -> dict[str, Any]:
    """``{"module", "class_name", "config", "registered_name"}`` of one layer
    (`registry.serialize`), saved under param-tree key ``name``; ``LAYERS.deserialize``
    rebuilds it.

    A plain function in a Sequential list is saved as an ``Activation`` when it is one of
    Keras' activations.

    Raises:
        ValueError: a layer without ``get_config`` (write one, and load with custom_objects),
            or a Keras-style layer whose ``get_config`` cannot be generated.
    """
    if not hasattr(layer, "get_config") and callable(layer):  # a plain function
        try:
            activation = activations.serialize(layer)
            activations.get(activation)
        except ValueError as err:
            raise ValueError(f"The function {layer!r} in the layer list cannot be saved in a "
                             "config; wrap it in mirrorfit.layers.Activation or a Layer with "
                             "get_config.") from err
        layer = Activation(activation)
    if not hasattr(layer, "get_config"):
        raise ValueError(f"Layer {name!r} ({type(layer).__name__}) has no get_config(); subclass "
                         "mirrorfit.layers.Layer (or define get_config/from_config) to save the "
                         "architecture.")
    try:
        spec = registry.serialize(layer)
    except NotImplementedError as err:  # a Keras-style layer that cannot auto-config
        raise ValueError(f"Layer {name!r} cannot be saved in a config: {err}") from err
    return {**spec, "config": {**spec["config"], "name": name}}


def _tensor_spec(t: KerasTensor) -> dict[str, Any]:
    return {"name": t.name, "batch_shape": list(t.shape), "dtype": t.dtype.name}


def _encode(value: Any, ref: dict[int, list[Any]]) -> Any:
    if isinstance(value, KerasTensor):
        return {_TENSOR: ref[id(value)]}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, ref) for v in value]}
    if isinstance(value, list):
        return [_encode(v, ref) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v, ref) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError("Layer call arguments must be symbolic tensors or JSON values (numbers, "
                     f"strings, booleans, None) to save the architecture. Received: {value!r}")


def _decode(value: Any, tensors: dict[str, Any]) -> Any:
    if isinstance(value, dict) and _TENSOR in value:
        return tensors[repr(value[_TENSOR])]
    if isinstance(value, dict) and _TUPLE in value:
        return tuple(_decode(v, tensors) for v in value[_TUPLE])
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v, tensors) for k, v in value.items()}
    return value


def functional_config(module: nn.Module) -> dict[str, Any]:
    """The JSON-able architecture of a functional or Sequential module.

    Returns:
        ``{"class_name": "Functional" | "Sequential", "config": {...}, "format_version"}``.

    Raises:
        TypeError: a module not built by `functional_module` / `sequential_module`.
        ValueError: a layer or call argument with no JSON form.

    Example:
        >>> import json
        >>> from mirrorfit._src.layers.graph.functional import functional_module
        >>> module = functional_module(x := Input((3,)), Dense(2)(x))
        >>> text = json.dumps(functional_config(module))
        >>> rebuilt = module_from_config(json.loads(text))  # same param tree as ``module``
    """
    if isinstance(module, sequential.SequentialModule):
        stack = module.stack
        config = {"name": module.name,
                  "input": None if stack.input is None else _tensor_spec(stack.input),
                  "layers": [serialize_layer(l, n) for l, n in zip(stack.layers, stack.names)]}
        return {"class_name": "Sequential", "config": config, "format_version": FORMAT_VERSION}
    if not isinstance(module, functional.FunctionalModule):
        raise TypeError("functional_config takes a module from functional_module or "
                        f"sequential_module. Received: module={type(module).__name__}")
    graph = module.graph
    flat_inputs = jax.tree.leaves(graph.inputs)
    ref = {id(t): ["input", i] for i, t in enumerate(flat_inputs)}
    nodes = []
    for k, node in enumerate(graph.nodes):
        args, kwargs = node.args
        nodes.append({"layer": graph.name_of(node.layer), "args": _encode(list(args), ref),
                      "kwargs": _encode(kwargs, ref)})
        for j, t in enumerate(node.output_tensors):
            ref[id(t)] = ["node", k, j]
    config = {
        "name": module.name,
        "input_specs": [_tensor_spec(t) for t in flat_inputs],
        "inputs": _encode(graph.inputs, ref),
        "layers": [serialize_layer(l, n) for l, n in zip(graph.layers, graph.names)],
        "nodes": nodes,
        "outputs": _encode(graph.outputs, ref),
    }
    return {"class_name": "Functional", "config": config, "format_version": FORMAT_VERSION}


def _input(spec: dict[str, Any]) -> KerasTensor:
    return functional.Input(batch_shape=spec["batch_shape"], dtype=spec["dtype"],
                            name=spec["name"])


def module_from_config(config: dict[str, Any], custom_objects: dict[str, Any] | None = None
                       ) -> nn.Module:
    """Rebuilds the module `functional_config` described (as ``keras.models.model_from_json``).

    Args:
        config: `functional_config`'s output (after a JSON round trip or not).
        custom_objects: ``{class_name: class}`` for layers not in ``mirrorfit.layers`` and
            not registered with ``register_serializable``, and for the functions and
            classes their configs name (activations, initializers, regularizers).

    Raises:
        ValueError: an unknown model or layer class.
    """
    kind, body = config.get("class_name"), config.get("config", {})
    if kind == "Sequential":
        layers = [base.LAYERS.deserialize(spec, custom_objects) for spec in body["layers"]]
        head = [] if body.get("input") is None else [_input(body["input"])]
        return sequential.sequential_module(head + layers, name=body.get("name"))[0]
    if kind != "Functional":
        raise ValueError("config must come from functional_config (class_name 'Functional' or "
                         f"'Sequential'). Received: class_name={kind!r}")
    layers = {spec["config"]["name"]: base.LAYERS.deserialize(spec, custom_objects)
              for spec in body["layers"]}
    tensors = {repr(["input", i]): _input(spec) for i, spec in enumerate(body["input_specs"])}
    for k, node in enumerate(body["nodes"]):
        outputs = layers[node["layer"]](*_decode(node["args"], tensors),
                                        **_decode(node["kwargs"], tensors))
        for j, t in enumerate(jax.tree.leaves(outputs)):
            tensors[repr(["node", k, j])] = t
    return functional.functional_module(_decode(body["inputs"], tensors),
                                        _decode(body["outputs"], tensors), name=body.get("name"))
