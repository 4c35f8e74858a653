"""Keras' ``Sequential`` as a Flax module: layers run in order, each under its name."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn

from mirrorfit._src.layers.functional import (
    Input,
    KerasTensor,
    as_module,
    assign_names,
    mode_kwargs,
)


@dataclasses.dataclass(frozen=True, eq=False)
class Stack:
    """The layers of a Sequential model, their param-tree keys and the leading `Input`."""

    layers: tuple[Any, ...]
    names: tuple[str, ...]
    input: KerasTensor | None = None


class SequentialModule(nn.Module):
    """Runs layers in order; each gets Keras' ``training`` flag when its call takes one."""

    stack: Stack

    @nn.compact
    def __call__(self, x: Any, training: bool = False) -> Any:
        for layer, name in zip(self.stack.layers, self.stack.names):
            call = as_module(layer, name, self)
            x = call(x, **mode_kwargs(call, training))
        return x


def sequential_module(layers: Sequence[Any], name: str | None = None
                      ) -> tuple[SequentialModule, tuple[int | None, ...] | None]:
    """The Flax module of ``keras.Sequential(layers)`` and the input shape it declares.

    Args:
        layers: ``mirrorfit.layers`` layers, Flax modules or functions, optionally led by an
            `Input` tensor; or a first layer with ``input_shape=``/``input_dim=`` (legacy
            tf.keras, as Keras 3 still accepts).
        name: the model's name.

    Returns:
        ``(module, input_shape)``: ``input_shape`` is the declared shape with ``None`` batch,
        or ``None`` when the layers declare none.

    Raises:
        TypeError: an `Input` after the first position, or an entry that is not callable.

    Example:
        >>> L = mf.layers
        >>> module, shape = sequential_module([L.Input((4,)), L.Dense(8), L.Dense(1)])
        >>> shape
        (None, 4)
    """
    layers = list(layers)
    first = layers.pop(0) if layers and isinstance(layers[0], KerasTensor) else None
    declared = getattr(layers[0], "declared_input_shape", None) if layers else None
    if first is None and declared is not None:
        first = Input(declared)
    for i, layer in enumerate(layers):
        if isinstance(layer, KerasTensor) or not callable(layer):
            raise TypeError("Sequential takes layers (an Input may come first only). "
                            f"Received: layers[{i}]={layer!r}")
    stack = Stack(tuple(layers), assign_names(layers), first)
    return SequentialModule(stack, name=name), None if first is None else first.shape
