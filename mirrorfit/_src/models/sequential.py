"""`Sequential`: a `Model` over a list of layers, grown with ``add``, as ``keras.Sequential``.

A list that holds ``mirrorfit.layers`` layers (or starts with an `Input`) runs as a
`SequentialModule`: each layer's params sit under its Keras name (``dense``, ``dense_1`` or
its ``name=``). A list of plain Flax modules and functions runs as `KerasSequential`
(``flax.linen.Sequential``, params under ``layers_0``, ``layers_1``, ...), as before.

Host layers first in the list (`TextVectorization`, `StringLookup`, `IntegerLookup`: NumPy on
the host) are not part of the module: the model applies them to ``x`` on the host, before the
batches reach the devices (`mirrorfit._src.models.host_inputs`), and ``model.save`` stores
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn

from mirrorfit._src.layers.graph.functional import KerasTensor
from mirrorfit._src.layers.graph.input_layer import InputLayer
from mirrorfit._src.layers.graph.sequential import sequential_module
from mirrorfit._src.layers.layer import Layer
from mirrorfit._src.layers.preprocessing.host_layer import split_host_layers
from mirrorfit._src.models.keras_models import model_module
from mirrorfit._src.models.model import Model
from mirrorfit._src.modules.adapters import sequential


def module_of(layers: list[Any], name: str | None = None) -> nn.Module:
    """The module running ``layers`` (after the leading host layers): `SequentialModule` when
    they include ``mirrorfit.layers`` (or an `Input`/`InputLayer`, or are empty), else
    `KerasSequential`."""
    layers = split_host_layers(layers)[1]
    keras_style = not layers or any(
        isinstance(l, (KerasTensor, InputLayer, Layer)) for l in layers)
    return sequential_module(layers, name=name)[0] if keras_style else sequential(layers)


class Sequential(Model):
    """A `Model` running ``layers`` in order, as ``keras.Sequential``.

    Args:
        layers: ``mirrorfit.layers`` layers (optionally led by `mirrorfit.layers.Input`, or
            with ``input_shape=`` on the first one: then the model is built now), or Flax
            modules and functions. Each layer gets Keras' training flag: ``train``/``training``
            if its ``__call__`` takes one, else ``deterministic`` (Dropout) and
            ``use_running_average`` (BatchNorm).
        input_shape: shape of one example without the batch axis, when the layers declare
            none; otherwise the model is built on the first batch.
        name: the model's name (``"sequential"`` in the summary when not given).
        **kwargs: `Model`'s ``input_dtype`` and ``seed``.

    Raises:
        TypeError: an entry that is not callable, or an `Input` after the first position.

    Example:
        >>> with mf.MirroredStrategy().scope():
        ...     model = mf.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax],
        ...                           input_shape=(784,))
        ...     keras_style = mf.Sequential([mf.Input((784,)), mf.layers.Dense(10)])
        >>> keras_style.layers[0].name
        'dense'
    """

    def __init__(self, layers: Sequence[Callable[..., Any] | KerasTensor] | None = None,
                 input_shape: Any = None, *, name: str | None = None, **kwargs: Any):
        if isinstance(layers, (str, bytes)) or not isinstance(layers, (Sequence, type(None))):
            raise TypeError("layers must be a list of layers, e.g. [mf.layers.Dense(10)]. "
                            f"Received: layers={layers!r}")
        self._layer_list = list(layers or [])
        self._host_layers = split_host_layers(self._layer_list)[0]
        self._name = name
        self._input_shape = input_shape
        super().__init__(module_of(self._layer_list, name), input_shape, name=name, **kwargs)

    def add(self, layer: Any) -> None:
        """Appends ``layer`` (or a leading `mirrorfit.layers.Input`), as ``Sequential.add``.

        The model is rebuilt when its input shape is known, with fresh weights (from
        ``seed``), and recompiled with the same arguments if it was compiled.

        Raises:
            TypeError: ``layer`` is not callable, or an `Input` after the first layer.
        """
        layers = [*self._layer_list, layer]
        module, sample = model_module(module_of(layers, self._name), self._input_shape,
                                      None, None, None)
        self._layer_list = layers
        self._host_layers = split_host_layers(layers)[0]
        self._set_module(module, self._adapt(module), self._input_shape, sample)
        if self._compile_config is not None:
            self.compile(**self._compile_config)
