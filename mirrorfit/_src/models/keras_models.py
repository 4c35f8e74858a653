"""`Model`'s side of ``mirrorfit.layers`` models: the functional constructor, layer access,
frozen layers, Keras' summary and the architecture stored with the weights.

A *layers model* is a `FunctionalModule` (``mf.Model(inputs=..., outputs=...)``) or a
`SequentialModule` (``mf.Sequential`` of ``mirrorfit.layers``). Its input shapes come from its
`Input` tensors, so it is built at construction; its layers are ``model.layers`` (a layer set
to ``trainable = False`` before ``compile`` gets no updates:
`mirrorfit._src.layers.graph.model_info.freeze_non_trainable`); ``model.summary()`` prints Keras'
table (`summary_text`); and ``model.save`` stores its architecture as JSON (`architecture`) so
that ``mf.load_model`` rebuilds it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn

from mirrorfit._src.layers.graph import config as config_lib
from mirrorfit._src.layers.graph import functional, model_info
from mirrorfit._src.layers.graph import summary as summary_lib
from mirrorfit._src.layers.graph.model_info import is_layers_model
from mirrorfit._src.layers.graph.sequential import SequentialModule
from mirrorfit._src.layers.graph.symbolic import Operation
from mirrorfit._src.modules.adapters import KerasSequential


def model_module(module: Any, input_shape: Any, inputs: Any, outputs: Any,
                 name: str | None) -> tuple[Any, Any]:
    """The module behind ``Model(...)`` and an example batch to build it from, if known.

    ``Model(inputs=x, outputs=y)`` and Keras' positional ``Model(x, y)`` build a
    `FunctionalModule`; any other ``module`` is returned as is.

    Returns:
        ``(module, sample)``: ``sample`` is a batch of one zero row per `Input` (with the
        Inputs' dtypes) for a layers model that declares its inputs and got no
        ``input_shape``; else ``None``.

    Raises:
        TypeError: both a module and ``inputs``/``outputs``, or no module at all.
        ValueError: only one of ``inputs`` and ``outputs``.
    """
    if functional.is_symbolic(module):  # keras.Model(inputs, outputs), positionally
        if inputs is not None or outputs is not None:
            raise TypeError("Pass the functional model's tensors once: Model(inputs, outputs) "
                            "or Model(inputs=..., outputs=...). Received: both")
        module, inputs, outputs, input_shape = None, module, input_shape, None
    if inputs is not None or outputs is not None:
        if module is not None:
            raise TypeError("Model takes a Flax module or inputs=/outputs= tensors, not both. "
                            f"Received: module={type(module).__name__} and inputs/outputs")
        if inputs is None or outputs is None:
            raise ValueError("A functional model needs both inputs= (Input tensors) and "
                             "outputs= (tensors computed from them). "
                             f"Received: inputs={inputs!r}, outputs={outputs!r}")
        module = functional.functional_module(inputs, outputs, name=name)
    if module is None:
        raise TypeError("Model needs a Flax module, e.g. mf.Model(MyModule()), or "
                        "inputs=/outputs= from mirrorfit.layers. Received: module=None")
    sample = None
    if (is_layers_model(module) and input_shape is None
            and model_info.input_spec(module) is not None):
        sample = model_info.sample_inputs(module)
    return module, sample


class ModelLayers:
    """``model.layers`` and ``model.get_layer`` (as Keras); mixed into `Model`."""

    module: Any  # the Flax module; owned by `Model`
    _host_layers: Sequence[Any]  # owned by `HostInputs`: applied to x before the module

    @property
    def layers(self) -> list[Any]:
        """The layers in Keras' order: Sequential order (host layers first), or the
        functional graph's.

        Raises:
            TypeError: for a Flax module that is neither a layers model nor a list of layers.
        """
        if is_layers_model(self.module):  # ops recorded on symbolic tensors are no layers
            return [*self._host_layers, *(layer for _, layer in model_info.model_layers(
                self.module) if not isinstance(layer, Operation))]
        if isinstance(self.module, KerasSequential):
            return [*self._host_layers, *self.module.layers]
        raise TypeError("model.layers needs a model of mirrorfit.layers or an mf.Sequential list;"
                        f" use the Flax module's own attributes. Received: module of type "
                        f"{type(self.module).__name__}")

    def _sublayers(self) -> Iterator[Any]:
        """`layers` and the layers below them (a subclass's attributes'); none for a plain
        Flax module (whose submodules are no Keras layers), where `layers` refuses."""
        if (self.module is self or is_layers_model(self.module)
                or isinstance(self.module, KerasSequential)):
            yield from super()._sublayers()  # type: ignore[misc]

    @property
    def output_names(self) -> list[str]:
        """The names of the layers that make the outputs, in the outputs' flat order (a dict's
        by sorted key), as Keras 3's ``model.output_names``: a functional model with list
        outputs takes ``compile``'s per-output ``loss``, ``loss_weights`` and ``metrics``,
        and the targets ``y``, as dicts by these names, and logs ``<name>_loss``.

        Raises:
            AttributeError: for a model that is not of ``mirrorfit.layers`` (as a Keras
                subclassed model has none).
        """
        if not is_layers_model(self.module):
            raise AttributeError("output_names is known for functional and Sequential models "
                                 "of mirrorfit.layers only. Received: a model of "
                                 f"{type(self.module).__name__}")
        return model_info.output_names(self.module)

    def to_json(self, **kwargs: Any) -> str:
        """The architecture as JSON (layer configs, no weights), as ``keras.Model.to_json``;
        ``mf.models.model_from_json`` builds it again. ``kwargs`` go to ``json.dumps``.

        Raises:
            ValueError: a model that is not of ``mirrorfit.layers``, or a layer (or a call
                argument) with no config.
        """
        if not is_layers_model(self.module):
            raise ValueError("to_json needs a functional or Sequential model of "
                             "mirrorfit.layers. Received: a model of "
                             f"{type(self.module).__name__}")
        return json.dumps(config_lib.functional_config(self.module), **kwargs)

    def get_layer(self, name: str | None = None, index: int | None = None) -> Any:
        """The layer called ``name`` (its param-tree key), or at ``index`` of `layers`.

        Raises:
            ValueError: no layer has that name or index, or neither / both were given.
        """
        if (name is None) == (index is None):
            raise ValueError("get_layer takes exactly one of name= or index=. "
                             f"Received: name={name!r}, index={index!r}")
        if index is not None:
            layers = self.layers
            if not -len(layers) <= index < len(layers):
                raise ValueError(f"The model has {len(layers)} layers. Received: index={index}")
            return layers[index]
        host = [layer for layer in self._host_layers if layer.name == name]
        if host:
            return host[0]
        if not is_layers_model(self.module):
            raise ValueError("get_layer(name=...) needs a model of mirrorfit.layers (whose "
                             f"layers have names); use index=. Received: name={name!r}")
        assert name is not None  # exactly one of name and index (checked above)
        return model_info.get_layer(self.module, name)


def architecture(module: nn.Module) -> dict[str, Any] | None:
    """The JSON architecture of a layers model whose layers all have ``get_config``, else
    ``None`` (then ``load_model`` needs the module again)."""
    if not is_layers_model(module):
        return None
    try:
        return config_lib.functional_config(module)
    except ValueError:  # a layer without get_config: only the weights are stored
        return None


def from_architecture(config: dict[str, Any], custom_objects: dict[str, Any] | None
                      ) -> nn.Module:
    """The module `architecture` described; custom layer classes come from
    ``custom_objects`` (``{class_name: class}``)."""
    return config_lib.module_from_config(config, custom_objects)


def summary_text(module: nn.Module, params: Any, model_state: Any, sample: Any,
                 host_layers: Sequence[Any] = ()) -> str:
    """Keras 3's ``model.summary()`` table of a layers model (``sample``: a batch ``[1, ...]``
    of its inputs, for the output shapes of a Sequential built without an `Input`), after a
    row per host layer (no weights; output shape from its config, for string inputs
    ``[batch]``)."""
    summary = summary_lib.summary_rows(module, {"params": params, **model_state}, sample)
    shape: tuple[int | None, ...] = (None,)
    rows = []
    for layer in host_layers:
        shape = layer.compute_output_shape(shape)
        rows.append(summary_lib.LayerRow(layer.name, type(layer).__name__, shape, 0, 0))
    summary = dataclasses.replace(summary, rows=[*rows, *summary.rows])
    default = "sequential" if isinstance(module, SequentialModule) else "functional"
    return summary_lib.format_summary(summary, name=module.name or default)
