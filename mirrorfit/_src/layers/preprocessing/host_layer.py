"""`HostLayer`: the base of the layers that run on the host in NumPy (the text and lookup
layers): strings never enter the compiled step.

Called on a list or array they return NumPy arrays. A `mirrorfit.Sequential` whose first
layers are host layers applies them to ``x`` on the host in ``fit``/``evaluate``/``predict``,
before the batch is placed on the devices; a functional model cannot hold one (called on an
`Input` it raises `HOST_LAYER_IN_GRAPH`).
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.layers import functional
from mirrorfit._src.layers.name_scope import unique_name
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
        return []

    trainable_weights = non_trainable_weights = weights

    def get_weights(self) -> list[Any]:
        return []

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> HostLayer:
        return cls(**config)


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


def apply_host_layers(layers: list[HostLayer], x: Any) -> Any:
    """``x`` through ``layers`` in order (NumPy on the host)."""
    for layer in layers:
        x = layer(x)
    return x
