"""`HostLayer`: the base of the layers that run on the host in NumPy (the text and lookup
layers): strings never enter the compiled step.

Called on a list or array they return NumPy arrays. A `mirrorfit.Sequential` whose first
layers are host layers applies them to ``x`` on the host in ``fit``/``evaluate``/``predict``,
before the batch is placed on the devices; a functional model cannot hold one (called on an
`Input` it raises `HOST_LAYER_IN_GRAPH`). ``model.save`` stores each one as
`serialize_host_layer` (its config and its adapted state, `HostLayer.get_assets`), and
``mf.load_model`` rebuilds it with `deserialize_host_layer`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mirrorfit._src.layers.graph import functional
from mirrorfit._src.layers.name_scope import unique_name
from mirrorfit._src.utils import registry
from mirrorfit._src.utils.naming import snake_case

HOST_LAYER_IN_GRAPH = (
    "{cls} runs on the host in NumPy (strings never enter the compiled step), so it cannot be "
    "called on a symbolic Input inside a functional model. Apply it in the input pipeline "
    "instead, e.g. x = {name}(texts), then feed x to the model; or put it first in a "
    "mf.Sequential, which applies it to x on the host. Received: a KerasTensor")


class HostLayer:
    """A Keras preprocessing layer computed in NumPy on the host; see the module docstring.

    Subclasses implement ``call(inputs) -> np.ndarray`` and ``get_config``.
    """

    exportable = False  # Python on the host: `mf.export` refuses a model that holds one

    def __init__(self, name: str | None = None, **kwargs: Any):
        kwargs.pop("dtype", None)  # accepted as Keras does; outputs have fixed dtypes
        kwargs.pop("trainable", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments "
                            f"{sorted(kwargs)}. Received: {kwargs!r}")
        self.name = name or unique_name(snake_case(type(self).__name__))
        self.trainable = False

    def __call__(self, inputs: Any, training: Any = None) -> Any:
        """``call(inputs)``; ``training`` is accepted as Keras' and changes nothing."""
        if functional.is_symbolic(inputs):
            raise TypeError(HOST_LAYER_IN_GRAPH.format(cls=type(self).__name__, name=self.name))
        return self.call(inputs)

    def call(self, inputs: Any) -> Any:
        raise NotImplementedError

    # A host layer has no weights (its vocabulary is Python state), as a model sees it.
    @property
    def weights(self) -> list[Any]:
        """``[]``: a host layer's vocabulary is Python state, not weights (also
        ``trainable_weights`` and ``non_trainable_weights``).
        """
        return []

    trainable_weights = non_trainable_weights = weights

    def get_weights(self) -> list[Any]:
        """``[]``: see `weights`."""
        return []

    def compute_output_shape(self, input_shape: tuple[int | None, ...]
                             ) -> tuple[int | None, ...]:
        """The output's shape (``None`` batch) for inputs of ``input_shape``, from the
        config, as Keras' (the summary's "Output Shape")."""
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (here ``name``)."""
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HostLayer:
        """The layer of a `get_config` output (without what ``adapt`` learned: see
        `set_assets`).
        """
        return cls(**config)

    def get_assets(self) -> dict[str, Any]:
        """What ``adapt`` learned, as JSON (Keras' ``save_assets``; the config keeps only the
        constructor's arguments, as Keras'). ``{}``: nothing learned."""
        return {}

    def set_assets(self, assets: dict[str, Any]) -> None:
        """Restores `get_assets` (Keras' ``load_assets``)."""
        del assets  # nothing to restore


def serialize_host_layer(layer: HostLayer) -> dict[str, Any]:
    """``registry.serialize(layer)`` plus ``"assets"``: `HostLayer.get_assets`, as JSON.

    Raises:
        TypeError: the config holds a value JSON cannot store (a Python function as
            ``standardize`` or ``split``).
    """
    config = {**registry.serialize(layer), "assets": layer.get_assets()}
    try:
        json.dumps(config)
    except TypeError as err:
        raise TypeError(
            f"Saving a model stores its host layer {layer.name!r} as JSON (never code), so "
            "its arguments must be names or values: give standardize=/split= by name (e.g. "
            "'lower_and_strip_punctuation'), or apply the layer in your input pipeline and "
            f"save the model without it. Received: {err}") from None
    return config


def deserialize_host_layer(config: dict[str, Any],
                           custom_objects: dict[str, Any] | None = None) -> HostLayer:
    """The host layer `serialize_host_layer` described, with its learned state.

    Raises:
        ValueError: its class is not found (see `mirrorfit._src.utils.registry.deserialize`).
    """
    layer = registry.deserialize({k: v for k, v in config.items() if k != "assets"},
                                 custom_objects)
    layer.set_assets(config.get("assets") or {})
    return layer


def is_host_layer(layer: Any) -> bool:
    """Whether ``layer`` runs on the host (a `HostLayer`)."""
    return isinstance(layer, HostLayer)


def split_host_layers(layers: list[Any]) -> tuple[list[HostLayer], list[Any]]:
    """``(the leading host layers, the rest)`` of a Sequential's layers.

    Raises:
        ValueError: a host layer after a device layer (it would need its input on the host).
    """
    count = next((i for i, layer in enumerate(layers) if not is_host_layer(layer)), len(layers))
    late = [type(layer).__name__ for layer in layers[count:] if is_host_layer(layer)]
    if late:
        raise ValueError(f"{late[0]} runs on the host in NumPy, so a Sequential can only hold "
                         "it before its other layers (it is applied to x before the batch "
                         "reaches the devices). Move it first, or apply it in the input "
                         f"pipeline. Received: {late[0]} after a device layer")
    return list(layers[:count]), list(layers[count:])


def apply_host_layers(layers: Sequence[HostLayer], x: Any) -> Any:
    """``x`` through ``layers`` in order (NumPy on the host)."""
    for layer in layers:
        x = layer(x)
    return x
