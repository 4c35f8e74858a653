"""Keras' regression, hinge and distribution-matching losses, as functions and `Loss` classes.

Each function is Keras' (``keras/src/losses/losses.py``) re-expressed on ``optax.losses``
where optax has the same formula: it maps ``y_true, y_pred`` of shape ``[batch, ..., d]`` to
the unreduced values ``[batch, ...]`` (the last axis reduced). Ranks are matched first as in
`squeeze_or_expand_to_same_rank`, so ``[batch]`` targets work against ``[batch, 1]`` outputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from mirrorfit._src.losses.loss import EPSILON, LossFunctionWrapper, squeeze_or_expand_to_same_rank

_DEFAULT = "sum_over_batch_size"


def _floats(y_true: jax.Array, y_pred: jax.Array) -> tuple[jax.Array, jax.Array]:
    return squeeze_or_expand_to_same_rank(jnp.asarray(y_true, jnp.float32),
                                          jnp.asarray(y_pred, jnp.float32))


def mean_squared_error(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean((y_true - y_pred) ** 2, axis=-1)`` (``optax.losses.squared_error``)."""
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(optax.losses.squared_error(y_pred, y_true), axis=-1)


def mean_absolute_error(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean(|y_true - y_pred|, axis=-1)``."""
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(jnp.abs(y_true - y_pred), axis=-1)


def mean_absolute_percentage_error(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``100 * mean(|y_true - y_pred| / max(|y_true|, EPSILON), axis=-1)``, as Keras."""
    y_true, y_pred = _floats(y_true, y_pred)
    diff = jnp.abs((y_true - y_pred) / jnp.maximum(jnp.abs(y_true), EPSILON))
    return 100.0 * jnp.mean(diff, axis=-1)


def mean_squared_logarithmic_error(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean((log(max(y_pred, EPSILON) + 1) - log(max(y_true, EPSILON) + 1)) ** 2, axis=-1)``."""
    y_true, y_pred = _floats(y_true, y_pred)
    first = jnp.log(jnp.maximum(y_pred, EPSILON) + 1.0)
    second = jnp.log(jnp.maximum(y_true, EPSILON) + 1.0)
    return jnp.mean(jnp.square(first - second), axis=-1)


def cosine_similarity(y_true: jax.Array, y_pred: jax.Array, axis: int = -1) -> jax.Array:
    """``-sum(l2_normalize(y_true) * l2_normalize(y_pred), axis)``, as Keras' loss.

    Vectors are scaled by ``1 / sqrt(max(sum(x ** 2), EPSILON ** 2))`` as Keras' ``normalize``
    (``optax.losses.cosine_similarity`` with ``epsilon=EPSILON ** 2``). The value lies in
    ``[-1, 1]``; -1 means the vectors point the same way.
    """
    y_true, y_pred = _floats(y_true, y_pred)
    return -optax.losses.cosine_similarity(y_pred, y_true, epsilon=EPSILON**2, axis=axis)


def huber(y_true: jax.Array, y_pred: jax.Array, delta: float = 1.0) -> jax.Array:
    """``mean(0.5 e ** 2 if |e| <= delta else delta |e| - 0.5 delta ** 2, axis=-1)``.

    ``e = y_pred - y_true`` (``optax.losses.huber_loss``).
    """
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(optax.losses.huber_loss(y_pred, y_true, delta=delta), axis=-1)


def log_cosh(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean(log(cosh(y_pred - y_true)), axis=-1)`` (``optax.losses.log_cosh``)."""
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(optax.losses.log_cosh(y_pred, y_true), axis=-1)


def _hinge_labels(y_true: jax.Array) -> jax.Array:
    """Keras: labels all in {0, 1} (over the whole array) become {-1, 1}; others stay."""
    is_binary = jnp.all((y_true == 0) | (y_true == 1))
    return jnp.where(is_binary, 2.0 * y_true - 1.0, y_true)


def hinge(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean(max(1 - y_true * y_pred, 0), axis=-1)`` (``optax.losses.hinge_loss``).

    Labels are -1/1; 0/1 labels are converted as Keras does.
    """
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(optax.losses.hinge_loss(y_pred, _hinge_labels(y_true)), axis=-1)


def squared_hinge(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean(max(1 - y_true * y_pred, 0) ** 2, axis=-1)``; labels as `hinge`."""
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(jnp.square(optax.losses.hinge_loss(y_pred, _hinge_labels(y_true))), axis=-1)


def categorical_hinge(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``max(max((1 - y_true) * y_pred) - sum(y_true * y_pred) + 1, 0)`` over the last axis."""
    y_true, y_pred = _floats(y_true, y_pred)
    pos = jnp.sum(y_true * y_pred, axis=-1)
    neg = jnp.max((1.0 - y_true) * y_pred, axis=-1)
    return jnp.maximum(neg - pos + 1.0, 0.0)


def kl_divergence(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``sum(t * log(t / p), axis=-1)`` with ``t, p`` clipped to ``[EPSILON, 1]``, as Keras.

    Computed as ``optax.losses.kl_divergence(log p, t)``.
    """
    y_true, y_pred = _floats(y_true, y_pred)
    targets = jnp.clip(y_true, EPSILON, 1.0)
    return optax.losses.kl_divergence(jnp.log(jnp.clip(y_pred, EPSILON, 1.0)), targets)


def poisson(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``mean(y_pred - y_true * log(y_pred + EPSILON), axis=-1)``, as Keras."""
    y_true, y_pred = _floats(y_true, y_pred)
    return jnp.mean(y_pred - y_true * jnp.log(y_pred + EPSILON), axis=-1)


class MeanSquaredError(LossFunctionWrapper):
    """`mean_squared_error` as a loss object (``keras.losses.MeanSquaredError``).

    Example:
        >>> MeanSquaredError().per_example(jnp.array([1.0, 2.0]), jnp.array([[0.0], [2.0]]))
        Array([1., 0.], dtype=float32)
    """

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "mean_squared_error"):
        super().__init__(mean_squared_error, reduction=reduction, name=name)


class MeanAbsoluteError(LossFunctionWrapper):
    """`mean_absolute_error` as a loss object (``keras.losses.MeanAbsoluteError``).

    Example:
        >>> MeanAbsoluteError().per_example(jnp.array([1.0, 2.0]), jnp.array([[0.0], [4.0]]))
        Array([1., 2.], dtype=float32)
    """

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "mean_absolute_error"):
        super().__init__(mean_absolute_error, reduction=reduction, name=name)


class MeanAbsolutePercentageError(LossFunctionWrapper):
    """`mean_absolute_percentage_error` as a loss object (in percent)."""

    def __init__(self, reduction: str | None = _DEFAULT,
                 name: str = "mean_absolute_percentage_error"):
        super().__init__(mean_absolute_percentage_error, reduction=reduction, name=name)


class MeanSquaredLogarithmicError(LossFunctionWrapper):
    """`mean_squared_logarithmic_error` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT,
                 name: str = "mean_squared_logarithmic_error"):
        super().__init__(mean_squared_logarithmic_error, reduction=reduction, name=name)


class CosineSimilarity(LossFunctionWrapper):
    """`cosine_similarity` (negated) as a loss object; ``axis`` is the vector axis."""

    def __init__(self, axis: int = -1, reduction: str | None = _DEFAULT,
                 name: str = "cosine_similarity"):
        super().__init__(cosine_similarity, reduction=reduction, name=name, axis=axis)


class Huber(LossFunctionWrapper):
    """`huber` as a loss object; ``delta`` is where it turns from quadratic to linear."""

    def __init__(self, delta: float = 1.0, reduction: str | None = _DEFAULT,
                 name: str = "huber_loss"):
        super().__init__(huber, reduction=reduction, name=name, delta=delta)


class LogCosh(LossFunctionWrapper):
    """`log_cosh` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "log_cosh"):
        super().__init__(log_cosh, reduction=reduction, name=name)


class Hinge(LossFunctionWrapper):
    """`hinge` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "hinge"):
        super().__init__(hinge, reduction=reduction, name=name)


class SquaredHinge(LossFunctionWrapper):
    """`squared_hinge` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "squared_hinge"):
        super().__init__(squared_hinge, reduction=reduction, name=name)


class CategoricalHinge(LossFunctionWrapper):
    """`categorical_hinge` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "categorical_hinge"):
        super().__init__(categorical_hinge, reduction=reduction, name=name)


class KLDivergence(LossFunctionWrapper):
    """`kl_divergence` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "kl_divergence"):
        super().__init__(kl_divergence, reduction=reduction, name=name)


class Poisson(LossFunctionWrapper):
    """`poisson` as a loss object."""

    def __init__(self, reduction: str | None = _DEFAULT, name: str = "poisson"):
        super().__init__(poisson, reduction=reduction, name=name)
