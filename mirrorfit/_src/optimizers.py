"""Keras-named optimizers built from optax, with Keras 3 defaults and update rules.

This module owns the optimizers that ``Model.compile(optimizer=...)`` accepts and
the ``get`` lookup from Keras names. Each optimizer is an
``optax.GradientTransformation`` wrapped in ``optax.inject_hyperparams``, so its
learning rate lives in the optimizer state,
``opt_state.hyperparams["learning_rate"]`` (a float32 scalar), where a
learning-rate callback can read and replace it between steps without
recompiling the train step.

Keras' Adam uses "epsilon hat": ``lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``,
which optax's ``scale_by_adam`` (``m_hat / (sqrt(v_hat) + eps)``) only matches with an
``eps`` that changes every step. Adam and AdamW therefore use `scale_by_keras_adam`, which
computes Keras' formula directly with optax's moment updates and ``ScaleByAdamState``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax


# Hyperparameters other than the learning rate stay compile-time constants: only the learning
# rate is changed during training (by the learning-rate callbacks), and every array in the
# optimizer state is one more buffer per device in each step.
_STATIC = ("b1", "b2", "eps", "eps_root", "weight_decay", "momentum", "decay", "initial_scale")


def _injected(factory: Callable[..., optax.GradientTransformation]):
    """``optax.inject_hyperparams(factory)`` with the `_STATIC` arguments it has kept static."""
    names = set(inspect.signature(factory).parameters)
    return optax.inject_hyperparams(factory, static_args=tuple(a for a in _STATIC if a in names))


def scale_by_keras_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Keras 3's Adam direction ``sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``.

    ``m`` and ``v`` are optax's first and second moments (``optax.scale_by_adam``'s state),
    ``t`` the number of updates including this one. Chain with
    ``optax.scale_by_learning_rate`` for the step ``-lr * direction``.

    Args:
        b1: decay of the first-moment estimate.
        b2: decay of the second-moment estimate.
        eps: Keras' "epsilon hat", added to ``sqrt(v)`` before bias correction.

    Returns:
        An ``optax.GradientTransformation`` with state ``optax.ScaleByAdamState``.

    Example:
        >>> direction = scale_by_keras_adam(0.9, 0.999, 1e-7)
        >>> state = direction.init(jnp.zeros(2))
        >>> direction.update(jnp.ones(2), state)[0]
        Array([0.9999901, 0.9999901], dtype=float32)
    """

    def init(params):
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32),
                                      mu=optax.tree.zeros_like(params),
                                      nu=optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        alpha = jnp.sqrt(1.0 - jnp.float32(b2) ** t) / (1.0 - jnp.float32(b1) ** t)
        updates = jax.tree.map(lambda m, v: alpha * m / (jnp.sqrt(v) + eps), mu, nu)
        return updates, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def _keras_adam(learning_rate, b1: float, b2: float, eps: float, weight_decay: float = 0.0
                ) -> optax.GradientTransformation:
    """Keras' (W)Adam: `scale_by_keras_adam`, decoupled weight decay, ``-learning_rate``."""
    decay = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    return optax.chain(scale_by_keras_adam(b1, b2, eps), *decay,
                       optax.scale_by_learning_rate(learning_rate))


def Adam(  # noqa: N802 - named as tf.keras.optimizers.Adam.
    learning_rate: float = 1e-3,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
) -> optax.GradientTransformation:
    """Adam with Keras 3 defaults and update rule.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        beta_1: decay of the first-moment estimate.
        beta_2: decay of the second-moment estimate.
        epsilon: Keras' "epsilon hat" (added to ``sqrt(v)`` before bias correction).

    Returns:
        An ``optax.GradientTransformation`` made by ``optax.inject_hyperparams``.

    Example:
        >>> opt = Adam(learning_rate=1e-4)
        >>> state = opt.init({"w": jnp.zeros(3)})
        >>> float(state.hyperparams["learning_rate"])
        9.999999747378752e-05
    """
    return _injected(_keras_adam)(learning_rate=learning_rate, b1=beta_1, b2=beta_2, eps=epsilon)


def AdamW(  # noqa: N802 - named as tf.keras.optimizers.AdamW.
    learning_rate: float = 1e-3,
    weight_decay: float = 0.004,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
) -> optax.GradientTransformation:
    """AdamW with Keras 3 defaults and update rule.

    Keras decays every variable by ``lr * weight_decay * w`` before the Adam step,
    as ``optax.adamw`` does (all parameters, no mask).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        weight_decay: decoupled weight decay, scaled by the learning rate.
        beta_1: decay of the first-moment estimate.
        beta_2: decay of the second-moment estimate.
        epsilon: Keras' "epsilon hat" (added to ``sqrt(v)`` before bias correction).

    Returns:
        An ``optax.GradientTransformation`` made by ``optax.inject_hyperparams``.
    """
    return _injected(_keras_adam)(learning_rate=learning_rate, b1=beta_1, b2=beta_2, eps=epsilon,
                                  weight_decay=weight_decay)


def SGD(  # noqa: N802 - named as tf.keras.optimizers.SGD.
    learning_rate: float = 0.01,
    momentum: float = 0.0,
    nesterov: bool = False,
) -> optax.GradientTransformation:
    """Stochastic gradient descent with Keras 3 defaults.

    With a constant learning rate, optax's momentum trace equals Keras'
    ``m = momentum * m - lr * g`` (and its Nesterov variant).

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        momentum: momentum in ``[0, 1)``; 0 is plain SGD.
        nesterov: whether to use Nesterov momentum.

    Returns:
        An ``optax.GradientTransformation`` made by ``optax.inject_hyperparams``.
    """
    return _injected(optax.sgd)(
        learning_rate=learning_rate, momentum=momentum or None, nesterov=nesterov
    )


def RMSprop(  # noqa: N802 - named as tf.keras.optimizers.RMSprop.
    learning_rate: float = 1e-3,
    rho: float = 0.9,
    momentum: float = 0.0,
    epsilon: float = 1e-7,
    centered: bool = False,
) -> optax.GradientTransformation:
    """RMSprop with Keras 3 defaults and update rule.

    Keras 3 adds ``epsilon`` inside the square root,
    ``w -= lr * g / sqrt(v + epsilon)``, which is optax's ``eps_in_sqrt=True``.

    Args:
        learning_rate: step size; stored in ``opt_state.hyperparams["learning_rate"]``.
        rho: decay of the mean of squared gradients.
        momentum: momentum applied to the scaled update; 0 disables it.
        epsilon: added to the (centered) mean square before the square root.
        centered: whether to normalize by the estimated variance of the gradient.

    Returns:
        An ``optax.GradientTransformation`` made by ``optax.inject_hyperparams``.
    """
    return _injected(optax.rmsprop)(
        learning_rate=learning_rate,
        decay=rho,
        eps=epsilon,
        eps_in_sqrt=True,
        centered=centered,
        momentum=momentum or None,
    )


_BY_NAME: dict[str, Callable[[], optax.GradientTransformation]] = {
    "adam": Adam,
    "adamw": AdamW,
    "sgd": SGD,
    "rmsprop": RMSprop,
}


def get(identifier: str | optax.GradientTransformation) -> optax.GradientTransformation:
    """Returns the optimizer for ``Model.compile(optimizer=...)``.

    Args:
        identifier: an ``optax.GradientTransformation`` (returned as is) or a Keras
            optimizer name, case-insensitive: ``"adam"``, ``"adamw"``, ``"sgd"``,
            ``"rmsprop"`` (built with Keras 3 defaults).

    Returns:
        An ``optax.GradientTransformation``. Named optimizers keep their learning
        rate in ``opt_state.hyperparams["learning_rate"]``.

    Raises:
        ValueError: for an unknown name.
        TypeError: for anything that is neither a string nor a GradientTransformation.

    Example:
        >>> opt = get("sgd")
        >>> float(opt.init(jnp.zeros(2)).hyperparams["learning_rate"])
        0.009999999776482582
    """
    if isinstance(identifier, optax.GradientTransformation):
        return identifier
    if isinstance(identifier, str):
        make = _BY_NAME.get(identifier.lower())
        if make is None:
            raise ValueError(
                f"Unknown optimizer name. Expected one of {sorted(_BY_NAME)} or an "
                "optax.GradientTransformation (e.g. mf.optimizers.Adam(learning_rate=1e-4)). "
                f"Received: optimizer={identifier!r}"
            )
        return make()
    raise TypeError(
        "optimizer must be an optimizer name (e.g. 'adam') or an "
        f"optax.GradientTransformation. Received: optimizer={identifier!r} "
        f"of type {type(identifier).__name__}"
    )
