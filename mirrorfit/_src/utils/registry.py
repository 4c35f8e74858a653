"""The one registry of names: which class or function a name means, and back, as ``keras.saving``.

It holds two kinds of table, as Keras 3's ``object_registration`` and ``serialization_lib``:

* one `Registry` per kind of built-in object (layers, losses, metrics, optimizers,
  regularizers, initializers, activations), created by the package that defines them: each
  object under its name (a class under its class name) and Keras' aliases (``"mse"``,
  ``"adam"``), looked up ignoring case;
* the user's classes and functions, registered once for every kind with
  `register_serializable` under ``"package>Name"``, and the ``custom_objects`` of a call
  (an argument, or `custom_object_scope` for configs nested in other configs): their table is
  `mirrorfit._src.utils.object_registration`'s, whose names this module re-exports.

An object is saved as Keras 3 saves it (`serialize`)::

    {"module": "mirrorfit.losses", "class_name": "Huber", "config": {...},
     "registered_name": None}

where ``module`` is the public module of a built-in class or the module of the user's class,
and ``registered_name`` is ``None`` for a built-in, else the user class's registered name
(its class name when it was not registered). `deserialize` rebuilds it with
``cls.from_config(config)`` (``cls(**config)`` for a class without ``from_config``). Only
registered classes and ``custom_objects`` are ever instantiated: a saved name never imports
code.

It imports only `mirrorfit._src.utils.object_registration`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from mirrorfit._src.utils.object_registration import CustomObjectScope as CustomObjectScope
from mirrorfit._src.utils.object_registration import custom_object_scope as custom_object_scope
from mirrorfit._src.utils.object_registration import get_registered_name as get_registered_name
from mirrorfit._src.utils.object_registration import (
    get_registered_object as get_registered_object,
)
from mirrorfit._src.utils.object_registration import (
    register_serializable as register_serializable,
)
from mirrorfit._src.utils.object_registration import registered_name

T = TypeVar("T", bound=Callable[..., Any])  # a class or a function

_BY_MODULE: dict[str, Registry] = {}
"""Public module (``"mirrorfit.losses"``) -> the registry of its built-in objects."""


def _instantiate(cls: Any, config: Mapping[str, Any]) -> Any:
    from_config = getattr(cls, "from_config", None)
    return from_config(dict(config)) if from_config is not None else cls(**config)


class Registry:
    """The names of one kind of built-in object (losses, metrics, ...), as Keras'
    ``ALL_OBJECTS_DICT`` of a package.

    Names are looked up ignoring case; when two names differ only in case, the one registered
    later wins (so ``"accuracy"`` can mean another metric than the class ``Accuracy``), while
    `deserialize` finds a class by its exact class name first.

    Args:
        noun: what one object is, for messages (``"loss"``, ``"optimizer"``).
        module: the public module of the built-ins (``"mirrorfit.losses"``), written as the
            ``module`` of their configs; ``None`` for kinds saved by name only (activations,
            initializers).

    Example:
        >>> from mirrorfit._src.losses.losses import LOSSES
        >>> LOSSES.get("MSE").__name__
        'MeanSquaredError'
    """

    def __init__(self, noun: str, module: str | None = None) -> None:
        self.noun = noun
        self.module = module
        self._names: dict[str, Any] = {}  # name as registered -> object
        self._lower: dict[str, Any] = {}  # lower-case name -> object (the later one wins)
        self._classes: dict[str, type] = {}  # class __name__ -> class
        self._primary: dict[Any, str] = {}  # object -> its first name, in registration order
        if module is not None:
            _BY_MODULE[module] = self

    @overload
    def register(self, obj: T, *, name: str | None = None,
                 aliases: tuple[str, ...] = ()) -> T: ...

    @overload
    def register(self, obj: None = None, *, name: str | None = None,
                 aliases: tuple[str, ...] = ()) -> Callable[[T], T]: ...

    def register(self, obj: Any = None, *, name: str | None = None,
                 aliases: tuple[str, ...] = ()) -> Any:
        """Registers a built-in class or function under ``name`` and ``aliases``.

        Usable as ``@registry.register``, ``@registry.register(aliases=(...))`` or
        ``registry.register(obj, name=...)``; registering an object again adds names.

        Args:
            obj: the class or function.
            name: its name; defaults to ``obj.__name__``.
            aliases: more names for it (Keras' short names, function names).

        Returns:
            ``obj`` (or, without ``obj``, a decorator that returns its argument).

        Raises:
            ValueError: another class of the same ``__name__`` is registered here.
        """

        def add(target: T) -> T:
            self._add(target, (name or target.__name__, *aliases))
            return target

        return add if obj is None else add(obj)

    def _add(self, obj: Any, names: tuple[str, ...]) -> None:
        if inspect.isclass(obj):
            known = self._classes.setdefault(obj.__name__, obj)
            if known is not obj:
                raise ValueError(f"Two {self.noun} classes are named {obj.__name__!r}: "
                                 f"{known!r} is registered. Received: {obj!r}")
        self._primary.setdefault(obj, names[0])
        for n in names:
            self._names[n] = obj
            self._lower[n.lower()] = obj

    def built_in(self, name: str) -> Any | None:
        """The built-in object called ``name`` (any case), or ``None``."""
        return self._lower.get(name.lower())

    def get(self, name: str, custom_objects: Mapping[str, Any] | None = None) -> Any | None:
        """What ``name`` means: the user's objects (`get_registered_object`), then the
        built-ins (any case); ``None`` if nothing is called so."""
        found = get_registered_object(name, custom_objects)
        return found if found is not None else self.built_in(name)

    def resolve(self, identifier: Any, unknown: str) -> Any:
        """Keras' ``<kind>.get``: a callable as is, a config dict `deserialize` d, a name
        looked up with `get` (a class is built with its defaults).

        Args:
            identifier: the callable, config dict or name.
            unknown: the error message for anything else, or a name nothing is called.

        Raises:
            ValueError: ``unknown``, for a name nothing is called or another kind of value.
        """
        if callable(identifier):
            return identifier
        if isinstance(identifier, dict):
            return self.deserialize(identifier)
        found = self.get(identifier) if isinstance(identifier, str) else None
        if found is None:
            raise ValueError(unknown)
        return found() if isinstance(found, type) else found

    def names(self) -> list[str]:
        """Every built-in name and alias, sorted, as registered."""
        return sorted(self._names)

    def classes(self) -> tuple[type, ...]:
        """Every built-in class, in registration order."""
        return tuple(obj for obj in self._primary if inspect.isclass(obj))

    def name_of(self, obj: Any) -> str | None:
        """The name a function is saved under: the first name it was registered under here,
        else its `register_serializable` name; ``None`` for another object."""
        try:
            return self._primary.get(obj) or registered_name(obj)
        except TypeError:  # unhashable
            return None

    def is_built_in(self, cls: type) -> bool:
        """Whether ``cls`` is a built-in class of this registry."""
        return self._classes.get(cls.__name__) is cls

    def deserialize(self, config: Mapping[str, Any],
                    custom_objects: Mapping[str, Any] | None = None) -> Any:
        """The object `serialize` described, as ``keras.saving.deserialize_keras_object``.

        The class is looked up by ``registered_name`` (then ``class_name``) among
        ``custom_objects``, the `custom_object_scope` and the `register_serializable` names,
        then among this registry's built-ins when ``module`` is theirs or absent (configs
        saved before ``module`` was written): by exact class name, then by any name or alias
        in any case (``{"class_name": "adam"}``).

        Args:
            config: ``{"class_name": ..., "config": {...}}``, with ``"module"`` and
                ``"registered_name"`` when `serialize` wrote it; ``"config"`` may be
                omitted (the defaults).
            custom_objects: ``{name: class}`` for the user's classes.

        Returns:
            ``cls.from_config(config["config"])``, or ``cls(**config["config"])``.

        Raises:
            ValueError: for a malformed config, or a class found nowhere (saying how to
                register it or pass it).
        """
        if not isinstance(config, Mapping) or not isinstance(config.get("class_name"), str):
            raise ValueError(
                f"A {self.noun} config must be {{'class_name': <a class name>, 'config': "
                f"{{...}}}}, as serialize writes it. Received: {self.noun}={config!r}")
        class_name, module = config["class_name"], config.get("module")
        saved_name = config.get("registered_name") or class_name
        cls = get_registered_object(saved_name, custom_objects)
        if cls is None:
            cls = get_registered_object(class_name, custom_objects)
        if cls is None and module in (None, self.module):
            cls = self._classes.get(class_name) or self.built_in(class_name)
        if cls is None:
            where = f" of module {module!r}" if module else ""
            built_ins = f" (built-in ones come from {self.module})" if self.module else ""
            raise ValueError(
                f"Unknown {self.noun} class_name {class_name!r}{where}{built_ins}: decorate "
                "your class with @mf.saving.register_serializable() and import it before "
                f"loading, or pass it in custom_objects, e.g. custom_objects={{{class_name!r}: "
                f"{class_name}}}. Received: custom_objects={sorted(custom_objects or {})}")
        return _instantiate(cls, config.get("config") or {})

    def __repr__(self) -> str:
        return f"Registry({self.noun!r}, {len(self._primary)} objects)"


_USER_OBJECTS = Registry("object")
"""No built-ins: `deserialize` of a config whose module is no registry's finds only the
user's classes."""


def serialize(obj: Any) -> dict[str, Any]:
    """``{"module", "class_name", "config", "registered_name"}`` of an object with a
    ``get_config``, as ``keras.saving.serialize_keras_object``.

    Args:
        obj: a built-in object of a `Registry` (``module`` is its registry's, and
            ``registered_name`` ``None``) or the user's (``module`` is its class's, and
            ``registered_name`` its `get_registered_name`).

    Raises:
        TypeError: ``obj`` has no ``get_config`` method.
        Exception: whatever ``obj.get_config()`` raises (e.g. an optimizer with a schedule).

    Example:
        >>> config = serialize(mf.losses.Huber(delta=2.0))
        >>> config["module"], config["class_name"], config["config"]["delta"]
        ('mirrorfit.losses', 'Huber', 2.0)
    """
    cls = type(obj)
    if inspect.isclass(obj) or not callable(getattr(obj, "get_config", None)):
        raise TypeError("serialize takes an object with a get_config() method, e.g. "
                        f"mf.losses.Huber(delta=2.0). Received: {obj!r} of type {cls.__name__}")
    owner = next((r for r in _BY_MODULE.values() if r.is_built_in(cls)), None)
    return {"module": owner.module if owner else cls.__module__,
            "class_name": cls.__name__,
            "config": obj.get_config(),
            "registered_name": None if owner else get_registered_name(cls)}


def deserialize(config: Mapping[str, Any],
                custom_objects: Mapping[str, Any] | None = None) -> Any:
    """The object `serialize` described, found by its ``module``'s `Registry`, or among
    the user's objects; see `Registry.deserialize`.

    Raises:
        ValueError: for a malformed config or a class found nowhere.
    """
    module = config.get("module") if isinstance(config, Mapping) else None
    owner = _BY_MODULE.get(module, _USER_OBJECTS) if isinstance(module, str) else _USER_OBJECTS
    return owner.deserialize(config, custom_objects)
