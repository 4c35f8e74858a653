"""The base of the Keras-named optimizers: an optax transformation with Keras' options and config.

This module owns `Optimizer`, the class every ``mf.optimizers`` optimizer subclasses. An
instance *is* an ``optax.GradientTransformation`` (a subclass of it): ``init`` and
``update`` are ``optax.inject_hyperparams`` over the update rule with Keras' options
around it (`optimizer_options.with_options`), so the learning rate lives in the optimizer
state, ``opt_state.hyperparams["learning_rate"]`` (a float32 scalar), where learning-rate
callbacks and checkpoints find it. On top, as a Keras optimizer: ``get_config`` /
``from_config`` (JSON-able), ``exclude_from_weight_decay``, and the stateful object API of
custom loops (``apply_gradients`` on `Variable` s, `optimizers.stateful`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, TypedDict, cast

import jax
import optax

from mirrorfit._src.optimizers import options as options_lib
from mirrorfit._src.optimizers.stateful import StatefulOptimizer

LearningRate = float | optax.Schedule
"""A float, or an optax schedule evaluated at the train-step count (Keras' "real" iterations)."""


class OptionsWithoutWeightDecay(TypedDict, total=False):
    """`OptimizerOptions` but ``weight_decay``, which `AdamW` takes as its own argument."""

    clipnorm: float | None
    clipvalue: float | None
    global_clipnorm: float | None
    use_ema: bool
    ema_momentum: float
    ema_overwrite_frequency: int | None
    gradient_accumulation_steps: int | None
    name: str | None


class OptimizerOptions(OptionsWithoutWeightDecay, total=False):
    """Keras' options on every optimizer (``keras.optimizers.Optimizer.__init__``).

    weight_decay: decoupled ``w -= w * weight_decay * lr`` before each update; None: off.
    clipnorm: clip each variable's gradient to this L2 norm.
    clipvalue: clip each gradient element to ``[-clipvalue, clipvalue]``.
    global_clipnorm: clip all gradients together to this global L2 norm.
    use_ema: keep an exponential moving average of the params in the optimizer state.
    ema_momentum: the EMA's momentum, in ``[0, 1]`` (default 0.99).
    ema_overwrite_frequency: replace the params by their EMA every this many iterations.
    gradient_accumulation_steps: apply the mean gradient every this many train steps.
    name: the optimizer's name (kept in its config).
    """

    weight_decay: float | None


class _Exclusions:
    """Mutable part of an optimizer: weight-decay exclusions, and whether ``init`` has run."""

    def __init__(self, patterns: Sequence[str] = ()):
        self.patterns = tuple(patterns)
        self.built = False


def _check_learning_rate(learning_rate: Any) -> LearningRate:
    if callable(learning_rate):
        return cast(optax.Schedule, learning_rate)
    if isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool) \
            and learning_rate >= 0:
        return float(learning_rate)
    raise ValueError(
        "Argument `learning_rate` should be a float >= 0 or an optax schedule (a callable "
        "from the step count to the rate, e.g. optax.cosine_decay_schedule(1e-3, 1000)). "
        f"Received: learning_rate={learning_rate!r}")


def _rebuild(cls: type[Optimizer], arguments: dict[str, Any], excluded: tuple[str, ...]
             ) -> Optimizer:
    optimizer = cls(**arguments)
    optimizer._exclusions.patterns = excluded
    return optimizer


class Optimizer(StatefulOptimizer, optax.GradientTransformationExtraArgs):
    """Base class of the Keras-named optimizers; an ``optax.GradientTransformation``.

    Subclasses define ``__new__`` with Keras' signature and call `_create` with their
    update rule. As optax transformations, instances are immutable tuples ``(init,
    update)`` apart from `exclude_from_weight_decay`, which (as in Keras) must be called
    before the first ``init``. As Keras optimizer objects (custom loops), they also keep
    their state in `Variable` s: ``build``, ``apply_gradients``, ``apply``, ``variables``,
    ``iterations`` and ``stateless_apply`` (`StatefulOptimizer`).
    """

    _arguments: dict[str, Any]  # the constructor's arguments, defaults included
    _exclusions: _Exclusions

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A leafless pytree node: JAX would otherwise flatten the tuple (init, update) and
        # rebuild it as ``cls(init, update)``, which is a different constructor call.
        jax.tree_util.register_static(cls)

    @classmethod
    def _create(cls, learning_rate: Any,
                rule: Callable[[Any], optax.GradientTransformation],
                hyperparams: dict[str, Any], options: Mapping[str, Any]) -> Self:
        """Builds the optimizer.

        Args:
            learning_rate: the constructor's ``learning_rate``.
            rule: ``learning_rate -> GradientTransformation``, the Keras update rule
                including the learning rate (called with a traced float32 scalar).
            hyperparams: the rule's other constructor arguments, for the config.
            options: `OptimizerOptions` given to the constructor.

        Raises:
            ValueError: for a bad learning rate or option (see
                `optimizer_options.check_options`).
        """
        options = dict(options)
        name = options.pop("name", None)
        opts = options_lib.check_options(**options)
        learning_rate = _check_learning_rate(learning_rate)
        exclusions = _Exclusions()

        def make(learning_rate):
            return options_lib.with_options(rule(learning_rate), learning_rate, opts,
                                            lambda: exclusions.patterns)

        tx = optax.inject_hyperparams(make)(learning_rate=learning_rate)

        def init(params):
            exclusions.built = True
            return tx.init(params)

        self = super().__new__(cls, init, tx.update)
        self._arguments = {"name": name or cls.__name__.lower(), "learning_rate": learning_rate,
                           **hyperparams, **opts._asdict()}
        self._exclusions = exclusions
        return self

    def exclude_from_weight_decay(self, var_list: Any = None,
                                  var_names: Sequence[str] | None = None) -> None:
        """Excludes params from weight decay, as Keras' method of that name.

        A param is excluded when any of ``var_names`` (regular expressions, usually plain
        substrings such as ``"bias"``) is found (``re.search``) in its path, e.g.
        ``"params/Dense_0/bias"``. Keras searches the variable's name; the path contains
        it. By default nothing is excluded, AdamW included.

        Args:
            var_list: not supported (JAX params are not variable objects); use
                ``var_names``.
            var_names: patterns of the params to exclude.

        Raises:
            TypeError: if ``var_list`` is given or ``var_names`` is not a list of strings.
            ValueError: if the optimizer state was already created (``init`` ran).

        Example:
            >>> opt = mf.optimizers.AdamW(weight_decay=0.01)
            >>> opt.exclude_from_weight_decay(var_names=["bias", "scale"])
        """
        if var_list is not None:
            raise TypeError(
                "exclude_from_weight_decay takes var_names (substrings of param paths such as "
                "'bias'); JAX params are not variable objects. Received: "
                f"var_list={var_list!r}")
        if isinstance(var_names, str) or not isinstance(var_names, Sequence) or not all(
                isinstance(n, str) for n in var_names):
            raise TypeError("var_names must be a list of strings, e.g. var_names=['bias']. "
                            f"Received: var_names={var_names!r}")
        if self._exclusions.built:
            raise ValueError(
                "`exclude_from_weight_decay()` can only be configured before the optimizer is "
                "built: call it before compile(), or before the model is built. Received: a "
                "call after the optimizer state was created")
        self._exclusions.patterns = tuple(var_names)

    @property
    def gradient_accumulation_steps(self) -> int | None:
        """Train steps per applied update (Keras' attribute of that name), or None."""
        return self._arguments["gradient_accumulation_steps"]

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, JSON-able, as ``keras.optimizers.Optimizer.get_config``.

        The learning rate is the one given to the constructor (a learning-rate callback
        changes the state, not the optimizer). Weight-decay exclusions are kept under
        ``"exclude_from_weight_decay"``.

        Raises:
            TypeError: if the learning rate is an optax schedule (a function, not JSON).
        """
        if callable(self._arguments["learning_rate"]):
            raise TypeError(
                "get_config needs a float learning rate: an optax schedule is a function and "
                "cannot be stored as JSON. Pass the optimizer object again instead. Received: "
                f"learning_rate={self._arguments['learning_rate']!r}")
        config = dict(self._arguments)
        if self._exclusions.patterns:
            config["exclude_from_weight_decay"] = list(self._exclusions.patterns)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """Rebuilds an optimizer from `get_config`'s output.

        Raises:
            ValueError: for unknown or invalid arguments in ``config``.
        """
        config = dict(config)
        excluded = config.pop("exclude_from_weight_decay", None)
        optimizer = cls(**config)
        if excluded:
            optimizer.exclude_from_weight_decay(var_names=excluded)
        return optimizer

    def __reduce__(self):
        # A tuple subclass would be copied as ``cls(init, update)``; rebuild from arguments.
        return _rebuild, (type(self), dict(self._arguments), self._exclusions.patterns)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._arguments.items() if k != "name")
        return f"{type(self).__name__}({shown})"
