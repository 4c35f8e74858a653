"""How Keras masks flow from layer to layer in a functional or Sequential model.

A mask is bool ``[batch, timesteps]`` (True: a real step), attached in Keras 3 to the tensor
it describes. Here the model runner keeps it beside the tensor and, for each layer call,
does what Keras 3's ``Layer.__call__`` does:

* `mask_kwargs`: a layer whose call takes ``mask`` gets the mask of its only tensor
  argument (Keras' step "populate mask argument"); a call taking ``<arg>_mask`` beside
  ``<arg>`` (`MultiHeadAttention`'s ``query_mask``, ``value_mask``, ``key_mask``) gets the
  mask of ``<arg>``, as Keras' attention reads ``get_keras_mask(query)``;
* `output_masks`: the outputs' masks are ``layer.compute_mask(first_input, its_mask)``
  (Keras' ``_set_mask_metadata``): a layer with ``supports_masking`` passes the mask on,
  `Embedding` (``mask_zero``) and `Masking` make one, other layers drop it; a Keras-style
  `Layer` supports masking when it overrides ``compute_mask`` or sets
  ``self.supports_masking = True``;
* `sow_output_mask`: a model whose outputs have masks sows them into the `OUTPUT_MASK`
  collection (one output's mask, or several outputs' masks in the outputs' structure),
  where the built-in steps read them to mask each output's loss and metrics, as Keras 3's
  ``Loss.__call__`` reads the output's ``_keras_mask``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax

OUTPUT_MASK = "keras_mask"
"""The collection a model sows its output's mask into (`sow_output_mask`), under ``"mask"``."""


def _signature(layer: Any) -> inspect.Signature | None:
    call = layer.__call__ if isinstance(layer, nn.Module) else getattr(layer, "call", layer)
    try:
        return inspect.signature(call)
    except (TypeError, ValueError):
        return None


def _is_none(tree: Any) -> bool:
    return all(m is None for m in jax.tree.leaves(tree, is_leaf=lambda x: x is None))


def mask_kwargs(layer: Any, args: tuple, kwargs: dict[str, Any],
                mask_of: Callable[[Any], Any], is_tensor: Callable[[Any], bool]
                ) -> dict[str, Any]:
    """The mask arguments to add to ``layer(*args, **kwargs)``.

    Args:
        layer: the layer called (a Flax layer, a Keras-style layer or a function).
        args, kwargs: the call's arguments, as recorded (tensors as ``is_tensor`` leaves).
        mask_of: a tensor's mask (bool ``[batch, timesteps]``), or ``None``.
        is_tensor: whether a leaf of the arguments is a tensor.

    Returns:
        ``{"mask": ...}`` and/or ``{"<arg>_mask": ...}`` entries, only for masks that exist
        and arguments the call takes and was not given.
    """
    signature = _signature(layer)
    params = {} if signature is None else signature.parameters
    if signature is None or not any(name.endswith("mask") for name in params):
        return {}
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments
    except TypeError:  # the call itself reports it
        return {}
    tensors = {name: value for name, value in bound.items()
               if jax.tree.leaves(value) and all(is_tensor(x) for x in jax.tree.leaves(value))}
    extra: dict[str, Any] = {}
    if "mask" in params and bound.get("mask") is None and len(tensors) == 1:
        mask = jax.tree.map(mask_of, next(iter(tensors.values())))
        if not _is_none(mask):
            extra["mask"] = mask
    for name, value in tensors.items():
        key = f"{name}_mask"
        if key in params and bound.get(key) is None and (mask := mask_of(value)) is not None:
            extra[key] = mask
    return extra


def first_argument(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The call's first argument (Keras' ``call_spec.first_arg``), whose mask goes on."""
    return args[0] if args else next(iter(kwargs.values()), None)


def output_masks(layer: Any, inputs: Any, outputs: Any, mask: Any) -> list[Any]:
    """The masks of ``outputs``' leaves (``None`` where none), from ``layer.compute_mask``.

    Args:
        layer: the layer called.
        inputs: its first argument (arrays).
        outputs: what the call returned.
        mask: the mask of ``inputs`` (same structure; ``None`` leaves where none).

    Returns:
        One entry per leaf of ``outputs``.
    """
    count = len(jax.tree.leaves(outputs))
    compute = getattr(layer, "compute_mask", None)
    # A Flax layer's compute_mask says itself whether it passes masks on; a Keras-style
    # layer's only runs when it supports masking (Keras' `_set_mask_metadata`).
    keras_style_without = (not isinstance(layer, nn.Module)
                           and not getattr(layer, "supports_masking", False))
    if compute is None or keras_style_without:
        return [None] * count
    computed = compute(inputs, mask)
    flat = jax.tree.leaves(computed, is_leaf=lambda x: x is None)
    return (flat + [None] * count)[:count]


def sow_output_mask(module: nn.Module, mask: Any) -> None:
    """Sows a model's output mask (bool ``[batch, timesteps]``; for several outputs, their
    masks in the outputs' structure with ``None`` where an output has none) as
    ``OUTPUT_MASK/"mask"``.

    Nothing is sown for ``None``, while initializing (the mask is no variable), or unless the
    caller made `OUTPUT_MASK` mutable: a model without a mask runs the same program.
    """
    if mask is not None and not module.is_initializing():
        module.sow(OUTPUT_MASK, "mask", mask, init_fn=lambda: None,
                   reduce_fn=lambda _, new: new)
