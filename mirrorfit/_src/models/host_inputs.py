"""`HostInputs`: a `Model`'s host layers (`TextVectorization`, `StringLookup`,
`IntegerLookup`: NumPy on the host), applied to ``x`` before the batches reach the devices.

A `mirrorfit.Sequential` whose list starts with host layers sets them here, and
``mf.load_model`` sets those a save stored (`mirrorfit._src.models.model_saving`), so the
rebuilt model takes raw strings as the saved one did. ``fit``/``evaluate``/``predict``
(``validation_data`` too) and the ``*_on_batch`` methods apply them to ``x``: arrays, lists
and generators of batches. ``model(x)`` applies them when ``x`` holds strings (NumPy dtype
kind ``U``, ``S`` or ``O``, or a list of ``str``); otherwise it takes the host layers'
outputs, e.g. ``model(vectorize(texts))``. They lead ``model.layers`` and the summary
(`mirrorfit._src.models.keras_models`), and have no weights.

Before them, ``x`` given to ``fit``/``evaluate``/``predict`` (and ``validation_data``) as a
dict keyed by the `Input` names of a functional model built on a list of inputs becomes
that list, as Keras 3 maps a dict of inputs by name (`HostInputs._arranged`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from mirrorfit._src.layers.graph import model_info
from mirrorfit._src.layers.preprocessing.host_layer import HostLayer, apply_host_layers
from mirrorfit._src.trainers.data_adapters.array_data_adapter import num_rows

HOST_SOURCE = (
    "This model starts with host layers ({names}), which it applies to arrays, lists "
    "and generators of batches. Apply them in your input pipeline for other sources, e.g. "
    "dataset.map(lambda x, y: (vectorize(x), y)). Received: x of type {kind}")


class HostInputs:
    """The host layers and their application to ``x``; mixed into `Model` before
    `mirrorfit._src.trainers.training_api.TrainingAPI`, whose ``_adapter_for`` and
    ``_validation_inputs`` it overrides."""

    _host_layers: Sequence[HostLayer] = ()  # set by Sequential and load_model
    module: Any  # the Flax module; owned by `Model`

    def _arranged(self, x: Any) -> Any:
        """``x``, or a dict keyed by the `Input` names of a functional model whose inputs
        are a list, as that list (Keras 3's functional models take either)."""
        if not isinstance(x, Mapping) or not model_info.is_layers_model(self.module):
            return x
        spec = model_info.input_spec(self.module)
        if not isinstance(spec, (list, tuple)):
            return x
        names = [t.name for t in jax.tree.leaves(spec)]
        return [x[name] for name in names] if set(x) == set(names) else x

    def _on_host(self, x: Any) -> Any:
        """``x`` (arrays, or a generator of ``(x, ...)`` batches) through the host layers.

        Raises:
            TypeError: another source of batches (a ``tf.data`` dataset, a ``PyDataset``).
        """
        if not self._host_layers or x is None:
            return x
        if isinstance(x, (np.ndarray, list, tuple, str)) or hasattr(x, "__array__"):
            return apply_host_layers(self._host_layers, x)
        if iter(x) is x:  # a generator: map its batches lazily
            return (self._on_host_batch(batch) for batch in x)
        names = ", ".join(type(layer).__name__ for layer in self._host_layers)
        raise TypeError(HOST_SOURCE.format(names=names, kind=type(x).__name__))

    def _on_host_batch(self, batch: Any) -> Any:
        """One batch of a generator: ``(x, y[, w])`` (a tuple, or a list not of strings) gets
        ``x`` mapped; anything else is ``x``."""
        if isinstance(batch, tuple) or (isinstance(batch, list) and batch
                                        and not isinstance(batch[0], (str, bytes))):
            return (apply_host_layers(self._host_layers, batch[0]), *batch[1:])
        return apply_host_layers(self._host_layers, batch)

    def _on_host_if_strings(self, x: Any) -> Any:
        """``model(x)``'s inputs: through the host layers when ``x`` holds strings."""
        return apply_host_layers(self._host_layers, x) if (
            self._host_layers and _holds_strings(x)) else x

    def _batch_rows(self, x: Any) -> int:
        """The rows of one batch ``x`` of the ``*_on_batch`` methods (a list of strings
        counts its entries)."""
        if self._host_layers and isinstance(x, (list, tuple)):
            return len(x)
        return num_rows(x, "x")

    def _adapter_for(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return super()._adapter_for(  # type: ignore[misc]
            self._on_host(self._arranged(x)), *args, **kwargs)

    def _validation_inputs(self, validation_data: Any) -> Any:
        if isinstance(validation_data, tuple) and validation_data:
            return (self._on_host(self._arranged(validation_data[0])), *validation_data[1:])
        return validation_data


def _holds_strings(x: Any) -> bool:
    """Whether ``x`` is a NumPy array of strings or objects (dtype kind ``U``, ``S``, ``O``)
    or a (nested) list or tuple whose first entry is a ``str`` or ``bytes``."""
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "USO"
    while isinstance(x, (list, tuple)) and x:
        x = x[0]
    return isinstance(x, (str, bytes))
