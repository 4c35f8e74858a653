"""The user's classes and functions by name, as Keras 3's
``keras/src/saving/object_registration.py``.

Registered once for every kind with `register_serializable` under ``"package>Name"``, or
given as the ``custom_objects`` of a call (an argument, or `custom_object_scope` for configs
nested in other configs). The built-in objects of each kind are in the kind's
`mirrorfit._src.utils.registry.Registry`, which looks here first.

This module imports nothing from mirrorfit.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Self, TypeVar

T = TypeVar("T", bound=Callable[..., Any])  # a class or a function

_CUSTOM_OBJECTS: dict[str, Any] = {}
"""``"package>Name"`` -> the user's class or function (`register_serializable`)."""
_CUSTOM_NAMES: dict[Any, str] = {}
"""The user's class or function -> its ``"package>Name"``."""
_SCOPE: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "mirrorfit_custom_objects", default=MappingProxyType({}))
"""The ``custom_objects`` of the enclosing `custom_object_scope` blocks."""


def register_serializable(package: str = "Custom", name: str | None = None
                          ) -> Callable[[T], T]:
    """Class or function decorator: saved configs find it by ``"package>name"``.

    As ``keras.saving.register_keras_serializable``: a registered class loads from a saved
    config (a compile configuration, a layer in an architecture, an optimizer) without
    ``custom_objects``, once the module that defines it has been imported.

    Args:
        package: the first part of the registered name.
        name: the second part; defaults to the class's or function's ``__name__``.

    Returns:
        A decorator that registers its argument and returns it unchanged.

    Raises:
        ValueError: for a ``package`` that is not a non-empty string without ``">"``, or (from
            the decorator) a class without ``get_config``.

    Example:
        >>> @register_serializable("my_package")
        ... class DoubleMse(mf.losses.Loss):
        ...     def call(self, y_true, y_pred):
        ...         return 2.0 * mf.losses.mean_squared_error(y_true, y_pred)
        >>> get_registered_name(DoubleMse)
        'my_package>DoubleMse'
        >>> get_registered_object("my_package>DoubleMse") is DoubleMse
        True
    """
    if not isinstance(package, str) or not package or ">" in package:
        raise ValueError("package must be a non-empty string without '>' (the registered name "
                         f"is 'package>name'). Received: package={package!r}")

    def decorator(obj: T) -> T:
        _register_user_object(obj, f"{package}>{name or obj.__name__}")
        return obj

    return decorator


def _register_user_object(obj: Any, registered_name: str) -> None:
    if inspect.isclass(obj) and not hasattr(obj, "get_config"):
        raise ValueError(
            "register_serializable registers classes that save their constructor arguments: "
            f"define get_config() on {obj.__name__} (and from_config, unless the class "
            f"takes get_config()'s keys as arguments). Received: {obj!r}")
    _CUSTOM_OBJECTS[registered_name] = obj
    _CUSTOM_NAMES[obj] = registered_name


def registered_name(obj: Any) -> str | None:
    """The name `register_serializable` gave ``obj``, or ``None``."""
    try:
        return _CUSTOM_NAMES.get(obj)
    except TypeError:  # unhashable
        return None


def get_registered_name(obj: Any) -> str:
    """The name `register_serializable` gave ``obj``, else its ``__name__``.

    Example:
        >>> get_registered_name(mf.losses.Huber)
        'Huber'
    """
    return registered_name(obj) or obj.__name__


def get_registered_object(name: str, custom_objects: Mapping[str, Any] | None = None,
                          module_objects: Mapping[str, Any] | None = None) -> Any | None:
    """The user's class or function saved under ``name``, or ``None``.

    Looks in ``custom_objects``, then in the enclosing `custom_object_scope` blocks, then
    among the `register_serializable` names, then in ``module_objects`` (Keras looks at the
    scope and the registered names before ``custom_objects``; here an explicit argument wins).

    Args:
        name: a registered name (``"package>Name"``) or a ``custom_objects`` key.
        custom_objects: ``{name: class or function}``.
        module_objects: ``{name: class or function}`` looked at last.
    """
    for table in (custom_objects or {}, _SCOPE.get(), _CUSTOM_OBJECTS, module_objects or {}):
        if name in table:
            return table[name]
    return None


class CustomObjectScope:
    """Makes ``custom_objects`` visible to every lookup inside a ``with`` block.

    As ``keras.saving.custom_object_scope``, for configs nested inside configs (a custom
    regularizer in a layer's config, the inner optimizer of a ``LossScaleOptimizer``) whose
    ``from_config`` takes no ``custom_objects``. Nested scopes add to the outer ones.

    Args:
        custom_objects: ``{name: class or function}``.

    Example:
        >>> def my_relu(x):
        ...     return jnp.maximum(x, 0.0)
        >>> config = mf.layers.Dense(2, activation=my_relu).get_config()
        >>> config["activation"]
        'my_relu'
        >>> with custom_object_scope({"my_relu": my_relu}):
        ...     layer = mf.layers.Dense.from_config(config)
        >>> layer.activation is my_relu
        True
    """

    def __init__(self, custom_objects: Mapping[str, Any] | None) -> None:
        self.custom_objects = dict(custom_objects or {})
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> Self:
        self._tokens.append(_SCOPE.set(MappingProxyType({**_SCOPE.get(), **self.custom_objects})))
        return self

    def __exit__(self, *exc_info: object) -> None:
        _SCOPE.reset(self._tokens.pop())


custom_object_scope = CustomObjectScope
"""Keras' lower-case name of `CustomObjectScope` (``keras.saving.custom_object_scope``)."""
