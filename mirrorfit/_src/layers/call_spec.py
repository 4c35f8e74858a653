"""How a Keras-style layer's ``__call__`` prepares ``build`` and ``call``, as Keras 3's
``CallSpec`` and ``update_shapes_dict_for_target_fn`` in ``keras/src/layers/layer.py``.

* `wrap_build`: a subclass's ``build`` runs inside the layer's name scope and marks the layer
  built, also when called by hand;
* `build_arguments`: ``build`` gets the first tensor argument's shape, or one shape per
  ``call`` argument (``build(self, a_shape, b_shape)``);
* `call_kwargs`: ``training`` goes to ``call`` only when it takes it; so does ``mask``;
* `activity_losses`: the activity penalty of each output divided by its batch size.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.layers.graph.functional import KerasTensor
from mirrorfit._src.layers.name_scope import name_scope
from mirrorfit._src.utils.checks import MirrorfitWarning

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def wrap_build(build: Callable[..., None]) -> Callable[..., None]:
    """``build`` opening the layer's name scope and marking it built, so a layer built by
    hand (``layer.build(shape)``) is not built again by its first call."""

    @functools.wraps(build)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        self._check_super_called()
        with name_scope(self.name, self):
            build(self, *args, **kwargs)
        self._mf_built = True
        self._mf_state_locked = True  # add_weight now raises, as Keras locks a built layer

    wrapper._mf_build_wrapper = True  # type: ignore[attr-defined]
    return wrapper


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, KerasTensor, jax.ShapeDtypeStruct))


def build_arguments(layer: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``layer.build`` 's keyword arguments for ``layer(*args, **kwargs)``.

    A one-argument ``build`` gets the first tensor argument's shape, batch axis included
    (a structure of shapes for a list or dict input); ``build(self, a_shape, b_shape)`` gets
    those of ``call`` 's arguments ``a`` and ``b``.

    Raises:
        ValueError: a ``build`` with several arguments that do not all name a ``call``
            argument as ``<argument>_shape``.
    """
    params = inspect.signature(layer.call).parameters
    try:
        arguments = inspect.signature(layer.call).bind(*args, **kwargs).arguments
    except TypeError:  # the call itself reports it
        arguments = {"inputs": args[0]} if args else dict(kwargs)
    shapes: dict[str, Any] = {}
    for name, value in arguments.items():
        leaves = jax.tree.leaves(value)
        if (name == "mask" or (name in params and params[name].kind in _VARIADIC)
                or not leaves or not all(_is_tensor(x) for x in leaves)):
            continue
        shapes[f"{name}_shape"] = jax.tree.map(lambda x: tuple(x.shape), value)
    wanted = [p.name for p in inspect.signature(layer.build).parameters.values()
              if p.kind not in _VARIADIC]
    if len(wanted) == 1:
        return {wanted[0]: next(iter(shapes.values()), None)}
    for name in wanted:
        if not name.endswith("_shape") or name.removesuffix("_shape") not in params:
            raise ValueError(
                "For a `build()` method with more than one argument, all arguments should "
                "have a `_shape` suffix and match an argument from `call()`. E.g. "
                f"`build(self, foo_shape, bar_shape)`. For layer '{type(layer).__name__}', "
                f"received `build()` argument `{name}`; call() takes {list(params)}.")
    return {name: shapes[name] for name in wanted if name in shapes}


def call_kwargs(layer: Any, kwargs: dict[str, Any], training: bool | None) -> dict[str, Any]:
    """``kwargs`` for ``layer.call``: ``training`` added when ``call`` takes it and the
    value is known (given, or inherited from an outer call; else ``call`` 's default
    applies, as Keras); ``mask`` removed when ``call`` takes neither it nor ``**kwargs``
    (with a warning when it is not ``None``, as Keras warns that the mask is lost)."""
    params = inspect.signature(layer.call).parameters
    if "training" in params and training is not None:
        kwargs["training"] = training
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unused = "mask" in kwargs and "mask" not in params and not takes_kwargs
    if unused and kwargs.pop("mask") is not None:
        warnings.warn(
            f"Layer '{layer.name}' (of type {type(layer).__name__}) was passed a mask, but its "
            "call() takes no `mask` argument: the mask is ignored. Add `mask=None` to call() "
            "to use it.", MirrorfitWarning, stacklevel=4)
    return kwargs


def activity_losses(regularizer: Callable[[Any], Any], outputs: Any) -> list[Any]:
    """The penalty of each output array divided by its batch size (Keras 3: the penalty
    of a scalar output is not divided; an empty batch gives 0)."""
    losses = []
    for output in jax.tree.leaves(outputs):
        if not hasattr(output, "ndim"):
            continue
        loss = regularizer(output)
        if output.ndim > 0:
            batch = output.shape[0]
            loss = loss / batch if batch else jnp.zeros_like(loss)
        losses.append(loss)
    return losses
