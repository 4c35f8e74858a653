"""`Layer`: Keras 3's layer object model, for layers and models you subclass.

A subclass writes Keras code unchanged: ``__init__(self, ..., **kwargs)`` calling
``super().__init__(**kwargs)``, sub-layers assigned as attributes (also in lists and dicts),
``build(self, input_shape)`` with ``self.add_weight(...)``, and ``call(self, inputs,
training=None, mask=None)``. The layer owns `mirrorfit.Variable` s; ``fit``'s compiled step and
``strategy.run`` trace it in a stateless scope, so it stays a plain Python object.

This module owns the object side, as ``keras/src/layers/layer.py``: tracking (the layer's own
weights, then its attributes' through `tracking.walk`), lazy building (``build`` once, with
the inputs' shapes), the call context (``training`` reaches nested layers that are not passed
it), input casting to the dtype policy's compute dtype, ``add_loss``/``losses`` and the
auto-config behind ``get_config``. Built-in ``mirrorfit.layers`` are Flax modules
(`FlaxLayer`); used inside a `Layer` they run through `mirrorfit._src.layers.flax_bridge`,
as do plain ``flax.linen`` modules assigned to a `Layer`; a `Layer` inside a functional or
Sequential model runs through the same module's `LayerNode`.
"""

from __future__ import annotations

import abc
import collections
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.layers import flax_bridge, functional, initializers, regularizers
from mirrorfit._src.layers.name_scope import name_scope, weight_path
from mirrorfit._src.utils.checks import MirrorfitWarning
from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import call_context, tracking
from mirrorfit._src.variables.variable import Variable

COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
                  "mixed_bfloat16": jnp.bfloat16, "mixed_float16": jnp.float16,
                  "float64": jnp.float64}
"""Dtype policy names (Keras') -> the dtype layers compute in."""
_MIXED = ("mixed_bfloat16", "mixed_float16")  # float32 variables, lower-precision compute
_AUTO_CONFIG_TYPES = (str, int, float, bool, type(None))  # Keras 3's auto-config values
_BASE_CONFIG = ("name", "trainable", "dtype", "activity_regularizer")  # Layer.get_config's
_NAME_COUNTS: collections.Counter[str] = collections.Counter()
_SUPER_NOT_CALLED = (
    "In layer '{cls}', you forgot to call `super().__init__()` as the first statement in the "
    "`__init__()` method. Go add it! (mirrorfit.layers.Layer.__init__ sets up the layer's "
    "name, weights and losses; pass it your **kwargs.)")


def unique_name(base: str) -> str:
    """Keras' default layer names: ``base``, then ``base_1``, ``base_2``, ... per process."""
    count = _NAME_COUNTS[base]
    _NAME_COUNTS[base] += 1
    return base if count == 0 else f"{base}_{count}"


def _initializer(identifier: Any, dtype: Any) -> Callable[[Any, Any], Any]:
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


def _policy_name(dtype: Any) -> str | None:
    """The dtype policy's name for a layer's ``dtype=`` (a name, a dtype, or a policy object
    with ``.name`` such as ``mf.mixed_precision.Policy``).

    Raises:
        ValueError: a name that is neither a policy nor a dtype.
    """
    if dtype is None:
        return None
    name = getattr(dtype, "name", dtype)
    if isinstance(name, str) and name in COMPUTE_DTYPES:
        return name
    try:
        return jnp.dtype(name).name
    except TypeError as err:
        raise ValueError(f"dtype must be a dtype policy name ({sorted(COMPUTE_DTYPES)}) or a "
                         f"dtype. Received: dtype={dtype!r}") from err


def _flat_values(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _flat_values(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _flat_values(item)
    else:
        yield value


def _auto_config(cls: type, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, str]:
    """Keras 3's auto-config (``Operation.__new__``): the constructor arguments with their
    defaults, ``**kwargs`` expanded and the base config's keys (``name``, ``trainable``,
    ``dtype``, ``activity_regularizer``) left out, when every value is a string, number,
    bool or None (also inside lists, tuples and dicts).

    Returns:
        ``(config, "")``, or ``(None, why)`` with ``why`` ``"positional"`` (positional-only
        or ``*args`` arguments) or ``"values"`` (other values).
    """
    signature = inspect.signature(cls.__init__)
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError:  # the constructor call itself raises it
        return None, "values"
    params = list(signature.parameters.values())[1:]
    if any(p.kind is p.POSITIONAL_ONLY for p in params):
        return None, "positional"
    bound.apply_defaults()
    arguments = dict(list(bound.arguments.items())[1:])
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            arguments.update(arguments.pop(p.name, {}))
        elif p.kind is p.VAR_POSITIONAL and arguments.pop(p.name, ()):
            return None, "positional"
    for covered in _BASE_CONFIG:  # the base config holds them (serialized)
        arguments.pop(covered, None)
    if not all(isinstance(v, _AUTO_CONFIG_TYPES) for v in _flat_values(arguments)):
        return None, "values"
    return arguments, ""


def _wrap_build(build: Callable[..., None]) -> Callable[..., None]:
    """A subclass's ``build`` that opens the layer's name scope and marks it built, so a
    layer built by hand (``layer.build(shape)``) is not built again on its first call."""

    @functools.wraps(build)
    def wrapper(self: Layer, *args: Any, **kwargs: Any) -> None:
        self._check_super_called()
        with name_scope(self.name, self):
            build(self, *args, **kwargs)
        self._mf_built = True

    wrapper._mf_build_wrapper = True  # type: ignore[attr-defined]
    return wrapper


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, functional.KerasTensor,
                              jax.ShapeDtypeStruct))


def is_keras_layer(value: Any) -> bool:
    """Whether ``value`` is a Keras-style `Layer` object (not a registered Flax layer)."""
    return Layer in type(value).__mro__


def _is_layer(value: Any) -> bool:
    """A layer of any kind: Keras-style, a ``mirrorfit.layers`` Flax layer, or a wrapped
    ``flax.linen`` module (objects listing their variables, other than a `Variable`)."""
    return hasattr(value, "__mf_variables__") and not isinstance(value, Variable)


class Layer(metaclass=abc.ABCMeta):
    """The base class of Keras-style layers and models, as ``keras.layers.Layer``.

    Args:
        activity_regularizer: a penalty of the outputs, added to ``losses`` divided by the
            batch size (as Keras 3).
        trainable: whether the layer's weights are trained (settable later:
            ``layer.trainable = False`` freezes every weight below it).
        dtype: the dtype policy (``"float32"``, ``"mixed_bfloat16"``, ...; a name, a dtype or
            ``mf.mixed_precision.Policy``): floating inputs are cast to its compute dtype
            (``compute_dtype``); weights are created in its variable dtype (float32 for the
            mixed policies). ``None``: float32 (the model's policy applies around it).
        autocast: whether floating inputs are cast to the compute dtype.
        name: the layer's name; default the class name in snake_case, numbered per process
            (``"token_and_position_embedding"``, ``"..._1"``). No ``"/"``.
        input_shape, input_dim: tf.keras' legacy input declaration (no batch axis), for the
            first layer of a Sequential model.

    Subclasses implement ``call`` and usually ``build(self, input_shape)``; ``input_shape``
    includes the batch axis (``None`` when built on symbolic `Input` tensors; a list of
    shapes for a list input). Calling the layer builds it once, casts floating inputs, opens
    the call context (``training`` given to an outer layer reaches this one when not passed)
    and runs ``call``.

    Raises:
        ValueError: an unknown keyword argument (Keras' "Unrecognized keyword arguments"),
            a ``trainable`` that is not a bool, a ``name`` that is not a string without
            ``"/"``, or an unknown ``dtype``.

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
        >>> layer = Linear(4, name="linear")
        >>> layer(jnp.ones((2, 3))).shape
        (2, 4)
        >>> [v.path for v in layer.weights]
        ['linear/w', 'linear/b']
        >>> layer.get_config()
        {'name': 'linear', 'units': 4, 'trainable': True, 'dtype': None}
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
        build = cls.__dict__.get("build")
        if build is not None and not (getattr(build, "_mf_build_wrapper", False)
                                      or getattr(build, "_mf_default_build", False)):
            cls.build = _wrap_build(build)  # type: ignore[method-assign]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)
        config, why = _auto_config(cls, args, kwargs)
        instance.__dict__["_mf_auto_config"] = config
        instance.__dict__["_mf_auto_config_error"] = why
        return instance

    def __init__(self, *, activity_regularizer: Any = None, trainable: bool = True,
                 dtype: Any = None, autocast: bool = True, name: str | None = None,
                 **kwargs: Any):
        input_dim = kwargs.pop("input_dim", None)
        input_shape = (input_dim,) if input_dim is not None else kwargs.pop("input_shape", None)
        if kwargs:
            raise ValueError(
                f"Unrecognized keyword arguments passed to {type(self).__name__}: {kwargs}. "
                "Layer.__init__ takes activity_regularizer, trainable, dtype, autocast, name "
                "(and input_shape/input_dim); take your own arguments in your __init__.")
        if not isinstance(trainable, bool):
            raise ValueError("Expected `trainable` to be a boolean. "
                             f"Received: trainable={trainable} (of type {type(trainable)})")
        if name is not None and (not isinstance(name, str) or "/" in name):
            raise ValueError("Argument `name` must be a string and cannot contain character "
                             f"`/`. Received: name={name!r}")
        self._mf_trainable_own: list[Variable] = []  # created trainable (Keras' order)
        self._mf_non_trainable_own: list[Variable] = []
        self._mf_losses: list[Any] = []
        self._mf_trainable = trainable
        self.dtype_policy = dtype
        self._mf_input_shape = None if input_shape is None else tuple(input_shape)
        self.name = name or unique_name(snake_case(type(self).__name__))
        self.autocast = autocast
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self._mf_built = False

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_mf") and name not in self._mf_skip:
            value = flax_bridge.wrap_linen(value)  # a plain flax.linen module runs bridged
            if "_mf_trainable_own" in self.__dict__:
                for leaf in _flat_values(value):
                    if isinstance(leaf, Variable):
                        self._track_variable(leaf)
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        # Reached only for missing attributes: say why when __init__ never ran.
        if name.startswith("_mf") or name in ("name", "autocast", "activity_regularizer"):
            raise RuntimeError(_SUPER_NOT_CALLED.format(cls=type(self).__name__))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def built(self) -> bool:
        """Whether ``build`` has run (a layer built by hand, ``layer.build(shape)``, is not
        built again by its first call)."""
        return self._mf_built

    @built.setter
    def built(self, value: bool) -> None:
        self._mf_built = bool(value)

    def _check_super_called(self) -> None:
        if "_mf_trainable_own" not in self.__dict__:
            raise RuntimeError(_SUPER_NOT_CALLED.format(cls=type(self).__name__))

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
            dtype: default the policy's variable dtype (float32).
            trainable: whether gradients update it (``trainable_weights``); a weight added
                to a frozen layer is created non-trainable, and unfreezing makes it
                trainable (as Keras).
            autocast: accepted for Keras compatibility (weights are read in their dtype).
            regularizer: a name, config or callable penalty of the weight, added to
                ``losses`` while the weight is trainable.
            constraint: a callable ``w -> w`` applied after each optimizer update.
            aggregation: how replicas combine assignments (see `mirrorfit.Variable`).
            name: the weight's name; its ``path`` is ``"<layer name>/<name>"``, under the
                names of the layers around it (``"block/linear/w"``).

        Returns:
            The new `mirrorfit.Variable`.

        Raises:
            ValueError: a name given positionally (tf.keras 2's ``add_weight("kernel",
                ...)``), a constraint that is not callable, or what `mirrorfit.Variable`
                raises.
            RuntimeError: ``super().__init__()`` was not called.
        """
        del autocast
        self._check_super_called()
        if isinstance(shape, str):
            raise ValueError("`name` must be passed as a keyword argument. Received: "
                             f"add_weight({shape!r}, ...). Use: add_weight(shape=..., "
                             f"name={shape!r}).")
        if constraint is not None and not callable(constraint):
            raise ValueError("constraint must be a callable `w -> w` (e.g. `lambda w: "
                             f"jnp.clip(w, 0, None)`). Received: constraint={constraint!r}")
        dtype = jnp.dtype(dtype or self.variable_dtype)
        own = len(self._mf_trainable_own) + len(self._mf_non_trainable_own)
        name = name or ("variable" if own == 0 else f"variable_{own}")
        variable = Variable(_initializer(initializer, dtype), shape=tuple(shape or ()),
                            dtype=dtype, trainable=trainable, name=name,
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
                    for leaf in _flat_values(value) if isinstance(leaf, Variable)]
        own = [*self._mf_trainable_own, *self._mf_non_trainable_own]
        return own + [v for v in assigned if not any(v is o for o in own)]

    def __mf_variables__(self) -> list[tuple[tuple[str, ...], Any]]:
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
            if is_keras_layer(layer):
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

    # -- losses --------------------------------------------------------------------------
    def add_loss(self, loss: Any) -> None:
        """Adds scalars (a tensor or a structure of them) to this forward pass's ``losses``;
        ``fit`` adds them to the loss."""
        self._mf_losses.extend(jax.tree.leaves(loss))

    @property
    def losses(self) -> list[Any]:
        """The last forward pass's ``add_loss`` values (this layer's, then those of the
        layers below), then the regularizers' penalties of the trainable weights' current
        values, as Keras 3."""
        found = list(self._mf_losses)
        for layer in self._sublayers():
            found += list(getattr(layer, "_mf_losses", None) or [])
        for variable in self.trainable_weights:
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

        Called once, by the first call. The default creates none; sub-layers build when
        first called.
        """
        del input_shape
        self._mf_built = True

    build._mf_default_build = True  # type: ignore[attr-defined]

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """The forward pass; subclasses implement it (``training`` and ``mask`` optional)."""
        raise NotImplementedError(f"Layer {type(self).__name__} does not have a `call()` "
                                  "method implemented: define call(self, inputs).")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_super_called()
        if functional.is_symbolic((args, kwargs)):
            with name_scope(self.name, self):
                self._maybe_build(args, kwargs)
            outputs = functional.symbolic_call(self, args, kwargs)
            self._clear_losses()  # the shape inference's values are traced
            return outputs
        outer = call_context.current()
        training = kwargs.pop("training", None)
        with call_context.call_context(training=training) as context, \
                name_scope(self.name, self):
            if outer is None:
                self._clear_losses()
            args, kwargs = self._convert_inputs((args, kwargs))
            self._maybe_build(args, kwargs)
            outputs = self.call(*args, **self._call_kwargs(kwargs, context.training))
            if self.activity_regularizer is not None:
                self._add_activity_losses(outputs)
        self._mf_built = True
        return outputs

    def _call_parameters(self) -> dict[str, inspect.Parameter]:
        return dict(inspect.signature(self.call).parameters)

    def _call_kwargs(self, kwargs: dict[str, Any], training: bool | None) -> dict[str, Any]:
        """``training`` when ``call`` takes it (as Keras: the given or inherited value, else
        ``call``'s default); ``mask`` only when ``call`` takes it."""
        params = self._call_parameters()
        if "training" in params and training is not None:
            kwargs["training"] = training
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
        unused = "mask" in kwargs and "mask" not in params and not takes_kwargs
        if unused and kwargs.pop("mask") is not None:
            warnings.warn(
                f"Layer '{self.name}' (of type {type(self).__name__}) was passed a mask, but "
                "its call() takes no `mask` argument: the mask is ignored. Add `mask=None` "
                "to call() to use it.", MirrorfitWarning, stacklevel=3)
        return kwargs

    def _add_activity_losses(self, outputs: Any) -> None:
        """The activity penalty of each output divided by its batch size (Keras 3)."""
        assert self.activity_regularizer is not None
        for output in jax.tree.leaves(outputs):
            if not hasattr(output, "ndim"):
                continue
            loss = self.activity_regularizer(output)
            if output.ndim > 0:
                batch = output.shape[0]
                loss = loss / batch if batch else jnp.zeros_like(loss)
            self.add_loss(loss)

    def _maybe_build(self, args: tuple, kwargs: dict[str, Any]) -> None:
        if self._mf_built:
            return
        if getattr(type(self).build, "_mf_default_build", False):  # no build of the user's
            self._mf_built = True
            return
        self.build(**self._build_shapes(args, kwargs))
        self._mf_built = True

    def _build_shapes(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``build``'s arguments, as Keras' ``update_shapes_dict_for_target_fn``: a one-
        argument ``build`` gets the first tensor argument's shape (a structure of shapes for
        a list or dict input); ``build(self, a_shape, b_shape)`` gets those of ``call``'s
        arguments ``a`` and ``b``.

        Raises:
            ValueError: a ``build`` with several arguments that do not all name a ``call``
                argument as ``<argument>_shape``.
        """
        params = self._call_parameters()
        try:
            arguments = inspect.signature(self.call).bind(*args, **kwargs).arguments
        except TypeError:  # the call itself reports it
            arguments = {"inputs": args[0]} if args else dict(kwargs)
        shapes: dict[str, Any] = {}
        for name, value in arguments.items():
            kind = params[name].kind if name in params else None
            leaves = jax.tree.leaves(value)
            if (name == "mask" or kind in (inspect.Parameter.VAR_POSITIONAL,
                                           inspect.Parameter.VAR_KEYWORD)
                    or not leaves or not all(_is_tensor(x) for x in leaves)):
                continue
            shapes[f"{name}_shape"] = jax.tree.map(lambda x: tuple(x.shape), value)
        wanted = [p.name for p in inspect.signature(self.build).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if len(wanted) == 1:
            return {wanted[0]: next(iter(shapes.values()), None)}
        for name in wanted:
            if not name.endswith("_shape") or name[:-len("_shape")] not in params:
                raise ValueError(
                    "For a `build()` method with more than one argument, all arguments should "
                    "have a `_shape` suffix and match an argument from `call()`. E.g. "
                    f"`build(self, foo_shape, bar_shape)`. For layer '{type(self).__name__}', "
                    f"received `build()` argument `{name}`; call() takes {list(params)}.")
        return {name: shapes[name] for name in wanted if name in shapes}

    # -- dtypes --------------------------------------------------------------------------
    @property
    def dtype_policy(self) -> Any:
        """The dtype policy: the policy object given (``mf.mixed_precision.Policy``), else
        its name (``"float32"`` when none was given). Settable."""
        policy = self.__dict__.get("_mf_policy_object")
        return policy if policy is not None else self._mf_dtype_policy or "float32"

    @dtype_policy.setter
    def dtype_policy(self, value: Any) -> None:
        self._mf_dtype_policy = _policy_name(value)
        self._mf_policy_object = value if hasattr(value, "compute_dtype") else None

    @property
    def compute_dtype(self) -> str:
        """The dtype inputs are cast to (``"bfloat16"`` under ``"mixed_bfloat16"``)."""
        name = self._mf_dtype_policy or "float32"
        return jnp.dtype(COMPUTE_DTYPES.get(name, name)).name

    @property
    def variable_dtype(self) -> str:
        """The dtype weights are created in (float32 under the mixed policies)."""
        return "float32" if self._mf_dtype_policy in _MIXED else self.compute_dtype

    @property
    def dtype(self) -> str:
        """The variable dtype, as Keras' ``layer.dtype``."""
        return self.variable_dtype

    @property
    def input_dtype(self) -> str:
        """The dtype floating inputs are cast to."""
        return self.compute_dtype

    def _convert_inputs(self, tree: Any) -> Any:
        """Floating arrays cast to the compute dtype, when ``autocast`` (Keras'
        ``DTypePolicy.convert_input``)."""
        if not self.autocast:
            return tree
        dtype = jnp.dtype(self.compute_dtype)

        def convert(x: Any) -> Any:
            if (isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating)
                    and x.dtype != dtype):
                return jnp.asarray(x, dtype)
            return x
        return jax.tree.map(convert, tree)

    @property
    def declared_input_shape(self) -> tuple[int, ...] | None:
        """The legacy ``input_shape``/``input_dim`` (no batch axis), if given."""
        return self._mf_input_shape

    # -- config --------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, as ``keras.layers.Layer.get_config``.

        ``{"name", "trainable", "dtype"}`` (and ``"activity_regularizer"``); a subclass that
        does not override ``get_config`` adds the arguments it was constructed with, with
        their defaults (Keras 3's auto-config), when they are strings, numbers, bools or
        None (also in lists and dicts). Override it otherwise, starting from
        ``super().get_config()``.

        Raises:
            NotImplementedError: get_config is not overridden and the constructor got other
                values (or positional-only / ``*args`` arguments).
        """
        self._check_super_called()
        base: dict[str, Any] = {"trainable": self.trainable, "dtype": self._mf_dtype_policy}
        if self.activity_regularizer is not None:
            base["activity_regularizer"] = regularizers.serialize(self.activity_regularizer)
        if type(self).get_config is not Layer.get_config:  # an override extends this
            return {"name": self.name, **base}
        auto = self._mf_auto_config
        if auto is None:
            what = ("positional-only or *args arguments" if self._mf_auto_config_error ==
                    "positional" else "argument values other than strings, numbers, bools "
                    "and None")
            raise NotImplementedError(
                f"Object {type(self).__name__} was created with {what}, so its config cannot "
                "be generated automatically: override get_config() to return the "
                "constructor arguments as JSON values, e.g. `config = super().get_config(); "
                "config.update({'units': self.units}); return config` (and from_config() if "
                "they need rebuilding).")
        config = {"name": self.name, **auto, **base}
        init_params = inspect.signature(type(self).__init__).parameters
        if "name" not in init_params and not any(
                p.kind is p.VAR_KEYWORD for p in init_params.values()):
            config.pop("name")  # cls(**config) could not take it
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """``cls(**config)``, as ``keras.layers.Layer.from_config``.

        Raises:
            TypeError: the constructor does not take the config's keys (add ``**kwargs``
                to ``__init__`` and pass them to ``super().__init__``, or override
                from_config).
        """
        try:
            return cls(**config)
        except TypeError as err:
            raise TypeError(
                f"{cls.__name__}.from_config could not call {cls.__name__}(**config): {err}. "
                "Take **kwargs in __init__ and pass them to super().__init__(**kwargs) (the "
                "config holds name, trainable and dtype), or override from_config. Received: "
                f"config={config!r}") from err

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"
