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

A kind's ``get``, ``serialize`` and ``deserialize`` (Keras' ``keras.losses.get``, ...) are
its `Registry`'s methods, written once here: ``mf.losses.get`` is ``LOSSES.get``.

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
from typing import Any, Literal, NoReturn, TypeVar, get_args, overload

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

_REFUSED: Any = object()
"""A `Registry`'s ``default`` when its `get` refuses ``None``."""

Saves = Literal["configs", "names", "functions", "named functions"]
"""What a `Registry`'s ``serialize`` saves, each with all before it (see ``saves``)."""
_SAVES: tuple[Saves, ...] = get_args(Saves)


def _a(noun: str) -> str:
    """``noun`` with its indefinite article, for messages (``"an optimizer"``)."""
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _instantiate(cls: Any, config: Mapping[str, Any]) -> Any:
    from_config = getattr(cls, "from_config", None)
    return from_config(dict(config)) if from_config is not None else cls(**config)


class Registry:
    """The names of one kind of built-in object (losses, metrics, ...), as Keras'
    ``ALL_OBJECTS_DICT`` of a package, and the kind's ``get``, ``serialize`` and
    ``deserialize``: a kind's module has one line for each (``get = LOSSES.get``).

    Names are looked up ignoring case; when two names differ only in case, the one registered
    later wins (so ``"accuracy"`` can mean another metric than the class ``Accuracy``), while
    `deserialize` finds a class by its exact class name first. A kind whose objects are more
    than what the registry finds (``mf.losses.get`` wraps a `Loss` for the train step)
    overrides `convert`.

    Args:
        noun: what one object is, for messages (``"loss"``, ``"optimizer"``).
        module: the public module of the built-ins (``"mirrorfit.losses"``), written as the
            ``module`` of their configs; ``None`` for a kind saved by name only (activations),
            whose `get` takes no config dict.
        argument: the argument that takes the kind, for messages (default ``noun``).
        base: the classes whose objects `serialize` saves as configs (``(Loss,)``); a class
            a name finds is built with its defaults when ``base`` is given.
        default: what `get` gives for ``None``; without it ``None`` is refused.
        expected: what `get` takes besides names, for messages.
        error: the exception `get` raises for a value of another kind (`refuse`).
        saves: what `serialize` writes besides the configs of ``base`` objects, and so what
            `deserialize` reads:

            * ``"configs"``: nothing else (losses, metrics, optimizers: the arguments of
              ``compile``); anything else raises a TypeError, and `deserialize` reads
              configs only.
            * ``"names"``: names, and ``None`` when there is a ``default``, as they are
              (constraints, regularizers: layer arguments); anything else raises a
              ValueError, and `deserialize` gives what `get` gives.
            * ``"functions"``: also a function by its name here or its
              `register_serializable` name (initializers); `deserialize` keeps a built-in
              name as the name, which the layer resolves when it runs.
            * ``"named functions"``: also any other named function by its ``__name__``,
              found again through ``custom_objects`` (activations).

    Example:
        >>> from mirrorfit._src.losses.losses import LOSSES
        >>> LOSSES.find("MSE").__name__
        'MeanSquaredError'
        >>> LOSSES.get("mse")
        PerExampleLoss(MeanSquaredError(name='mean_squared_error', reduction='sum_over_batch_size'))
    """

    def __init__(self, noun: str, module: str | None = None, *, argument: str | None = None,
                 base: tuple[type, ...] = (), default: Any = _REFUSED,
                 expected: str = "a callable", error: type[Exception] = TypeError,
                 saves: Saves = "configs") -> None:
        self.noun = noun
        self.module = module
        self.argument = argument or noun
        self.base = base
        self.default = default
        self.expected = expected
        self.error = error
        self.saves = saves
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
            obj: the class or function (or an immutable object a name stands for, which `get`
                gives as it is).
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

    def find(self, name: str, custom_objects: Mapping[str, Any] | None = None) -> Any | None:
        """What ``name`` means: the user's objects (`get_registered_object`), then the
        built-ins (any case); ``None`` if nothing is called so."""
        found = get_registered_object(name, custom_objects)
        return found if found is not None else self.built_in(name)

    @property
    def saves_functions(self) -> bool:
        """Whether `serialize` saves functions by name (``saves`` is ``"functions"`` or
        ``"named functions"``), and `deserialize` so keeps a built-in name as the name."""
        return self.saves in _SAVES[2:]

    def get(self, identifier: Any) -> Any:
        """Keras' ``<kind>.get``: the object an argument names, as `convert` makes it.

        A name (any case, or one of yours registered with ``mf.saving.register_serializable``
        or in ``mf.saving.custom_object_scope``) gives what is registered under it; a config
        dict is rebuilt (`deserialize`) when the kind has configs; anything else, ``None``
        included, goes to `convert` as it is.

        Raises:
            ValueError: a name nothing is called, or an unknown class in a config.
            TypeError: another kind of value (`refuse`; the kind's ``error``, which for
                constraints, initializers and regularizers is a ValueError).

        Example:
            >>> mf.constraints.get("max_norm")
            MaxNorm(max_value=2, axis=0)
            >>> mf.initializers.get("HeNormal")
            HeNormal(seed=None)
            >>> mf.regularizers.get("l2")
            L2(l2=0.01)
            >>> mf.metrics.get("acc")
            InferredAccuracy(name='acc')
            >>> float(mf.optimizers.get("sgd").init(jnp.zeros(2)).hyperparams["learning_rate"])
            0.009999999776482582
        """
        name = identifier if isinstance(identifier, str) else None
        if name is not None:
            identifier = self.find(name)
            if identifier is None:
                raise ValueError(
                    f"Unknown {self.noun} name {name!r}: {self.argument} must be one of "
                    f"{self.names()} (any case), {self.expected}, or a name of yours "
                    "registered with @mf.saving.register_serializable() or passed in "
                    "custom_objects. "
                    f"Received: {self.argument}={name!r}")
        elif isinstance(identifier, dict) and self.module is not None:
            identifier = self.deserialize(identifier)
        return self.convert(identifier, name)

    def convert(self, value: Any, name: str | None) -> Any:
        """The kind's object for what `get` found or was given; kinds override it.

        ``None`` is the ``default``; a class found by a name is built with its defaults
        (`build`) when the kind has ``base`` classes; an object of a ``base`` class, or a
        callable, comes back as it is (a class given as it is too); anything else is refused
        (`refuse`).

        Args:
            value: the object found or given.
            name: the name it was found by, or ``None``.
        """
        if value is None and self.default is not _REFUSED:
            return self.default
        if name is not None and self.base and inspect.isclass(value):
            return self.build(value, name)
        if isinstance(value, self.base) or callable(value):
            return value
        self.refuse(value)

    def build(self, cls: Callable[..., Any], found_by: str | None, **kwargs: Any) -> Any:
        """``cls(**kwargs)``; a class (or a registered factory) that needs arguments raises a
        ValueError saying so, naming ``found_by``, the name it was found by."""
        try:
            return cls(**kwargs)
        except TypeError:
            shown = (self.module or "").replace("mirrorfit", "mf", 1)
            raise ValueError(
                f"The {self.noun} {cls.__name__} needs arguments: pass an object, e.g. "
                f"{self.argument}={shown}.{cls.__name__}(...). Received: "
                f"{self.argument}={(found_by or cls.__name__)!r}") from None

    def refuse(self, value: Any, hint: str = "") -> NoReturn:
        """Raises the kind's ``error`` for a value of another kind (``hint``: what to do
        instead)."""
        raise self.error(f"{self.argument} must be {_a(self.noun)} name, {self.expected}.{hint} "
                         f"Received: {self.argument}={value!r} of type {type(value).__name__}")

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

    def serialize(self, obj: Any) -> Any:
        """Keras' ``<kind>.serialize``: what a config stores for ``obj``.

        An object of a ``base`` class (or of a built-in class) as `serialize` writes it,
        ``{"module", "class_name", "config", "registered_name"}``; and, as the kind ``saves``,
        a name and ``None`` as they are, a function by its name.

        Raises:
            TypeError: a kind that saves ``"configs"`` only, given another object.
            ValueError: another kind, given what it cannot save (a lambda, a function it
                saves by no name).
        """
        if isinstance(obj, self.base) or self.is_built_in(type(obj)):
            return serialize(obj)
        shown = (self.module or "").replace("mirrorfit", "mf", 1)
        classes = " or ".join(f"{shown}.{cls.__name__}" for cls in self.base)
        if self.saves == "configs":
            raise TypeError(
                f"serialize takes an {shown} {self.noun} ({classes} or your subclass with "
                f"get_config); other objects have no config. Received: {self.noun}={obj!r} of "
                f"type {type(obj).__name__}")
        if isinstance(obj, str) or (obj is None and self.default is not _REFUSED):
            return obj
        name = self.name_of(obj) if self.saves_functions else None
        own = getattr(obj, "__name__", None)
        if name is None and self.saves == "named functions" and own not in (None, "<lambda>") \
                and self.built_in(own) is None:
            name = own
        if name is not None:
            return name
        ways = [f"{classes} objects (or your subclasses with get_config)" if classes else "",
                "names", "functions registered with @mf.saving.register_serializable()"
                if self.saves_functions else "",
                "other named functions (not lambdas, nor named as a built-in; pass them in "
                "custom_objects when loading)" if self.saves == "named functions" else ""]
        ways = [way for way in ways if way]
        raise ValueError(f"Only {', '.join(ways[:-1])} or {ways[-1]} can be saved in a config, "
                         f"not this custom {self.noun}. Received: {self.noun}={obj!r}")

    def deserialize(self, config: Any, custom_objects: Mapping[str, Any] | None = None) -> Any:
        """Keras' ``<kind>.deserialize``: the object `serialize` described, as
        ``keras.saving.deserialize_keras_object``.

        A config's class is looked up by ``registered_name`` (then ``class_name``) among
        ``custom_objects``, the `custom_object_scope` and the `register_serializable` names,
        then among this registry's built-ins when ``module`` is theirs or absent (configs
        saved before ``module`` was written): by exact class name, then by any name or alias
        in any case (``{"class_name": "adam"}``). ``custom_objects`` also reach the configs
        nested in this one (a layer's regularizer). A kind that saves names reads them too
        (see ``saves``).

        Args:
            config: ``{"class_name": ..., "config": {...}}``, with ``"module"`` and
                ``"registered_name"`` when `serialize` wrote it; ``"config"`` may be
                omitted (the defaults); or what else the kind `serialize` s.
            custom_objects: ``{name: class or function}`` for the user's objects.

        Returns:
            ``cls.from_config(config["config"])``, or ``cls(**config["config"])``; for a
            name, what `get` gives (or the built-in name itself, see ``saves``).

        Raises:
            ValueError: for a malformed config, or a class or name found nowhere (saying how
                to register it or pass it).
        """
        with custom_object_scope(custom_objects):
            if self.saves == "configs" or (isinstance(config, dict) and self.module is not None):
                return self._from_config(config, custom_objects)
            if self.saves_functions and isinstance(config, str) and \
                    self.built_in(config) is not None:
                return config
            return self.get(config)

    def _from_config(self, config: Any, custom_objects: Mapping[str, Any] | None) -> Any:
        if not isinstance(config, Mapping) or not isinstance(config.get("class_name"), str):
            raise ValueError(
                f"{_a(self.noun).capitalize()} config must be {{'class_name': <a class name>, "
                f"'config': {{...}}}}, as serialize writes it. Received: {self.noun}={config!r}")
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
