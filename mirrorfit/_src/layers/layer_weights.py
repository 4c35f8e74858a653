"""`LayerWeights`: the weights side of a Keras-style `Layer` (mixed into it), as Keras 3's
``Layer`` tracks them.

A layer's weights are its own (``add_weight``, and `Variable` s assigned to it; the ones
created trainable first, each in creation order) followed by those of the layers and other
trackable objects in its attributes, in assignment order (list items and dict values
included): `tracking.walk` over ``__mf_variables__``. Freezing (``trainable = False``) flags
the weights created trainable and every layer below, as Keras; ``trainable_weights`` of a
frozen layer is empty. ``get_weights``/``set_weights``/``count_params`` follow that order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np

from mirrorfit._src.constraints import constraints
from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers import auto_config
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

