"""Keras' ``Sequential`` as a Flax module: layers run in order, each under its name.

A Sequential led by an `Input` builds its Keras-style layers on symbolic tensors at once, as
Keras' ``Sequential.build`` does (their ``build`` gets a ``None`` batch axis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax

from mirrorfit._src.layers.graph import mask_flow
from mirrorfit._src.layers.graph.functional import (
    Input,
    KerasTensor,
    as_module,
    assign_names,
    eval_shapes,
    mode_kwargs,
)
from mirrorfit._src.layers.graph.input_layer import InputLayer


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
        mask = None  # the Keras mask of x, bool [batch, timesteps], once a layer makes one
        for layer, name in zip(self.stack.layers, self.stack.names):
            call = as_module(layer, name, self)
            extra = mask_flow.mask_kwargs(layer, (x,), {}, lambda _, m=mask: m,
                                          lambda _: True)
            y = call(x, **extra, **mode_kwargs(call, training))
            out_masks = mask_flow.output_masks(layer, x, y, mask)
            x, mask = y, out_masks[0] if len(out_masks) == 1 else None
        mask_flow.sow_output_mask(self, mask)
        return x


def _is_keras_style(layer: Any) -> bool:
    return not isinstance(layer, nn.Module) and hasattr(layer, "__mf_variables__")


def output_shapes(layers: Sequence[Any], input_shape: Sequence[int | None], dtype: Any
                  ) -> list[Any]:
    """Each layer's output shape, ``(None, ...)``, for inputs of ``input_shape`` (batch
    first; its size is ignored).

    Flax layers and functions are traced with ``jax.eval_shape``; Keras-style layers are
    called on symbolic tensors, which builds them with a ``None`` batch axis.
    """
    x: Any = KerasTensor((None, *input_shape[1:]), dtype)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    shapes = []
    for layer in layers:
        if isinstance(layer, nn.Module):
            kwargs = mode_kwargs(layer, False)
            unbound = layer.clone(parent=None, name=None)
            fn = lambda a, u=unbound, kw=kwargs: u.init_with_output(rngs, a, **kw)[0]
        elif _is_keras_style(layer):
            fn = None
        else:
            fn = layer
        if fn is None:
            x = layer(x)
        else:
            leaves, treedef = jax.tree.flatten(x)
            out = eval_shapes(lambda *a, f=fn, d=treedef: f(jax.tree.unflatten(d, a)),
                              [t.shape for t in leaves], [t.dtype for t in leaves])
            x = jax.tree.map(lambda s: KerasTensor(s.shape, s.dtype), out)
        shapes.append(jax.tree.map(lambda t: tuple(t.shape), x))
    return shapes


def sequential_module(layers: Sequence[Any], name: str | None = None
                      ) -> tuple[SequentialModule, tuple[int | None, ...] | None]:
    """The Flax module of ``keras.Sequential(layers)`` and the input shape it declares.

    Args:
        layers: ``mirrorfit.layers`` layers, Flax modules or functions, optionally led by an
            `Input` tensor or an `InputLayer`; or a first layer with
            ``input_shape=``/``input_dim=`` (legacy
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
    layers = [layer.output if isinstance(layer, InputLayer) else layer for layer in layers]
    first = layers.pop(0) if layers and isinstance(layers[0], KerasTensor) else None
    declared = getattr(layers[0], "declared_input_shape", None) if layers else None
    if first is None and declared is not None:
        first = Input(declared)
    for i, layer in enumerate(layers):
        if isinstance(layer, KerasTensor) or not callable(layer):
            raise TypeError("Sequential takes layers (an Input may come first only). "
                            f"Received: layers[{i}]={layer!r}")
    if first is not None and any(_is_keras_style(layer) for layer in layers):
        output_shapes(layers, first.shape, first.dtype)  # builds them, as Keras
    stack = Stack(tuple(layers), assign_names(layers), first)
    return SequentialModule(stack, name=name), None if first is None else first.shape
