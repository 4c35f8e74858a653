"""The order of a model's weights in ``get_weights``/``set_weights``.

A model of ``mirrorfit.layers`` lists them as Keras does (`keras_order`: layer by layer,
kernel before bias; see `mirrorfit._src.layers.weights`). Any other Flax module lists them in
the order the module created them (`creation_order`: Flax's insertion order, so a
``flax.linen.Dense`` gives ``kernel`` before ``bias``), params first, then the other
collections. ``jax.tree.leaves`` would sort the dict keys instead (``bias`` before
``kernel``), and JAX transformations return key-sorted dicts, so the creation order is read
while ``init`` is traced, before any dict is rebuilt.

A weight is named by its path in the tree ``(params, model_state)``: ``(0, "dense",
"kernel")`` for a param, ``(1, "batch_stats", "bn", "mean")`` for another collection.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import traverse_util

from mirrorfit._src.layers.weights import keras_weight_order
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.objects import NON_TRAINABLE
from mirrorfit._src.variables import tracking

WeightPath = tuple[Any, ...]


def _key(entry: Any) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return str(entry)


def tree_paths(tree: Any) -> list[WeightPath]:
    """The path of every leaf of ``tree`` in ``jax.tree.leaves`` order."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [tuple(_key(entry) for entry in path) for path, _ in flat]


def _insertion_paths(tree: Any, prefix: WeightPath) -> list[WeightPath]:
    if isinstance(tree, dict):  # a dict as Flax built it keeps its insertion order
        return [path for key, value in tree.items()
                for path in _insertion_paths(value, (*prefix, key))]
    return [(*prefix, *path) for path in tree_paths(tree)]


def creation_order(adapter: ModuleAdapter, rng: jax.Array, sample: Any) -> list[WeightPath]:
    """The paths of the variables in the order ``adapter.init(rng, sample)`` creates them.

    Args:
        adapter: the model's module adapter.
        rng: the init key (only traced: nothing is computed).
        sample: an example batch ``[1, ...]`` of the model's inputs.
    """
    found: list[WeightPath] = []

    def init(key, x):
        params, model_state = adapter.init(key, x)
        found.extend(_insertion_paths(params, (0,)) + _insertion_paths(model_state, (1,)))
        return params, model_state

    jax.eval_shape(init, rng, sample)
    return found


def keras_order(module: Any, params: Any, model_state: Any) -> list[WeightPath]:
    """The paths of a layers model's weights in Keras' ``get_weights`` order."""
    order = keras_weight_order(module, {"params": params, **model_state})
    return [(0, *path) if collection == "params" else (1, collection, *path)
            for collection, path in order]


def variables_order(model: Any, params: Any) -> list[WeightPath]:
    """A subclassed model's weight paths in its ``weights`` order (Keras' ``get_weights``):
    ``(0, *path)`` for a param, ``(1, "non_trainable", *path)`` for the others."""
    trainable = set(traverse_util.flatten_dict(params))
    return [(0, *path) if path in trainable else (1, NON_TRAINABLE, *path)
            for path, _ in tracking.walk(model)]
