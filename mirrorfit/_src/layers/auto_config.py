"""Keras 3's auto-config: a layer's ``get_config`` generated from its constructor arguments.

``Operation.__new__`` in Keras 3 records the arguments a layer was constructed with, so a
subclass that takes only strings, numbers, bools and None (also in lists, tuples and dicts)
saves and loads without writing ``get_config``. `constructor_arguments` records them (with
their defaults, ``**kwargs`` expanded, and without the keys the base config holds);
`generated_config` turns them into the config, or says what to override.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

_VALUE_TYPES = (str, int, float, bool, type(None))  # what Keras 3 auto-configs
BASE_KEYS = ("name", "trainable", "dtype", "activity_regularizer")  # Layer.get_config's


def flat_values(value: Any) -> Iterator[Any]:
    """The leaves of nested lists, tuples and dicts (dict values)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from flat_values(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from flat_values(item)
    else:
        yield value


def constructor_arguments(cls: type, args: tuple, kwargs: dict[str, Any]
                          ) -> tuple[dict[str, Any] | None, str]:
    """``cls(*args, **kwargs)`` 's arguments for the config.

    Returns:
        ``(arguments, "")``, or ``(None, why)``: ``why`` is ``"positional"`` (positional-only
        or ``*args`` arguments) or ``"values"`` (other values, or arguments ``cls.__init__``
        does not take).
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
    for key in BASE_KEYS:  # the base config holds them, serialized
        arguments.pop(key, None)
    if not all(isinstance(v, _VALUE_TYPES) for v in flat_values(arguments)):
        return None, "values"
    return arguments, ""


def generated_config(layer: Any, base: dict[str, Any]) -> dict[str, Any]:
    """``{"name", **constructor arguments, **base}`` of a layer that does not override
    ``get_config``; without ``"name"`` when ``__init__`` could not take it back (as Keras).

    Raises:
        NotImplementedError: the arguments were not recorded (see `constructor_arguments`).
    """
    arguments = layer.__dict__.get("_mf_auto_config")
    if arguments is None:
        what = ("positional-only or *args arguments"
                if layer.__dict__.get("_mf_auto_config_error") == "positional"
                else "argument values other than strings, numbers, bools and None")
        raise NotImplementedError(
            f"Object {type(layer).__name__} was created with {what}, so its config cannot be "
            "generated automatically: override get_config() to return the constructor "
            "arguments as JSON values, e.g. `config = super().get_config(); "
            "config.update({'units': self.units}); return config` (and from_config() if they "
            "need rebuilding).")
    config = {"name": layer.name, **arguments, **base}
    init_params = inspect.signature(type(layer).__init__).parameters
    if "name" not in init_params and not any(
            p.kind is p.VAR_KEYWORD for p in init_params.values()):
        config.pop("name")  # cls(**config) could not take it
    return config
