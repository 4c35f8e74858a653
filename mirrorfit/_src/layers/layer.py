"""`Layer`: Keras 3's layer object model, for layers and models you subclass.

A subclass writes Keras code unchanged: ``__init__(self, ..., **kwargs)`` calling
``super().__init__(**kwargs)``, sub-layers assigned as attributes (also in lists and dicts),
``build(self, input_shape)`` with ``self.add_weight(...)``, and ``call(self, inputs,
training=None, mask=None)``. The layer owns `mirrorfit.Variable` s; ``fit``'s compiled step and
``strategy.run`` trace it in a stateless scope, so it stays a plain Python object.

This module owns the object side, as ``keras/src/layers/layer.py``: tracking (the layer's own
weights, then its attributes' through `tracking.walk`), lazy building (``build`` once, with
the inputs' shapes: `call_spec`), the call context (``training`` reaches nested layers that
are not passed it), input casting to the compute dtype (`dtype_policy`),
``add_loss``/``losses``, freezing, and ``get_config`` (`auto_config`). Built-in ``mirrorfit.layers`` are Flax modules
(`FlaxLayer`); used inside a `Layer` they run through `mirrorfit._src.layers.flax_bridge`,
as do plain ``flax.linen`` modules assigned to a `Layer`; a `Layer` inside a functional or
Sequential model runs through the same module's `LayerNode`.
"""

from __future__ import annotations

import abc
from typing import Any

import jax

from mirrorfit._src.layers import auto_config, call_spec, flax_bridge
from mirrorfit._src.layers import dtype_policy as dtype_policies
from mirrorfit._src.layers.graph import functional
from mirrorfit._src.layers.name_scope import name_scope, unique_name
from mirrorfit._src.layers.weights import SUPER_NOT_CALLED, LayerWeights
from mirrorfit._src.regularizers import regularizers
from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import call_context
from mirrorfit._src.variables.variable import Variable


def is_keras_layer(value: Any) -> bool:
    """Whether ``value`` is a Keras-style `Layer` object (not a registered Flax layer)."""
    return Layer in type(value).__mro__


class Layer(LayerWeights, metaclass=abc.ABCMeta):
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
            cls.build = call_spec.wrap_build(build)  # type: ignore[method-assign]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)
        config, why = auto_config.constructor_arguments(cls, args, kwargs)
        object.__setattr__(instance, "_mf_auto_config", config)
        object.__setattr__(instance, "_mf_auto_config_error", why)
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
                for leaf in auto_config.flat_values(value):
                    if isinstance(leaf, Variable):
                        self._track_variable(leaf)
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        # Reached only for missing attributes: say why when __init__ never ran.
        if name.startswith("_mf") or name in ("name", "autocast", "activity_regularizer"):
            raise RuntimeError(SUPER_NOT_CALLED.format(cls=type(self).__name__))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def built(self) -> bool:
        """Whether ``build`` has run (a layer built by hand, ``layer.build(shape)``, is not
        built again by its first call)."""
        return self._mf_built

    @built.setter
    def built(self, value: bool) -> None:
        self._mf_built = bool(value)

    # -- masks ---------------------------------------------------------------------------
    @property
    def supports_masking(self) -> bool:
        """Whether a Keras mask on the inputs goes on to the outputs (through
        `compute_mask`) in a model; settable. By default, whether the class overrides
        ``compute_mask``, as Keras."""
        value = self.__dict__.get("_mf_supports_masking")
        return type(self).compute_mask is not Layer.compute_mask if value is None else value

    @supports_masking.setter
    def supports_masking(self, value: bool) -> None:
        self._mf_supports_masking = bool(value)

    def compute_mask(self, inputs: Any, previous_mask: Any) -> Any:
        """The outputs' mask (bool ``[batch, timesteps]`` or ``None``) from the first
        input's, as Keras' ``Layer.compute_mask``: ``previous_mask``. A layer that consumes
        the mask takes ``mask=None`` in ``call``."""
        del inputs
        return previous_mask

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
        with call_context.call_context(training=training, in_layer=True) as context, \
                name_scope(self.name, self):
            if outer is None or not outer.in_layer:  # the pass's outermost layer call
                self._clear_losses()
            if self.autocast:
                args, kwargs = dtype_policies.convert_inputs((args, kwargs), self.compute_dtype)
            self._maybe_build(args, kwargs)
            outputs = self.call(*args, **call_spec.call_kwargs(self, kwargs, context.training))
            if self.activity_regularizer is not None:
                for loss in call_spec.activity_losses(self.activity_regularizer, outputs):
                    self.add_loss(loss)
        self._mf_built = True
        return outputs

    def _maybe_build(self, args: tuple, kwargs: dict[str, Any]) -> None:
        if self._mf_built:
            return
        if not getattr(type(self).build, "_mf_default_build", False):  # the user's build
            self.build(**call_spec.build_arguments(self, args, kwargs))
        self._mf_built = True
        self._mf_state_locked = True  # add_weight now raises, as Keras locks a built layer

    # -- dtypes --------------------------------------------------------------------------
    @property
    def dtype_policy(self) -> Any:
        """The dtype policy: the policy object given (``mf.mixed_precision.Policy``), else
        its name (``"float32"`` when none was given). Settable."""
        policy = self.__dict__.get("_mf_policy_object")
        return policy if policy is not None else self._mf_dtype_policy or "float32"

    @dtype_policy.setter
    def dtype_policy(self, value: Any) -> None:
        self._mf_dtype_policy = dtype_policies.policy_name(value)
        self._mf_policy_object = value if hasattr(value, "compute_dtype") else None

    @property
    def compute_dtype(self) -> str:
        """The dtype inputs are cast to (``"bfloat16"`` under ``"mixed_bfloat16"``)."""
        return dtype_policies.compute_dtype(self._mf_dtype_policy)

    @property
    def variable_dtype(self) -> str:
        """The dtype weights are created in (float32 under the mixed policies)."""
        return dtype_policies.variable_dtype(self._mf_dtype_policy)

    @property
    def dtype(self) -> str:
        """The variable dtype, as Keras' ``layer.dtype``."""
        return self.variable_dtype

    @property
    def input_dtype(self) -> str:
        """The dtype floating inputs are cast to (when ``autocast``)."""
        return self.compute_dtype

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
        return auto_config.generated_config(self, base)

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
