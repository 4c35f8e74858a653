"""Keras 3's activation functions (as ``keras.activations``: the same names, arguments and
defaults), on ``jax.nn``, and by name (``keras.activations.get``) in the registry
`ACTIVATIONS`."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from mirrorfit._src.utils import registry

Activation = Callable[[jax.Array], jax.Array]


def linear(x: jax.Array) -> jax.Array:
    """``x`` unchanged, as ``keras.activations.linear``."""
    return x


def relu(x: jax.Array, negative_slope: float = 0.0, max_value: float | None = None,
         threshold: float = 0.0) -> jax.Array:
    """``max(x, 0)``, as ``keras.activations.relu``: with ``threshold``, values at or
    below it become 0; ``max_value`` caps the output; ``negative_slope`` times
    ``x - threshold`` below the threshold (Keras' ``ReLU.static_call``)."""
    if negative_slope != 0.0 and max_value is None and threshold == 0:
        return jax.nn.leaky_relu(x, negative_slope)
    negative = jax.nn.relu(threshold - x) if negative_slope != 0.0 else None
    y = jnp.where(x > threshold, x, 0) if threshold != 0 else jax.nn.relu(x)
    if max_value is not None:
        y = jnp.clip(y, 0, max_value)
    return y if negative is None else y - negative_slope * negative


def leaky_relu(x: jax.Array, negative_slope: float = 0.2) -> jax.Array:
    """``x`` above 0, ``negative_slope * x`` below, as ``keras.activations.leaky_relu``."""
    return jax.nn.leaky_relu(x, negative_slope)


def relu6(x: jax.Array) -> jax.Array:
    """``min(max(x, 0), 6)``, as ``keras.activations.relu6``."""
    return jax.nn.relu6(x)


def elu(x: jax.Array, alpha: float = 1.0) -> jax.Array:
    """``x`` above 0, ``alpha * (exp(x) - 1)`` below, as ``keras.activations.elu``."""
    return jax.nn.elu(x, alpha)


def selu(x: jax.Array) -> jax.Array:
    """Scaled ELU (``scale=1.0507..., alpha=1.6732...``), as ``keras.activations.selu``."""
    return jax.nn.selu(x)


def celu(x: jax.Array, alpha: float = 1.0) -> jax.Array:
    """``max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0)``, as ``keras.activations.celu``."""
    return jax.nn.celu(x, alpha)


def gelu(x: jax.Array, approximate: bool = False) -> jax.Array:
    """Gaussian error linear unit (exact erf form unless ``approximate``), as
    ``keras.activations.gelu``."""
    return jax.nn.gelu(x, approximate=approximate)


def glu(x: jax.Array, axis: int = -1) -> jax.Array:
    """``a * sigmoid(b)`` of the two halves of ``axis``, as ``keras.activations.glu``."""
    return jax.nn.glu(x, axis)


def sigmoid(x: jax.Array) -> jax.Array:
    """``1 / (1 + exp(-x))``, as ``keras.activations.sigmoid``."""
    return jax.nn.sigmoid(x)


def hard_sigmoid(x: jax.Array) -> jax.Array:
    """``relu6(x + 3) / 6``, as ``keras.activations.hard_sigmoid``."""
    return jax.nn.relu6(x + 3.0) / 6.0


def hard_silu(x: jax.Array) -> jax.Array:
    """``x * hard_sigmoid(x)``, as ``keras.activations.hard_silu`` (``hard_swish``)."""
    return jax.nn.hard_silu(x)


def log_sigmoid(x: jax.Array) -> jax.Array:
    """``log(sigmoid(x))``, as ``keras.activations.log_sigmoid``."""
    return jax.nn.log_sigmoid(x)


def sparse_sigmoid(x: jax.Array) -> jax.Array:
    """``clip((x + 1) / 2, 0, 1)``, as ``keras.activations.sparse_sigmoid``."""
    return jax.nn.sparse_sigmoid(x)


def tanh(x: jax.Array) -> jax.Array:
    """Hyperbolic tangent, as ``keras.activations.tanh``."""
    return jnp.tanh(x)


def hard_tanh(x: jax.Array) -> jax.Array:
    """``clip(x, -1, 1)``, as ``keras.activations.hard_tanh``."""
    return jax.nn.hard_tanh(x)


def tanh_shrink(x: jax.Array) -> jax.Array:
    """``x - tanh(x)``, as ``keras.activations.tanh_shrink``."""
    return x - jnp.tanh(x)


def hard_shrink(x: jax.Array, threshold: float = 0.5) -> jax.Array:
    """``x`` where ``|x| > threshold``, else 0, as ``keras.activations.hard_shrink``."""
    return jnp.where(jnp.abs(x) > threshold, x, 0.0)


def soft_shrink(x: jax.Array, threshold: float = 0.5) -> jax.Array:
    """``x -+ threshold`` where ``|x| > threshold``, else 0, as
    ``keras.activations.soft_shrink``."""
    return jnp.where(x > threshold, x - threshold,
                     jnp.where(x < -threshold, x + threshold, 0.0))


def threshold(x: jax.Array, threshold: float, default_value: float) -> jax.Array:
    """``x`` where ``x > threshold``, else ``default_value``, as
    ``keras.activations.threshold``."""
    return jnp.where(x > threshold, x, default_value)


def softmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """``exp(x) / sum(exp(x))`` along ``axis``, as ``keras.activations.softmax``."""
    return jax.nn.softmax(x, axis=axis)


def log_softmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """``log(softmax(x))`` along ``axis``, as ``keras.activations.log_softmax``."""
    return jax.nn.log_softmax(x, axis=axis)


def softplus(x: jax.Array) -> jax.Array:
    """``log(exp(x) + 1)``, as ``keras.activations.softplus``."""
    return jax.nn.softplus(x)


def softsign(x: jax.Array) -> jax.Array:
    """``x / (|x| + 1)``, as ``keras.activations.softsign``."""
    return jax.nn.soft_sign(x)


def sparse_plus(x: jax.Array) -> jax.Array:
    """0 below -1, ``(x + 1) ** 2 / 4`` in ``[-1, 1]``, ``x`` above, as
    ``keras.activations.sparse_plus``."""
    return jax.nn.sparse_plus(x)


def squareplus(x: jax.Array, b: float = 4) -> jax.Array:
    """``(x + sqrt(x ** 2 + b)) / 2``, as ``keras.activations.squareplus``."""
    return jax.nn.squareplus(x, b)


def silu(x: jax.Array) -> jax.Array:
    """``x * sigmoid(x)``, as ``keras.activations.silu`` (``swish``)."""
    return jax.nn.silu(x)


def mish(x: jax.Array) -> jax.Array:
    """``x * tanh(softplus(x))``, as ``keras.activations.mish``."""
    return x * jnp.tanh(jax.nn.softplus(x))


def exponential(x: jax.Array) -> jax.Array:
    """``exp(x)``, as ``keras.activations.exponential``."""
    return jnp.exp(x)


ACTIVATIONS = registry.Registry("activation", default=linear, expected="a callable or None",
                                saves="named functions")
"""Keras 3's activation names and default arguments (keras/src/activations/activations.py)
-> the functions above; saved by name. The ``jax.nn`` functions equal to one of them at its
defaults are registered first, so a ``jax.nn.relu`` in a layer list saves as ``"relu"``."""

for _name, _fn in {"relu": jax.nn.relu, "relu6": jax.nn.relu6, "elu": jax.nn.elu,
                   "selu": jax.nn.selu, "celu": jax.nn.celu, "sigmoid": jax.nn.sigmoid,
                   "hard_silu": jax.nn.hard_silu, "log_sigmoid": jax.nn.log_sigmoid,
                   "tanh": jnp.tanh, "softmax": jax.nn.softmax,
                   "log_softmax": jax.nn.log_softmax, "softplus": jax.nn.softplus,
                   "softsign": jax.nn.soft_sign, "silu": jax.nn.silu,
                   "exponential": jnp.exp}.items():
    ACTIVATIONS.register(_fn, name=_name)
for _fn, _aliases in ((linear, ()), (relu, ()), (relu6, ()), (leaky_relu, ()), (elu, ()),
                      (selu, ()), (celu, ()), (gelu, ()), (glu, ()), (sigmoid, ()),
                      (hard_sigmoid, ()), (hard_silu, ("hard_swish",)), (log_sigmoid, ()),
                      (sparse_sigmoid, ()), (tanh, ()), (hard_tanh, ()), (tanh_shrink, ()),
                      (hard_shrink, ()), (soft_shrink, ()), (threshold, ()), (softmax, ()),
                      (log_softmax, ()), (softplus, ()), (softsign, ()), (sparse_plus, ()),
                      (squareplus, ()), (silu, ("swish",)), (mish, ()), (exponential, ())):
    ACTIVATIONS.register(_fn, aliases=_aliases)


get = ACTIVATIONS.get
"""The activation function for a name, a callable or ``None``, as ``keras.activations.get``
(`Registry.get`): ``None`` is `linear`, a callable comes back as is, a name is Keras' (any
case) or one of your functions registered with ``mf.saving.register_serializable`` or given
in ``custom_objects`` (within ``mf.saving.custom_object_scope``). A name that names nothing
raises a ValueError, another kind of value a TypeError."""

serialize = ACTIVATIONS.serialize
"""An activation argument's JSON form, as ``keras.activations.serialize``: its name (Keras', its
``register_serializable`` name, or your named function's ``__name__``, found again through
``custom_objects``); a lambda raises a ValueError."""

deserialize = ACTIVATIONS.deserialize
"""A saved activation name as a layer argument, as ``keras.activations.deserialize``: Keras'
names stay names (the layer resolves them when it runs), and other names become the function
`get` finds (yours, registered or in ``custom_objects``); a name that names nothing raises a
ValueError."""
