"""`FlaxLayer`: the base of every built-in ``mirrorfit.layers`` module, and `LAYERS`, the layer
registry.

A `FlaxLayer` is a ``flax.linen`` module with Keras' layer surface:

* ``trainable`` (settable after construction, as ``layer.trainable = False`` in Keras);
* ``input_shape`` (``input_dim`` on Dense) on the first layer of a Sequential, as tf.keras tutorials
  write it, instead of a leading `Input`;
* ``dtype``: the compute dtype (``"float32"``, ``"bfloat16"``, ``"mixed_bfloat16"``, ...);
  params are always created in float32 and cast for the computation;
* ``__call__(..., training=False)``, Keras' training flag;
* Keras' masks: ``supports_masking`` and ``compute_mask(inputs, mask)``; a layer that
  consumes a mask takes ``mask=`` in ``__call__`` (`mirrorfit._src.layers.graph.mask_flow`);
* calling a layer on symbolic tensors (from `Input`) records a node of the functional graph;
* ``get_config()`` / ``from_config()`` for architectures saved as JSON (a layer class is
  found by its name in `LAYERS`, or among the user's classes: ``register_serializable``,
  ``custom_objects``);
* weight constraints (``kernel_constraint=``, ...; `constraints.CONSTRAINED_WEIGHTS`) are
  read by the trainer, which applies them after every optimizer update
  (`mirrorfit._src.layers.graph.model_info.weight_constraints`);
* weight and activity regularizers ``sow`` their penalties into the ``"losses"`` collection
  when it is mutable in ``apply`` (never at ``init``, so it never enters the model state):
  ``y, state = module.apply(variables, x, mutable=["losses"])``, then add
  ``sum(jax.tree.leaves(state["losses"]))`` to the loss, as Keras adds ``model.losses``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.activations import activations
from mirrorfit._src.constraints import constraints
from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers import dtype_policy, flax_bridge
from mirrorfit._src.layers.dtype_policy import COMPUTE_DTYPES
from mirrorfit._src.layers.flax_bridge import SOWN_LOSSES
from mirrorfit._src.layers.graph import functional, sequential
from mirrorfit._src.layers.layer import Layer
from mirrorfit._src.regularizers import regularizers
from mirrorfit._src.utils import registry
from mirrorfit._src.utils.checks import MirrorfitWarning

if TYPE_CHECKING:
    # Flax's dataclass_transform names only its own field specifier, so a type checker would
    # read ``dataclasses.field(kw_only=True)`` as a positional field.
    from flax.linen.module import module_field as layer_field
else:
    from dataclasses import field as layer_field

CONSTRAINT_NOT_APPLIED = (
    "{layer}'s constraint on {weight!r} is not applied: the trainer applies the built-in "
    "layers' constraint arguments for the layers of an mf.layers functional or Sequential "
    "model and of a Keras-style Layer/Model (subclassed), but this {layer} sits inside the "
    "Flax module {parent}. Use it in such a model, or apply the constraint yourself after "
    "each update. Received: {argument}")

LAYERS = registry.Registry("layer", "mirrorfit.layers")
"""The ``mirrorfit.layers`` classes by class name; ``@register`` adds one."""
register = LAYERS.register

_CONSTRUCTION_ORDER = itertools.count()


def _to_json(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    return value


_KINDS = {"activation": activations.ACTIVATIONS, "constraint": constraints.CONSTRAINTS,
          "initializer": initializers.INITIALIZERS, "regularizer": regularizers.REGULARIZERS}
"""The registry of the arguments whose names end so (``kernel_initializer``, ...)."""


def _kind(field: str) -> registry.Registry | None:
    return next((kind for suffix, kind in _KINDS.items() if field.endswith(suffix)), None)


def _from_json(field: str, value: Any) -> Any:
    """A constructor argument from its `Layer.get_config` value: a config becomes its object,
    and a name of a kind saved by function names (activations, initializers) what the kind's
    ``deserialize`` gives (Keras' names stay names); other names stay names, which the kind's
    ``get`` resolves when the layer runs."""
    kind = _kind(field)
    if kind is not None and (isinstance(value, dict) or (
            isinstance(value, str) and kind.saves_functions)):
        return kind.deserialize(value)
    return value


class FlaxLayer(nn.Module):
    """Base class of the built-in layers, as ``flax.linen`` modules; see the module docstring.

    Keras-style layers you write subclass `mirrorfit.layers.Layer` instead; this class is
    for layers written the Flax way (dataclass fields, ``@nn.compact __call__``) that keep
    Keras' config, names and training flag. Called outside a Flax ``apply`` (inside a
    Keras-style layer, or eagerly), a `FlaxLayer` keeps its weights in `mirrorfit.Variable` s
    (`mirrorfit._src.layers.flax_bridge`).

    Subclasses declare their Keras constructor arguments as dataclass fields and implement
    ``__call__(self, inputs, training=False)``.
    """

    trainable: bool = layer_field(default=True, kw_only=True)
    dtype: Any = layer_field(default=None, kw_only=True)
    # tf.keras' legacy way to give a Sequential model its input shape (no batch axis).
    input_shape: Any = layer_field(default=None, kw_only=True)
    # Keras' ``supports_masking``: the layer passes a mask on (or computes its own).
    supports_masking: ClassVar[bool] = False
    # Keras' ``Layer.autocast``: False for a layer whose weights no policy casts whole; it
    # casts what it reads of them (`cast_read`), as Keras' ``Embedding`` its rows.
    autocast: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            call = cls.__dict__["__call__"]

            @functools.wraps(call)
            def symbolic_or_call(self, *args, **kw):
                if functional.is_symbolic((args, kw)):
                    return functional.symbolic_call(self, args, kw)
                if self.scope is None:  # outside a Flax apply: on Variables of its own
                    return flax_bridge.call_unbound(self, args, kw)
                return call(self, *args, **kw)

            cls.__call__ = symbolic_or_call

    def __post_init__(self) -> None:
        # Keras numbers default names ("dense", "dense_1", ...) in construction order.
        object.__setattr__(self, "construction_index", next(_CONSTRUCTION_ORDER))
        super().__post_init__()

    def __setattr__(self, name: str, value: Any) -> None:
        # Keras freezes a layer with `layer.trainable = False` after construction; Flax
        # modules are frozen dataclasses, so this one field is set directly.
        if name == "trainable":
            object.__setattr__(self, name, bool(value))
            flax_bridge.set_trainable(self, value)  # its Variables, when called unbound
            return
        super().__setattr__(name, value)

    def __mf_variables__(self) -> list[tuple[tuple[str, ...], Any]]:
        """The Variables holding this layer's collections when called outside ``apply``."""
        return flax_bridge.flax_variables(self)

    # Keras' weight accessors, over those Variables (empty before the first such call).
    @property
    def weights(self) -> list[Any]:
        """The layer's `mirrorfit.Variable`s, trainable first, as Keras'
        ``layer.weights``: those that hold its collections once it was called outside a
        model's ``apply`` (as a layer of a subclassed `Layer` or `Model`); ``[]``
        before.
        """
        return [v for _, v in flax_bridge.flax_variables(self)]

    @property
    def trainable_weights(self) -> list[Any]:
        """The trainable ones of `weights` (the ``params`` collection)."""
        return [v for v in self.weights if v.trainable]

    @property
    def non_trainable_weights(self) -> list[Any]:
        """The non-trainable ones of `weights` (e.g. BatchNormalization's moving
        statistics).
        """
        return [v for v in self.weights if not v.trainable]

    # (``variables`` stays Flax's: the bound module's collections.)
    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights

    def get_weights(self) -> list[Any]:
        """The weights as NumPy arrays (``[]`` before the layer's weights exist)."""
        return [v.numpy() for v in self.weights]

    @property
    def declared_input_shape(self) -> tuple[int, ...] | None:
        """The ``input_shape`` given to the constructor (no batch axis), if any."""
        return None if self.input_shape is None else tuple(self.input_shape)

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> Any:
        """The output mask, as Keras' ``Layer.compute_mask``: ``mask`` (bool ``[batch,
        timesteps]``, or ``None``) passed on by a layer that supports masking, else ``None``.

        Args:
            inputs: the layer's first input (arrays).
            mask: the mask of ``inputs`` (same structure), or ``None``.
        """
        del inputs
        return mask if self.supports_masking else None

    # -- dtype ------------------------------------------------------------------------
    @property
    def compute_dtype(self) -> Any:
        """The dtype of the computation (params stay float32)."""
        if self.dtype is None:
            return jnp.float32
        name = getattr(self.dtype, "name", self.dtype)  # a Keras-like policy or a dtype
        name = getattr(self.dtype, "compute_dtype", name)
        if isinstance(name, str) and name in COMPUTE_DTYPES:
            return COMPUTE_DTYPES[name]
        try:
            return jnp.dtype(name)
        except TypeError as err:
            raise ValueError(f"dtype must be one of {sorted(COMPUTE_DTYPES)} or a dtype. "
                             f"Received: dtype={self.dtype!r}") from err

    def cast(self, x: Any) -> Any:
        """Floating inputs cast to the compute dtype (Keras' autocast)."""
        dtype = self.compute_dtype
        return jax.tree.map(
            lambda v: v.astype(dtype) if jnp.issubdtype(jnp.result_type(v), jnp.floating)
            else v, x)

    # -- weights ----------------------------------------------------------------------
    def weight(self, name: str, initializer: Any, shape: tuple[int, ...],
               regularizer: Any = None) -> jax.Array:
        """Creates (or reads) float32 param ``name``, sows its penalty, casts it to compute.

        A layer with ``autocast = False`` gets the param as stored, and no model policy casts
        it (`mirrorfit._src.layers.dtype_policy.keep_uncast`): it casts what it reads of it
        with `cast_read`.
        """
        value = self.param(name, initializers.get(initializer), shape, jnp.float32)
        if self.is_initializing():
            self._check_constraint_applies(name)
            if not self.autocast:
                dtype_policy.keep_uncast((*self.path, name))
        penalty = regularizers.get(regularizer)
        if penalty is not None and not self.is_initializing():
            self.sow(SOWN_LOSSES, f"{name}_regularizer", penalty(value))
        return value.astype(self.compute_dtype) if self.autocast else value

    def cast_read(self, values: jax.Array) -> jax.Array:
        """Values read from an uncast weight (``autocast = False``), cast as the whole weight
        would have been: to the model policy's compute dtype (`dtype_policy.autocast_dtype`),
        if one is running, then to the layer's."""
        outer = dtype_policy.autocast_dtype()
        return (values if outer is None else values.astype(outer)).astype(self.compute_dtype)

    def _check_constraint_applies(self, name: str) -> None:
        """Warns when ``name`` has a constraint that no trainer would apply: the layer is
        neither a node of a layers model nor called on its own Variables (a Flax module's
        child; `mirrorfit._src.layers.graph.model_info.weight_constraints`)."""
        parent = self.parent
        if (not isinstance(parent, nn.Module) or isinstance(
                parent, (functional.FunctionalModule, sequential.SequentialModule))):
            return
        for argument, weight in constraints.CONSTRAINED_WEIGHTS.items():
            if weight == name and getattr(self, argument, None) is not None:
                warnings.warn(CONSTRAINT_NOT_APPLIED.format(
                    layer=type(self).__name__, weight=name, parent=type(parent).__name__,
                    argument=f"{argument}={getattr(self, argument)!r}"),
                    MirrorfitWarning, stacklevel=3)

    def activity(self, outputs: jax.Array) -> jax.Array:
        """Sows the activity penalty / batch size (as Keras 3's ``Layer.__call__``)."""
        penalty = regularizers.get(getattr(self, "activity_regularizer", None))
        if penalty is not None and not self.is_initializing():
            loss = penalty(outputs.astype(jnp.float32))
            self.sow(SOWN_LOSSES, "activity_regularizer", loss / outputs.shape[0])
        return outputs

    def bias_and_activation(self, y: jax.Array) -> jax.Array:
        """The common tail of Dense and the convolutions, as Keras: ``y + bias`` (a ``bias``
        weight of ``y``'s last dimension, when ``use_bias``), then the activation, then the
        activity penalty."""
        if self.use_bias:
            y = y + self.weight("bias", self.bias_initializer, (y.shape[-1],),
                                self.bias_regularizer)
        return self.activity(self.activation_fn()(y))

    def activation_fn(self, name: str = "activation") -> Any:
        """The activation function of the field ``name`` (``"activation"``,
        ``"recurrent_activation"``): its value resolved by `mirrorfit.activations.get`.
        """
        return activations.get(getattr(self, name))

    # -- config -----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments as JSON-able values (as ``keras.layers.Layer.get_config``).

        Raises:
            ValueError: an argument (activation, initializer, regularizer, constraint) that has
                no JSON form.
        """
        config: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            if field.name == "parent":
                continue
            value = getattr(self, field.name)
            kind = _kind(field.name)
            if kind is not None:
                value = kind.serialize(value)
            elif field.name == "dtype" and value is not None and not isinstance(value, str):
                value = jnp.dtype(getattr(value, "name", value)).name
            config[field.name] = _to_json(value)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FlaxLayer:
        """A layer from ``get_config()``'s output.

        Regularizer, constraint and initializer configs become objects; activation and
        initializer names that are not Keras' (your functions) become the functions
        registered with ``mf.saving.register_serializable`` or given in ``custom_objects``
        (through ``mf.saving.custom_object_scope``, as ``load_model`` does).

        Raises:
            ValueError: a regularizer, constraint, activation or initializer found nowhere.
        """
        return cls(**{k: _from_json(k, v) for k, v in config.items()})


Layer.register(FlaxLayer)  # isinstance(Dense(3), mf.layers.Layer), as in Keras


def as_tuple(value: Any, n: int, name: str) -> tuple[int, ...]:
    """An int or length-``n`` sequence as an ``n``-tuple (Keras' ``standardize_tuple``).

    Raises:
        ValueError: a sequence of the wrong length, or a non-int.
    """
    items = (value,) * n if isinstance(value, int) else tuple(value)
    if len(items) != n or not all(isinstance(v, int) for v in items):
        raise ValueError(f"{name} must be an int or a tuple of {n} ints. "
                         f"Received: {name}={value!r}")
    return items


def spatial_pairs(value: Any, rank: int, name: str) -> tuple[tuple[int, int], ...]:
    """Per-axis ``(before, after)`` amounts for ``rank`` spatial axes, as Keras' padding and
    cropping layers read them: an int (all sides); for rank 1 a pair ``(before, after)``;
    for rank > 1 ``rank`` entries, each an int (both sides) or a pair.

    Raises:
        ValueError: any other form, or a negative amount.
    """
    if isinstance(value, int):
        pairs: Any = ((value, value),) * rank
    elif rank == 1:
        pairs = (tuple(value),)
    else:
        pairs = tuple((v, v) if isinstance(v, int) else tuple(v) for v in value)
    if (len(pairs) != rank or any(len(p) != 2 for p in pairs)
            or not all(isinstance(v, int) and v >= 0 for p in pairs for v in p)):
        raise ValueError(f"{name} must be a non-negative int or {rank} entries (an int or a "
                         f"(before, after) pair per spatial axis). Received: {name}={value!r}")
    return pairs


def check_channels_last(data_format: Any) -> None:
    """Raises ValueError unless ``data_format`` is ``None`` or ``"channels_last"``."""
    if data_format not in (None, "channels_last"):
        raise ValueError("Only data_format='channels_last' (inputs [batch, ..., channels]) is "
                         "supported; transpose channels_first inputs with Permute. "
                         f"Received: data_format={data_format!r}")
