"""Keras' weight order for models of ``mirrorfit.layers`` (``get_weights``/``set_weights``).

Keras lists a model's weights layer by layer (``model.layers`` order: Sequential order, or
the functional graph's depth order), and within a layer as it creates them: kernel before
bias, ``gamma, beta, moving_mean, moving_variance`` for BatchNormalization, ``kernel,
recurrent_kernel, bias`` for recurrent cells, ``mean, variance, count`` for Normalization,
the ``query, key, value, attention_output`` sublayers of MultiHeadAttention, and
Bidirectional's ``forward_*`` layer before its ``backward_*`` one. A Keras-style `Layer`
lists its weights in its own ``layer.weights`` order. Flax dicts come back key-sorted from JAX
transformations, so the order is rebuilt from names, never from dict order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import numpy as np

from mirrorfit._src.layers.graph.model_info import model_layers
from mirrorfit._src.variables import tracking

# Keras' creation order of weight and sublayer names inside one layer.
_CREATION_ORDER = ("query", "key", "value", "attention_output", "depthwise_kernel",
                   "pointwise_kernel", "kernel", "recurrent_kernel", "bias", "gamma", "beta",
                   "moving_mean", "moving_variance", "embeddings", "mean", "variance", "count")
_RANK = {name: i for i, name in enumerate(_CREATION_ORDER)}
_NOT_WEIGHTS = ("losses", "intermediates")

WeightPath = tuple[str, tuple[str, ...]]  # (collection, path inside the collection)


def _ordered(tree: Any, prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    # Bidirectional's forward layer comes before its backward layer, as Keras creates them.
    for key in sorted(tree, key=lambda k: (_RANK.get(k, len(_RANK)), k.startswith("backward_"),
                                           k)):
        if isinstance(tree[key], dict):
            yield from _ordered(tree[key], (*prefix, key))
        else:
            yield (*prefix, key)


def keras_weight_order(module: nn.Module, variables: dict[str, Any]) -> list[WeightPath]:
    """The ``(collection, path)`` of every weight in Keras' ``get_weights`` order.

    Args:
        module: a module from `functional_module` or `sequential_module`.
        variables: its variables, ``{"params": ..., "batch_stats": ..., ...}`` (a sown
            ``"losses"`` collection is skipped).

    Returns:
        Per layer in ``model.layers`` order: its ``"params"`` (trainable in Keras) then its
        other collections (BatchNorm's moving statistics), each in Keras' creation order;
        a Keras-style layer's in its ``weights`` order.

    Raises:
        TypeError: ``module`` is not a functional or sequential module.

    Example:
        >>> from mirrorfit._src.layers.graph.sequential import sequential_module
        >>> module, _ = sequential_module([Input((3,)), Dense(2), BatchNormalization()])
        >>> variables = module.init(jax.random.key(0), jnp.zeros((1, 3)))
        >>> ["/".join(p) for _, p in keras_weight_order(module, variables)][:3]
        ['dense/kernel', 'dense/bias', 'batch_normalization/gamma']
    """
    collections = ["params"] + sorted(c for c in variables if c != "params"
                                      and c not in _NOT_WEIGHTS)
    order: list[WeightPath] = []
    for name, layer in model_layers(module):
        if not isinstance(layer, nn.Module) and hasattr(layer, "__mf_variables__"):
            order += _object_order(layer, name, variables, collections)
            continue
        for collection in collections:
            subtree = variables.get(collection, {}).get(name)
            if isinstance(subtree, dict):
                order += [(collection, path) for path in _ordered(subtree, (name,))]
    return order


def _object_order(layer: Any, name: str, variables: dict[str, Any],
                  collections: list[str]) -> list[WeightPath]:
    """A Keras-style layer's weights (keyed by their joined attribute paths under ``name``,
    as `mirrorfit._src.layers.flax_bridge.LayerNode` stores them) in ``layer.weights`` order."""
    order: list[WeightPath] = []
    for path, _ in tracking.walk(layer):
        key = "/".join(path)
        order += [(c, (name, key)) for c in collections
                  if key in (variables.get(c, {}).get(name) or {})][:1]
    return order


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def get_weights(module: nn.Module, variables: dict[str, Any]) -> list[np.ndarray]:
    """The weights as NumPy arrays in Keras' order (as ``keras.Model.get_weights``)."""
    return [np.asarray(_get(variables[c], p)) for c, p in keras_weight_order(module, variables)]


def set_weights(module: nn.Module, variables: dict[str, Any],
                weights: Sequence[Any]) -> dict[str, Any]:
    """New variables holding ``weights`` given in Keras' order (as ``set_weights``).

    Raises:
        ValueError: the wrong number of arrays, or an array whose shape differs from the
            weight it replaces.
    """
    order = keras_weight_order(module, variables)
    if len(weights) != len(order):
        raise ValueError(f"set_weights expects {len(order)} arrays in Keras' order "
                         f"({[c + ':' + '/'.join(p) for c, p in order]}). "
                         f"Received: {len(weights)} arrays")
    new = _copy(variables)
    for (collection, path), value in zip(order, weights):
        parent = _get(new[collection], path[:-1])
        old = parent[path[-1]]
        value = np.asarray(value)
        if value.shape != tuple(old.shape):
            raise ValueError(f"Weight {collection}:{'/'.join(path)} has shape {tuple(old.shape)}"
                             f". Received: an array of shape {value.shape}")
        parent[path[-1]] = value.astype(old.dtype)
    return new


def _copy(tree: Any) -> Any:
    return {k: _copy(v) for k, v in tree.items()} if isinstance(tree, dict) else tree
