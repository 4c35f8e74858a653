"""Keras-named optimizers built from optax, with Keras 3 defaults, update rules and options.

This module owns the optimizer classes that ``Model.compile(optimizer=...)`` accepts, their
registry of names `OPTIMIZERS`, and the lookups ``get`` (names, configs, objects),
``serialize`` and ``deserialize``. Each optimizer is an `Optimizer` (an
``optax.GradientTransformation``) whose learning rate lives in
``opt_state.hyperparams["learning_rate"]``; every one takes Keras' options
(`OptimizerOptions`: clipping, weight decay, EMA, gradient accumulation).

The rules use optax where optax computes Keras' formula (SGD, RMSprop with
``eps_in_sqrt``, Adagrad, Adadelta, Lion, Lamb) and `optimizer_rules` where it does not
(Adam/AdamW's "epsilon hat", Adamax, Nadam, Adafactor, Ftrl). SGD's and RMSprop's
momentum equal Keras' while the learning rate is constant: optax keeps the momentum of
the unscaled direction, Keras of the scaled step.
"""

from __future__ import annotations

from typing import Any, Self, Unpack

import optax

from mirrorfit._src.optimizers import rules
from mirrorfit._src.optimizers.base import (
    LearningRate,
    Optimizer,
    OptimizerOptions,
    OptionsWithoutWeightDecay,
)
from mirrorfit._src.utils import registry


def _adam_like(direction: optax.GradientTransformation):
    return lambda lr: optax.chain(direction, optax.scale_by_learning_rate(lr))


class Adam(Optimizer):
    """Adam, as ``keras.optimizers.Adam``: ``w -= lr sqrt(1-b2^t)/(1-b1^t) m/(sqrt(v)+eps)``.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        beta_1: decay of the first-moment estimate.
        beta_2: decay of the second-moment estimate.
        epsilon: Keras' "epsilon hat" (added to ``sqrt(v)`` before bias correction).
        **options: Keras' `OptimizerOptions` (``clipnorm``, ``weight_decay``, ...).

    Raises:
        ValueError: for a bad learning rate or option, naming it.

    Example:
        >>> opt = Adam(learning_rate=1e-4, clipnorm=1.0)
        >>> state = opt.init({"w": jnp.zeros(3)})
        >>> float(state.hyperparams["learning_rate"])
        9.999999747378752e-05
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, beta_1: float = 0.9,
                beta_2: float = 0.999, epsilon: float = 1e-7,
                **options: Unpack[OptimizerOptions]) -> Self:
        return cls._create(learning_rate,
                           _adam_like(rules.scale_by_keras_adam(beta_1, beta_2, epsilon)),
                           {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon}, options)


class AdamW(Optimizer):
    """Adam with decoupled weight decay, as ``keras.optimizers.AdamW``.

    Every param is decayed by ``w -= w * weight_decay * lr`` before the Adam step, biases
    and norms included, as Keras; exclude some with `exclude_from_weight_decay`.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        weight_decay: decoupled weight decay, scaled by the learning rate.
        beta_1, beta_2, epsilon: as `Adam`.
        **options: Keras' `OptimizerOptions` (``clipnorm``, ``use_ema``, ...).

    Raises:
        ValueError: for a bad learning rate or option, or ``weight_decay=None``.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, weight_decay: float = 0.004,
                beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                **options: Unpack[OptionsWithoutWeightDecay]) -> Self:
        if weight_decay is None:
            raise ValueError("Argument `weight_decay` must be a float. Received: "
                             "weight_decay=None")
        return cls._create(learning_rate,
                           _adam_like(rules.scale_by_keras_adam(beta_1, beta_2, epsilon)),
                           {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon},
                           {**options, "weight_decay": weight_decay})


class SGD(Optimizer):
    """Stochastic gradient descent, as ``keras.optimizers.SGD`` (``optax.sgd``).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        momentum: momentum in ``[0, 1]``; 0 is plain SGD.
        nesterov: whether to use Nesterov momentum.
        **options: Keras' `OptimizerOptions`.

    Raises:
        ValueError: for ``momentum`` outside ``[0, 1]`` or a bad option.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 0.01, momentum: float = 0.0,
                nesterov: bool = False, **options: Unpack[OptimizerOptions]) -> Self:
        if not 0 <= momentum <= 1:
            raise ValueError("`momentum` must be a float between [0, 1]. "
                             f"Received: momentum={momentum!r}")
        return cls._create(
            learning_rate, lambda lr: optax.sgd(lr, momentum=momentum or None, nesterov=nesterov),
            {"momentum": momentum, "nesterov": nesterov}, options)


class RMSprop(Optimizer):
    """RMSprop, as ``keras.optimizers.RMSprop``: ``w -= lr * g / sqrt(v + epsilon)``.

    Keras adds ``epsilon`` inside the square root, optax's ``eps_in_sqrt=True``.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        rho: decay of the mean of squared gradients.
        momentum: momentum applied to the scaled update; 0 disables it.
        epsilon: added to the (centered) mean square before the square root.
        centered: whether to normalize by the estimated variance of the gradient.
        **options: Keras' `OptimizerOptions`.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, rho: float = 0.9,
                momentum: float = 0.0, epsilon: float = 1e-7, centered: bool = False,
                **options: Unpack[OptimizerOptions]) -> Self:
        def rule(lr):
            return optax.rmsprop(lr, decay=rho, eps=epsilon, eps_in_sqrt=True,
                                 centered=centered, momentum=momentum or None)

        return cls._create(learning_rate, rule, {"rho": rho, "momentum": momentum,
                                                 "epsilon": epsilon, "centered": centered},
                           options)


class Adagrad(Optimizer):
    """Adagrad, as ``keras.optimizers.Adagrad``: ``n += g^2; w -= lr g / sqrt(n + eps)``.

    ``optax.adagrad`` computes the same (its accumulator starts at
    ``initial_accumulator_value``).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        initial_accumulator_value: starting value of the sum of squared gradients.
        epsilon: added to the sum before the square root.
        **options: Keras' `OptimizerOptions`.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, initial_accumulator_value: float = 0.1,
                epsilon: float = 1e-7, **options: Unpack[OptimizerOptions]) -> Self:
        return cls._create(
            learning_rate, lambda lr: optax.adagrad(lr, initial_accumulator_value, epsilon),
            {"initial_accumulator_value": initial_accumulator_value, "epsilon": epsilon}, options)


class Adadelta(Optimizer):
    """Adadelta, as ``keras.optimizers.Adadelta`` (``optax.adadelta`` computes the same).

    ``d = sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g``; ``w -= lr * d``.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        rho: decay of both moving averages.
        epsilon: added inside both square roots.
        **options: Keras' `OptimizerOptions`.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, rho: float = 0.95,
                epsilon: float = 1e-7, **options: Unpack[OptimizerOptions]) -> Self:
        return cls._create(learning_rate, lambda lr: optax.adadelta(lr, rho, epsilon),
                           {"rho": rho, "epsilon": epsilon}, options)


class Adamax(Optimizer):
    """Adamax, as ``keras.optimizers.Adamax``: ``w -= lr m / ((1 - b1^t)(u + eps))``.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        beta_1: decay of the first-moment estimate.
        beta_2: decay of the infinity norm ``u = max(beta_2 u, |g|)``.
        epsilon: added to ``u``.
        **options: Keras' `OptimizerOptions`.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, beta_1: float = 0.9,
                beta_2: float = 0.999, epsilon: float = 1e-7,
                **options: Unpack[OptimizerOptions]) -> Self:
        return cls._create(learning_rate,
                           _adam_like(rules.scale_by_keras_adamax(beta_1, beta_2, epsilon)),
                           {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon}, options)


class Nadam(Optimizer):
    """Nadam, as ``keras.optimizers.Nadam`` (Dozat's momentum schedule, see
    `optimizer_rules.scale_by_keras_nadam`).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        beta_1, beta_2, epsilon: as `Adam`.
        **options: Keras' `OptimizerOptions`.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, beta_1: float = 0.9,
                beta_2: float = 0.999, epsilon: float = 1e-7,
                **options: Unpack[OptimizerOptions]) -> Self:
        return cls._create(learning_rate,
                           _adam_like(rules.scale_by_keras_nadam(beta_1, beta_2, epsilon)),
                           {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon}, options)


class Adafactor(Optimizer):
    """Adafactor, as ``keras.optimizers.Adafactor`` (see `optimizer_rules.keras_adafactor`).

    Args:
        learning_rate: upper bound of the relative step ``min(lr, 1/sqrt(t))``.
        beta_2_decay: exponent of the second-moment decay ``1 - t^beta_2_decay``.
        epsilon_1: added to ``g^2``.
        epsilon_2: lower bound of the parameter scale ``rms(w)``.
        clip_threshold: bound on the RMS of the unscaled update.
        relative_step: kept for Keras' signature; Keras' step is relative either way.
        **options: Keras' `OptimizerOptions`.
    """

    def __new__(cls, learning_rate: LearningRate = 1e-3, beta_2_decay: float = -0.8,
                epsilon_1: float = 1e-30, epsilon_2: float = 1e-3, clip_threshold: float = 1.0,
                relative_step: bool = True, **options: Unpack[OptimizerOptions]) -> Self:
        return cls._create(
            learning_rate,
            lambda lr: rules.keras_adafactor(lr, beta_2_decay, epsilon_1, epsilon_2,
                                             clip_threshold),
            {"beta_2_decay": beta_2_decay, "epsilon_1": epsilon_1, "epsilon_2": epsilon_2,
             "clip_threshold": clip_threshold, "relative_step": relative_step}, options)


class Lion(Optimizer):
    """Lion, as ``keras.optimizers.Lion`` (``optax.scale_by_lion`` computes the same).

    ``w -= lr * sign(b1 m + (1 - b1) g)``; then ``m = b2 m + (1 - b2) g``. Unlike
    ``optax.lion`` there is no weight decay by default (Keras' ``weight_decay=None``).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        beta_1: interpolation for the update direction, in ``(0, 1]``.
        beta_2: decay of the momentum.
        **options: Keras' `OptimizerOptions`.

    Raises:
        ValueError: for ``beta_1`` outside ``(0, 1]`` or a bad option.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, beta_1: float = 0.9,
                beta_2: float = 0.99, **options: Unpack[OptimizerOptions]) -> Self:
        if beta_1 <= 0 or beta_1 > 1:
            raise ValueError("Argument `beta_1` must be in the [0, 1] range. Otherwise, the "
                             f"optimizer degenerates to SignSGD. Received: beta_1={beta_1}.")
        return cls._create(learning_rate, _adam_like(optax.scale_by_lion(beta_1, beta_2)),
                           {"beta_1": beta_1, "beta_2": beta_2}, options)


class Lamb(Optimizer):
    """Lamb, as ``keras.optimizers.Lamb``: Adam's ``m_hat / (sqrt(v_hat) + eps)`` scaled
    by the trust ratio ``|w| / |update|`` (1 if either is 0).

    Built from ``optax.scale_by_adam`` and ``optax.scale_by_trust_ratio``, which compute
    Keras' formula. Weight decay is Keras' decoupled one, before the step (``optax.lamb``
    puts it inside the trust ratio).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        beta_1, beta_2: as `Adam`.
        epsilon: added to the bias-corrected ``sqrt(v)``.
        **options: Keras' `OptimizerOptions`.
    """

    def __new__(cls, learning_rate: LearningRate = 1e-3, beta_1: float = 0.9,
                beta_2: float = 0.999, epsilon: float = 1e-7,
                **options: Unpack[OptimizerOptions]) -> Self:
        def rule(lr):
            return optax.chain(optax.scale_by_adam(beta_1, beta_2, epsilon),
                               optax.scale_by_trust_ratio(), optax.scale_by_learning_rate(lr))

        return cls._create(learning_rate, rule,
                           {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon}, options)


class Ftrl(Optimizer):
    """FTRL-Proximal, as ``keras.optimizers.Ftrl`` (see `optimizer_rules.keras_ftrl`).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        learning_rate_power: ``<= 0``.
        initial_accumulator_value: ``>= 0``.
        l1_regularization_strength: ``>= 0``.
        l2_regularization_strength: ``>= 0``.
        l2_shrinkage_regularization_strength: ``>= 0``.
        beta: added to the L2 strength as ``beta / (2 lr)``.
        **options: Keras' `OptimizerOptions`.

    Raises:
        ValueError: naming the argument, for one outside its range, as Keras.
    """
    _updates_blocks = True  # element-wise: shard_optimizer_state updates blocks

    def __new__(cls, learning_rate: LearningRate = 1e-3, learning_rate_power: float = -0.5,
                initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                l2_regularization_strength: float = 0.0,
                l2_shrinkage_regularization_strength: float = 0.0, beta: float = 0.0,
                **options: Unpack[OptimizerOptions]) -> Self:
        hyperparams = {
            "learning_rate_power": learning_rate_power,
            "initial_accumulator_value": initial_accumulator_value,
            "l1_regularization_strength": l1_regularization_strength,
            "l2_regularization_strength": l2_regularization_strength,
            "l2_shrinkage_regularization_strength": l2_shrinkage_regularization_strength,
            "beta": beta,
        }
        if learning_rate_power > 0.0:
            raise ValueError("`learning_rate_power` needs to be negative or zero. "
                             f"Received: learning_rate_power={learning_rate_power}.")
        for name, value in hyperparams.items():
            if name not in ("learning_rate_power", "beta") and value < 0.0:
                raise ValueError(f"`{name}` needs to be positive or zero. "
                                 f"Received: {name}={value}.")

        def rule(lr):
            return rules.keras_ftrl(lr, learning_rate_power, initial_accumulator_value,
                                    l1_regularization_strength, l2_regularization_strength,
                                    l2_shrinkage_regularization_strength, beta)

        return cls._create(learning_rate, rule, hyperparams, options)


class OptimizerRegistry(registry.Registry):
    """The optimizer registry, whose `get` gives the optax transformation
    ``compile(optimizer=...)`` uses."""

    def convert(self, value: Any, name: str | None) -> optax.GradientTransformation:
        """An ``optax.GradientTransformation`` as is (``mf.optimizers`` objects are), an
        ``optax.MultiSteps`` as its ``gradient_transformation()``, what a name finds called
        with no arguments (a class: its defaults); anything else raises a TypeError (a class
        given as is: call it)."""
        if isinstance(value, optax.GradientTransformation):
            return value
        if isinstance(value, optax.MultiSteps):
            return value.gradient_transformation()
        if name is not None and callable(value):
            return self.build(value, name)
        hint = ""
        if isinstance(value, type) and issubclass(value, Optimizer):
            hint = f" Call the class: {value.__name__}()."
        elif callable(value):
            hint = " A factory such as optax.adam must be called: optax.adam(1e-3)."
        self.refuse(value, hint)


OPTIMIZERS = OptimizerRegistry(
    "optimizer", "mirrorfit.optimizers", base=(Optimizer,), expected=(
        "an optax.GradientTransformation (e.g. mf.optimizers.Adam(1e-3)), an optax.MultiSteps "
        "or a config dict"))
"""Keras' optimizer classes under Keras' lower-case names (``"adam"``, ``"rmsprop"``, ...),
looked up in any case; `mirrorfit._src.optimizers.loss_scale` adds ``LossScaleOptimizer``."""

for _cls in (Adam, AdamW, SGD, RMSprop, Adagrad, Adadelta, Adamax, Nadam, Adafactor, Lion, Lamb,
             Ftrl):
    OPTIMIZERS.register(_cls, name=_cls.__name__.lower())


serialize = OPTIMIZERS.serialize
"""An optimizer's config, ``{"module", "class_name", "config", "registered_name"}``, JSON-able,
as ``keras.optimizers.serialize``, of an ``mf.optimizers`` optimizer (an `Optimizer` or a
``LossScaleOptimizer``); anything else (another optax transformation has no config) raises a
TypeError, as does an optimizer whose learning rate is a schedule (`Optimizer.get_config`)."""

deserialize = OPTIMIZERS.deserialize
"""The optimizer `serialize` described, as ``keras.optimizers.deserialize``, from
``{"class_name": "Adam", "config": {...}}`` (with ``"module"`` and ``"registered_name"`` as
`serialize` writes them; a built-in class name in any case, and ``"config"`` may be omitted
for Keras' defaults); ``custom_objects`` (``{class name: class}``) gives your optimizer
classes not registered with ``mf.saving.register_serializable``. An unknown class name,
invalid config values or anything but a config raise a ValueError."""

get = OPTIMIZERS.get
"""The optimizer for ``Model.compile(optimizer=...)``, as ``keras.optimizers.get``
(`Registry.get` and `OptimizerRegistry.convert`): an ``optax.GradientTransformation``
(``mf.optimizers`` objects included) as is; an ``optax.MultiSteps`` as its
``gradient_transformation()``; a Keras optimizer name, in any case (``"adam"``, ``"adamw"``,
``"sgd"``, ``"rmsprop"``, ``"adagrad"``, ``"adadelta"``, ``"adamax"``, ``"nadam"``,
``"adafactor"``, ``"lion"``, ``"lamb"``, ``"ftrl"``, with Keras 3's defaults) or the registered
name of your optimizer class; or a config dict from `serialize`. Named optimizers keep their
learning rate in ``opt_state.hyperparams["learning_rate"]``. An unknown name or config raises
a ValueError, anything else a TypeError."""
