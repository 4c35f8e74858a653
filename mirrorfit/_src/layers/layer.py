"""`Layer`: Keras 3's layer object model, for layers and models you subclass.

A subclass writes Keras code unchanged: ``__init__(self, ..., **kwargs)`` calling
``super().__init__(**kwargs)``, sub-layers assigned as attributes (also in lists and dicts),
``build(self, input_shape)`` with ``self.add_weight(...)``, and ``call(self, inputs,
training=None)``. The layer owns `mirrorfit.Variable` s; ``fit``'s compiled step and
``strategy.run`` trace it in a stateless scope, so it stays a plain Python object.

This module owns the object side: tracking (`tracking.walk` over the attributes), lazy
building, the call context (``training`` reaches nested layers that are not passed it),
``add_loss``/``losses`` and the auto-config behind ``get_config``. Built-in
``mirrorfit.layers`` are Flax modules (`FlaxLayer`); used inside a `Layer` they run through
`mirrorfit._src.layers.flax_bridge`; a `Layer` inside a functional or Sequential model runs
through the same module's `LayerNode`.
"""

from __future__ import annotations

import abc
import collections
import inspect
import json
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.layers import functional, initializers, regularizers
from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import call_context, tracking
from mirrorfit._src.variables.variable import Variable

_NAME_COUNTS: collections.Counter[str] = collections.Counter()
_BASE_ARGS = ("trainable", "name", "dtype", "autocast", "activity_regularizer",
              "input_shape", "input_dim")
_FLOAT_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
                 "mixed_bfloat16": jnp.bfloat16, "mixed_float16": jnp.float16}


def unique_name(base: str) -> str:
    """Keras' default layer names: ``base``, then ``base_1``, ``base_2``, ... per process."""
    count = _NAME_COUNTS[base]
    _NAME_COUNTS[base] += 1
    return base if count == 0 else f"{base}_{count}"


def _initializer(identifier: Any, dtype: Any) -> Any:
    """``(shape, dtype) -> array`` from a Keras name or a callable.

    Keras' initializers are ``(shape, dtype)``; ``mirrorfit.layers`` (and ``jax.nn``) ones
    take a key first. A name or a callable whose first parameter is ``key`` gets the next
    key of the init stream.
    """
    if identifier is None:
        identifier = "glorot_uniform" if jnp.issubdtype(dtype, jnp.floating) else "zeros"
    fn = initializers.get(identifier)
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        first = None
    if isinstance(identifier, str) or first in ("key", "rng", "prng_key"):
        key = call_context.init_rng()
        return lambda shape, dtype: fn(key, shape, dtype)
    return fn


def is_keras_layer(value: Any) -> bool:
    """Whether ``value`` is a Keras-style `Layer` object (not a registered Flax layer)."""
    return Layer in type(value).__mro__


class Layer(metaclass=abc.ABCMeta):
    """The base class of Keras-style layers and models, as ``keras.layers.Layer``.

    Args:
        trainable: whether the layer's weights are trained (settable later:
            ``layer.trainable = False`` freezes every weight below it).
        name: the layer's name; default the class name in snake_case, numbered
            (``"token_and_position_embedding"``, ``"..._1"``).
        dtype: the compute dtype or policy name (``"float32"``, ``"mixed_bfloat16"``, ...):
            floating inputs are cast to it; weights stay float32.
        autocast: whether floating inputs are cast to the compute dtype.
        activity_regularizer: a penalty of the outputs, added to ``losses`` divided by the
            batch size (as Keras 3).
        input_shape, input_dim: tf.keras' legacy input declaration, for the first layer of
            a Sequential model.

    Raises:
        TypeError: an unknown keyword argument (Keras' "Unrecognized keyword arguments").

    Example:
        >>> class Linear(mf.layers.Layer):
        ...     def __init__(self, units=4, **kwargs):
        ...         super().__init__(**kwargs)
        ...         self.units = units
        ...     def build(self, input_shape):
        ...         self.w = self.add_weight(shape=(input_shape[-1], self.units), name="w")
        ...         self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")
        ...     def call(self, inputs):
        ...         return inputs @ self.w + self.b
        >>> layer = Linear(4)
        >>> layer(jnp.ones((2, 3))).shape
        (2, 4)
        >>> [v.path for v in layer.weights]
        ['linear/w', 'linear/b']
    """

    _mf_skip: frozenset[str] = frozenset()  # attributes that never hold the layer's variables

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__ and "call" not in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} defines __call__; a Keras-style layer defines "
                "`call(self, inputs, training=None)` and mf.layers.Layer.__call__ runs it "
                "(building, training flag, losses). Rename __call__ to call, or subclass "
                "mf.layers.FlaxLayer to write a flax.linen layer.")

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)
        try:  # Keras 3 records the constructor arguments for the default get_config.
            bound = inspect.signature(cls.__init__).bind(instance, *args, **kwargs)
            arguments = dict(list(bound.arguments.items())[1:])
            arguments.update(arguments.pop("kwargs", {}) if isinstance(
                arguments.get("kwargs"), dict) else {})
        except TypeError:
            arguments = None
        object.__setattr__(instance, "_mf_auto_config", arguments)
        return instance

    def __init__(self, *, trainable: bool = True, name: str | None = None, dtype: Any = None,
                 autocast: bool = True, activity_regularizer: Any = None,
                 input_shape: Any = None, input_dim: int | None = None, **kwargs: Any):
        if kwargs:
            raise TypeError(f"Unrecognized keyword arguments passed to {type(self).__name__}: "
                            f"{kwargs}. Keras layers take {_BASE_ARGS} besides their own.")
        self._mf_own: list[Variable] = []
        self._mf_losses: list[Any] = []
        self._mf_trainable = bool(trainable)
        self.name = name or unique_name(snake_case(type(self).__name__))
        self.dtype = dtype
        self.autocast = autocast
        self.activity_regularizer = regularizers.get(activity_regularizer)
        if input_dim is not None:
            input_shape = (input_dim,)
        self._mf_input_shape = None if input_shape is None else tuple(input_shape)
        self._mf_built = False

    def __getattr__(self, name: str) -> Any:
        # Reached only for missing attributes: say why when __init__ never ran.
        if name.startswith("_mf") or name == "name":
            raise RuntimeError(
                f"{type(self).__name__} is used before Layer.__init__ ran: call "
                "`super().__init__(**kwargs)` at the start of your __init__.")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def built(self) -> bool:
        """Whether ``build`` has run (set it in your own ``build``, as Keras)."""
        return self._mf_built

    @built.setter
    def built(self, value: bool) -> None:
        self._mf_built = bool(value)

    # -- weights -------------------------------------------------------------------------
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
            dtype: default float32.
            trainable: whether gradients update it (``trainable_weights``).
            autocast: accepted for Keras compatibility (weights are read in their dtype).
            regularizer: a name, config or callable penalty, added to ``losses``.
            constraint: a callable ``w -> w`` applied after each optimizer update.
            aggregation: how replicas combine assignments (see `mirrorfit.Variable`).
            name: the weight's name (its path is ``"<layer name>/<name>"``); default
                ``"variable_<n>"``, numbered within the layer.

        Returns:
            The new `mirrorfit.Variable`.

        Raises:
            ValueError: a name this layer already uses.
        """
        del autocast
        dtype = jnp.dtype(dtype or jnp.float32)
        name = name or f"variable_{len(self._mf_own)}"
        if any(v.name == name for v in self._mf_own):
            raise ValueError(f"Layer {self.name!r} already has a weight named {name!r}; give "
                             f"each add_weight its own name=. Received: name={name!r}")
        variable = Variable(_initializer(initializer, dtype), shape=tuple(shape or ()),
                            dtype=dtype, trainable=trainable and self._mf_trainable, name=name,
                            aggregation=aggregation,
                            regularizer=regularizers.get(regularizer), constraint=constraint)
        variable.path = f"{self.name}/{name}"
        self._mf_own.append(variable)
        return variable

    add_variable = add_weight

    def __mf_variables__(self) -> list[tuple[Any, Any]]:
        """Own weights first (creation order), then the attributes' (Keras' order)."""
        own = [((v.name,), v) for v in self._mf_own]
        return [*own, *self._mf_children()]

    def _mf_children(self) -> list[tuple[str, Any]]:
        return [(name, value) for name, value in tracking.attribute_children(self)
                if name not in self._mf_skip]

    @property
    def variables(self) -> list[Variable]:
        """Every variable of this layer and the layers below it, in Keras' order."""
        return tracking.variables_of(self)

    @property
    def weights(self) -> list[Variable]:
        return self.variables

    @property
    def trainable_variables(self) -> list[Variable]:
        return [v for v in self.variables if v.trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self) -> list[Variable]:
        return [v for v in self.variables if not v.trainable]

    non_trainable_weights = non_trainable_variables

    @property
    def trainable(self) -> bool:
        return self._mf_trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        """Freezes (or unfreezes) this layer and every weight and layer below it."""
        self._mf_trainable = bool(value)
        for variable in self.variables:
            variable.trainable = bool(value)
        for layer in self._sublayers():
            if is_keras_layer(layer):
                layer._mf_trainable = bool(value)

    def _sublayers(self) -> Iterator[Any]:
        """Layers (this package's and Flax ones) held in attributes, depth first."""
        def visit(value: Any) -> Iterator[Any]:
            if isinstance(value, (list, tuple)):
                for item in value:
                    yield from visit(item)
            elif isinstance(value, dict):
                for item in value.values():
                    yield from visit(item)
            elif hasattr(value, "__mf_variables__") and not isinstance(value, Variable):
                yield value
                if is_keras_layer(value):
                    yield from value._sublayers()
        for _, child in self._mf_children():
            yield from visit(child)

    @property
    def layers(self) -> list[Any]:
        """The layers held directly in attributes (Keras' ``_layers``)."""
        found: list[Any] = []
        for _, child in self._mf_children():
            stack = [child]
            while stack:
                value = stack.pop(0)
                if isinstance(value, (list, tuple)):
                    stack[:0] = list(value)
                elif isinstance(value, dict):
                    stack[:0] = list(value.values())
                elif hasattr(value, "__mf_variables__") and not isinstance(value, Variable):
                    found.append(value)
        return found

    def get_weights(self) -> list[Any]:
        """The weights as NumPy arrays, in `weights` order."""
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights: list[Any]) -> None:
        """Assigns NumPy arrays in `weights` order.

        Raises:
            ValueError: a different number of arrays, or a shape mismatch.
        """
        mine = self.weights
        if len(weights) != len(mine):
            raise ValueError(f"Layer {self.name!r} has {len(mine)} weights. Received: "
                             f"{len(weights)} arrays")
        for variable, value in zip(mine, weights):
            variable.assign(value)

    def count_params(self) -> int:
        """The number of scalars in all weights."""
        return sum(int(jnp.size(v.value)) for v in self.weights)

    # -- losses --------------------------------------------------------------------------
    def add_loss(self, loss: Any) -> None:
        """Adds a scalar to this forward pass's ``losses`` (``fit`` adds them to the loss)."""
        self._mf_losses.append(loss)

    @property
    def losses(self) -> list[Any]:
        """This forward pass's ``add_loss`` values (this layer's, then those below) and the
        weight regularizers' penalties of the current weights, as Keras 3."""
        found = list(self._mf_losses)
        for layer in self._sublayers():
            found += list(getattr(layer, "_mf_losses", None) or [])
        for variable in self.variables:
            if variable.regularizer is not None:
                found.append(variable.regularizer(variable.value))
        return found

    def _clear_losses(self) -> None:
        self._mf_losses = []
        for layer in self._sublayers():
            if getattr(layer, "_mf_losses", None):
                object.__setattr__(layer, "_mf_losses", [])

    # -- calling -------------------------------------------------------------------------
    def build(self, input_shape: Any) -> None:
        """Creates the weights for inputs of ``input_shape`` (batch axis included).

        The default creates none; sub-layers build when first called.
        """
        del input_shape
        self._mf_built = True

    build._mf_default_build = True  # type: ignore[attr-defined]

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """The forward pass; subclasses implement it (``training`` and ``mask`` optional)."""
        raise NotImplementedError(f"{type(self).__name__} must implement call(self, inputs).")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if functional.is_symbolic((args, kwargs)):
            return functional.symbolic_call(self, args, kwargs)
        outer = call_context.current()
        training = kwargs.pop("training", None)
        with call_context.call_context(training=training) as context:
            if outer is None:
                self._clear_losses()
            self._maybe_build(args, kwargs)
            call_kwargs = self._call_kwargs(kwargs, context.training)
            if self.autocast:
                args = self._cast(args)
            outputs = self.call(*args, **call_kwargs)
            if self.activity_regularizer is not None:
                first = jax.tree.leaves(outputs)[0]
                self.add_loss(self.activity_regularizer(first) / first.shape[0])
        return outputs

    def _call_kwargs(self, kwargs: dict[str, Any], training: bool | None) -> dict[str, Any]:
        params = inspect.signature(self.call).parameters
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
        if ("training" in params or takes_kwargs) and training is not None:
            kwargs["training"] = training
        if "mask" in kwargs and kwargs["mask"] is None and "mask" not in params:
            kwargs.pop("mask")
        return kwargs

    def _maybe_build(self, args: tuple, kwargs: dict[str, Any]) -> None:
        if self._mf_built:
            return
        first = args[0] if args else next(iter(kwargs.values()), None)
        shapes = jax.tree.map(lambda a: tuple(jnp.shape(a)), first)
        if not getattr(type(self).build, "_mf_default_build", False):  # the user's build
            self.build(shapes)
        self._mf_built = True

    @property
    def compute_dtype(self) -> Any:
        name = getattr(self.dtype, "name", self.dtype)
        return _FLOAT_DTYPES.get(name, jnp.dtype(name) if name else jnp.float32)

    def _cast(self, args: Any) -> Any:
        dtype = self.compute_dtype
        if dtype == jnp.float32:
            return args
        return jax.tree.map(lambda a: a.astype(dtype) if hasattr(a, "dtype") and jnp.issubdtype(
            a.dtype, jnp.floating) else a, args)

    @property
    def declared_input_shape(self) -> tuple[int, ...] | None:
        """The legacy ``input_shape``/``input_dim`` (no batch axis), if given."""
        return self._mf_input_shape

    # -- config --------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, as ``keras.layers.Layer.get_config``.

        The default returns the arguments the layer was constructed with, when they are
        JSON-able (as Keras 3's auto-config); override it otherwise.

        Raises:
            NotImplementedError: the arguments are not JSON-able and get_config is not
                overridden.
        """
        config: dict[str, Any] = {"name": self.name, "trainable": self.trainable}
        if self.dtype is not None:
            config["dtype"] = str(getattr(self.dtype, "name", self.dtype))
        arguments = self._mf_auto_config
        try:
            json.dumps(arguments)
        except TypeError:
            arguments = None
        if arguments is None:
            raise NotImplementedError(
                f"{type(self).__name__}.get_config: its constructor arguments are not JSON-able "
                f"(Received: {self._mf_auto_config!r}); override get_config() to return them, "
                "and from_config() if they need rebuilding.")
        return {**config, **arguments}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """``cls(**config)``, as ``keras.layers.Layer.from_config``."""
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"

