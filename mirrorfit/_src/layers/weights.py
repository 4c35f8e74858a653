"""Weights in Keras' order: a Keras-style layer's (`LayerWeights`, mixed into `Layer`), and a
model of ``mirrorfit.layers``'s (`keras_weight_order`, for ``get_weights``/``set_weights``).

A layer's weights are its own (``add_weight``, and `Variable` s assigned to it; the ones
created trainable first, each in creation order) followed by those of the layers and other
trackable objects in its attributes, in assignment order (list items and dict values
included): `tracking.walk` over ``__mf_variables__``. Freezing (``trainable = False``) flags
the weights created trainable and every layer below, as Keras; ``trainable_weights`` of a
frozen layer is empty. ``get_weights``/``set_weights``/``count_params`` follow that order.

A model lists its weights layer by layer (``model.layers`` order: Sequential order, or the
functional graph's depth order), and within a layer as Keras creates them: kernel before
bias, ``gamma, beta, moving_mean, moving_variance`` for BatchNormalization, ``kernel,
recurrent_kernel, bias`` for recurrent cells, ``mean, variance, count`` for Normalization,
the ``query, key, value, attention_output`` sublayers of MultiHeadAttention, and
Bidirectional's ``forward_*`` layer before its ``backward_*`` one; a Keras-style `Layer` of
the model lists its weights in its own ``layer.weights`` order. Flax dicts come back
key-sorted from JAX transformations, so the order is rebuilt from names, never from dict
order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.constraints import constraints
from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers import auto_config
from mirrorfit._src.layers.flax_bridge import SOWN_LOSSES
from mirrorfit._src.layers.graph.model_info import model_layers
from mirrorfit._src.layers.name_scope import weight_path
from mirrorfit._src.regularizers import regularizers
from mirrorfit._src.variables import tracking
from mirrorfit._src.variables.variable import Variable

SUPER_NOT_CALLED = (
    "In layer '{cls}', you forgot to call `super().__init__()` as the first statement in the "
    "`__init__()` method. Go add it! (mirrorfit.layers.Layer.__init__ sets up the layer's "
    "name, weights and losses; pass it your **kwargs.)")


def _is_layer(value: Any) -> bool:
    """A layer of any kind: Keras-style, a ``mirrorfit.layers`` Flax layer, or a wrapped
    ``flax.linen`` module (objects listing their variables, other than a `Variable`)."""
    return hasattr(value, "__mf_variables__") and not isinstance(value, Variable)


ADD_WEIGHT_AFTER_BUILD = (
    "You cannot add new weights to layer {layer!r}, which is already built (its build() ran, "
    "so its call() runs on the model's traced weights and a weight made there or later "
    "belongs to no model): create every weight in __init__() or in build(self, "
    "input_shape), which the first call runs with the input's shape, as Keras requires. "
    "Received: add_weight(name={name!r}) after build")
"""Error for ``add_weight`` in ``call`` or after the first call (Keras' locked state)."""


class LayerWeights:
    """Weight creation, tracking and freezing of a `mirrorfit.layers.Layer`.

    The layer's ``__init__`` sets the attributes read here: ``_mf_trainable_own`` and
    ``_mf_non_trainable_own`` (own weights by trainability at creation), ``_mf_trainable``
    and ``name``; ``_mf_skip`` names attributes that never hold weights.
    """

    _mf_skip: frozenset[str] = frozenset()  # attributes that never hold the layer's variables
    _mf_trainable_own: list[Variable]  # own weights created trainable (Keras' order)
    _mf_non_trainable_own: list[Variable]
    _mf_trainable: bool
    name: str
    built: bool  # Layer's property
    variable_dtype: str  # Layer's property: the dtype weights are created in

    def _check_super_called(self) -> None:
        if "_mf_trainable_own" not in self.__dict__:
            raise RuntimeError(SUPER_NOT_CALLED.format(cls=type(self).__name__))

    def add_weight(self, shape: Any = None, initializer: Any = None, dtype: Any = None,
                   trainable: bool = True, autocast: bool = True, regularizer: Any = None,
                   constraint: Any = None, aggregation: str = "none",
                   name: str | None = None) -> Variable:
        """Creates a weight of this layer, as ``keras.layers.Layer.add_weight``.

        Args:
            shape: the weight's shape (default ``()``).
            initializer: a Keras name (``"glorot_uniform"``, the default for floats;
                ``"zeros"`` otherwise) or a callable ``(shape, dtype)``; a callable taking
                ``key`` first (``jax.nn.initializers``) gets a key from the init stream.
            dtype: default the policy's variable dtype (float32).
            trainable: whether gradients update it (``trainable_weights``); a weight added
                to a frozen layer is created non-trainable, and unfreezing makes it
                trainable (as Keras).
            autocast: accepted for Keras compatibility (weights are read in their dtype).
            regularizer: a name, config or callable penalty of the weight, added to
                ``losses`` while the weight is trainable.
            constraint: a callable ``w -> w`` (e.g. `mirrorfit.constraints.MaxNorm`), a
                Keras constraint name (``"non_neg"``) or config, kept as the variable's
                ``constraint`` (applied after each optimizer update, as Keras).
            aggregation: how replicas combine assignments (see `mirrorfit.Variable`).
            name: the weight's name, unique within the layer (default ``"variable"``,
                ``"variable_1"``, ...); its ``path`` is ``"<layer name>/<name>"``, under the
                names of the layers around it (``"block/linear/w"``).

        Returns:
            The new `mirrorfit.Variable`.

        Raises:
            ValueError: a name this layer already uses, a name given positionally (tf.keras
                2's ``add_weight("kernel", ...)``), a constraint that is neither a callable nor
                a Keras constraint name, a layer already built (in its ``call`` or later: as
                Keras, weights are created in ``__init__`` or ``build``), or what
                `mirrorfit.Variable` raises.
            RuntimeError: ``super().__init__()`` was not called.
        """
        del autocast
        self._check_super_called()
        if self.__dict__.get("_mf_state_locked"):
            raise ValueError(ADD_WEIGHT_AFTER_BUILD.format(layer=self.name, name=name))
        if isinstance(shape, str):
            raise ValueError("`name` must be passed as a keyword argument. Received: "
                             f"add_weight({shape!r}, ...). Use: add_weight(shape=..., "
                             f"name={shape!r}).")
        constraint = constraints.get(constraint)
        dtype = jnp.dtype(dtype or self.variable_dtype)
        taken = {v.name for v in self._mf_trainable_own + self._mf_non_trainable_own}
        if name in taken:
            raise ValueError(f"Layer {self.name!r} already has a weight named {name!r}; give "
                             f"each add_weight its own name=. Received: name={name!r}")
        n = len(taken)
        while name is None or name in taken:  # Keras' "variable", "variable_1", ...
            name, n = "variable" if n == 0 else f"variable_{n}", n + 1
        variable = Variable(initializers.variable_initializer(initializer, dtype),
                            shape=tuple(shape or ()), dtype=dtype, trainable=trainable, name=name,
                            aggregation=aggregation,
                            regularizer=regularizers.get(regularizer), constraint=constraint)
        variable.path = weight_path(self.name, self, name)
        self._track_variable(variable)
        return variable

    add_variable = add_weight

    def _track_variable(self, variable: Variable) -> None:
        """Keras' ``_track_variable``: own weights in creation order, the trainable ones
        first; a weight of a frozen layer is marked non-trainable."""
        if any(variable is v for v in self._mf_trainable_own + self._mf_non_trainable_own):
            return
        (self._mf_trainable_own if variable.trainable
         else self._mf_non_trainable_own).append(variable)
        if not self._mf_trainable:
            variable.trainable = False

    def _mf_children(self) -> list[tuple[str, Any]]:
        """`tracking.attribute_children` less the class's ``_mf_skip`` attributes."""
        return [(name, value) for name, value in tracking.attribute_children(self)
                if name not in self._mf_skip]

    def _children(self) -> list[tuple[tuple[str, ...], Any]]:
        """The attributes' layers and other trackable objects, in assignment order, with
        their attribute paths (list indices and dict keys included)."""
        found: list[tuple[tuple[str, ...], Any]] = []

        def visit(value: Any, path: tuple[str, ...]) -> None:
            if isinstance(value, Variable):
                return
            if isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    visit(item, (*path, str(i)))
            elif isinstance(value, dict):
                for key, item in value.items():
                    visit(item, (*path, str(key)))
            elif tracking.is_trackable(value):
                found.append((path, value))

        for name, value in self._mf_children():
            visit(value, (name,))
        return found

    def _own_variables(self) -> list[Variable]:
        assigned = [leaf for _, value in self._mf_children()
                    for leaf in auto_config.flat_values(value) if isinstance(leaf, Variable)]
        own = [*self._mf_trainable_own, *self._mf_non_trainable_own]
        return own + [v for v in assigned if not any(v is o for o in own)]

    def __mf_variables__(self) -> list[tuple[Any, Any]]:
        """Own weights first (the trainable ones, then the others, each in creation order),
        then each attribute's (Keras' order), as ``(path, variable or object)``."""
        pairs: list[tuple[tuple[str, ...], Any]] = []
        taken: set[str] = set()
        for variable in self._own_variables():
            key, n = variable.name, 0
            while key in taken:
                n += 1
                key = f"{variable.name}_{n}"
            taken.add(key)
            pairs.append(((key,), variable))
        return pairs + self._children()

    @property
    def variables(self) -> list[Variable]:
        """Every variable of this layer and the layers below it, in Keras' order."""
        return tracking.variables_of(self)

    @property
    def weights(self) -> list[Variable]:
        """The weights in Keras' order: this layer's own (trainable ones first), then each
        sub-layer's in assignment order."""
        return self.variables

    @property
    def trainable_variables(self) -> list[Variable]:
        """`weights` that are trainable; ``[]`` when this layer is frozen."""
        return [v for v in self.weights if v.trainable] if self._mf_trainable else []

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self) -> list[Variable]:
        """`weights` that are not trainable; all of them when this layer is frozen."""
        return [v for v in self.weights if not v.trainable] if self._mf_trainable else \
            self.weights

    non_trainable_weights = non_trainable_variables

    @property
    def trainable(self) -> bool:
        """Whether the layer trains; setting it sets every layer below it and the weights
        created trainable (those created non-trainable stay so)."""
        return self._mf_trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        value = bool(value)
        self._mf_trainable = value
        for variable in self._mf_trainable_own:
            variable.trainable = value
        for layer in self.layers:
            layer.trainable = value

    def _sublayers(self) -> Iterator[Any]:
        """Every layer below this one (Keras-style, Flax and wrapped ones), depth first."""
        for layer in self.layers:
            yield layer
            if isinstance(layer, LayerWeights):
                yield from layer._sublayers()

    @property
    def layers(self) -> list[Any]:
        """The layers held directly in attributes, in assignment order (Keras' ``_layers``)."""
        return [child for _, child in self._children() if _is_layer(child)]

    def get_weights(self) -> list[np.ndarray]:
        """The weights as NumPy arrays, in `weights` order."""
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights: list[Any]) -> None:
        """Assigns NumPy arrays in `weights` order.

        Raises:
            ValueError: a different number of arrays, or a shape mismatch.
        """
        mine = self.weights
        if len(weights) != len(mine):
            raise ValueError(f"You called `set_weights(weights)` on layer '{self.name}' with a "
                             f"weight list of length {len(weights)}, but the layer was "
                             f"expecting {len(mine)} weights ({[v.path for v in mine]}).")
        for variable, value in zip(mine, weights):
            if tuple(np.shape(value)) != variable.shape:
                raise ValueError(f"Layer {self.name} weight shape {variable.shape} is not "
                                 "compatible with provided weight shape "
                                 f"{tuple(np.shape(value))} (weight {variable.path!r}).")
            variable.assign(value)

    def count_params(self) -> int:
        """The number of scalars in all weights.

        Raises:
            ValueError: the layer is not built yet.
        """
        if not self.built:
            raise ValueError(f"You tried to call `count_params` on layer '{self.name}', but "
                             "the layer isn't built. You can build it manually via: "
                             "`layer.build(input_shape)`, or call it on a batch first.")
        return sum(int(np.prod(v.shape)) for v in self.weights)


# -- a model's weights in Keras' order (get_weights/set_weights) -----------------------------

# Keras' creation order of weight and sublayer names inside one layer.
_CREATION_ORDER = ("query", "key", "value", "attention_output", "depthwise_kernel",
                   "pointwise_kernel", "kernel", "recurrent_kernel", "bias", "gamma", "beta",
                   "moving_mean", "moving_variance", "embeddings", "mean", "variance", "count")
_RANK = {name: i for i, name in enumerate(_CREATION_ORDER)}
_NOT_WEIGHTS = (SOWN_LOSSES, "intermediates")

CollectionPath = tuple[str, tuple[str, ...]]  # (collection, path inside the collection)


def _ordered(tree: Any, prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    # Bidirectional's forward layer comes before its backward layer, as Keras creates them.
    for key in sorted(tree, key=lambda k: (_RANK.get(k, len(_RANK)), k.startswith("backward_"),
                                           k)):
        if isinstance(tree[key], dict):
            yield from _ordered(tree[key], (*prefix, key))
        else:
            yield (*prefix, key)


def keras_weight_order(module: nn.Module, variables: dict[str, Any]) -> list[CollectionPath]:
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
    order: list[CollectionPath] = []
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
                  collections: list[str]) -> list[CollectionPath]:
    """A Keras-style layer's weights (keyed by their joined attribute paths under ``name``,
    as `mirrorfit._src.layers.flax_bridge.LayerNode` stores them) in ``layer.weights`` order."""
    order: list[CollectionPath] = []
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
