"""Keras-named losses on top of ``optax.losses``.

This module owns the loss functions that ``Model.compile(loss=...)`` accepts and
the ``get`` lookup from Keras names. A loss maps ``(y_true, y_pred)`` of one
per-replica batch to a per-example loss of shape ``[batch]``; it never reduces
over the batch: sample weighting, masking of padding rows and averaging over the
global batch belong to the trainer.

Probability-expecting losses (the crossentropies with ``from_logits=False``)
follow Keras 3: probabilities are clipped to ``[EPSILON, 1 - EPSILON]`` (categorical
ones renormalized to sum to 1 first) before their log is taken. They can also flag examples whose
outputs are clearly not probabilities (``Loss.not_probabilities``), so the trainer
can warn once with ``NOT_PROBABILITIES_WARNING``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp
import optax

EPSILON = 1e-7
"""Keras backend epsilon (``keras.config.epsilon()``) used to clip probabilities."""

RANGE_TOLERANCE = 1e-3
"""Outputs below ``-RANGE_TOLERANCE`` or above ``1 + RANGE_TOLERANCE`` are not probabilities."""

SUM_TOLERANCE = 1e-2
"""Categorical outputs whose rows sum to 1 +/- more than this are not probabilities."""

NOT_PROBABILITIES_WARNING = (
    "The loss {name} was configured with from_logits=False, so it expects "
    "probabilities, but it received model outputs that are not probabilities "
    "(values outside [0, 1], or for categorical losses rows that do not sum to 1). "
    "If your model outputs logits, pass from_logits=True to the loss, e.g. "
    "loss=mf.losses.SparseCategoricalCrossentropy(from_logits=True); otherwise end "
    "the model with a softmax (or sigmoid for binary crossentropy)."
)
"""Warning the trainer emits once when ``not_probabilities`` flagged examples."""

LossFn = Callable[[jax.Array, jax.Array], jax.Array]


def _mean_non_batch(values: jax.Array) -> jax.Array:
    """Averages ``[batch, ...]`` values over every non-batch axis to ``[batch]``."""
    return jnp.mean(values, axis=tuple(range(1, values.ndim)))


def squeeze_or_expand_to_same_rank(
    y_true: jax.Array, y_pred: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Matches ranks as Keras' function of that name, keeping a feature axis.

    ``[batch]`` targets against ``[batch, 1]`` outputs become ``[batch, 1]``; two
    ``[batch]`` arrays become ``[batch, 1]`` so a last-axis reduction stays per example.
    """
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        y_true = jnp.squeeze(y_true, -1)
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        y_true = jnp.expand_dims(y_true, -1)
    if y_pred.ndim == 1:
        y_true, y_pred = y_true[:, None], y_pred[:, None]
    return y_true, y_pred


def _outside_unit_interval(y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` bool: values clearly outside ``[0, 1]``."""
    return (y_pred < -RANGE_TOLERANCE) | (y_pred > 1.0 + RANGE_TOLERANCE)


def _any_non_batch(flags: jax.Array) -> jax.Array:
    """Reduces ``[batch, ...]`` bool flags to ``[batch]`` with ``any``."""
    return jnp.any(flags, axis=tuple(range(1, flags.ndim)))


def _categorical_crossentropy_of_probs(labels: jax.Array, y_pred: jax.Array) -> jax.Array:
    """Keras 3's formula ``-sum(labels * log(clip(p / sum(p))))`` over the last axis.

    Args:
        labels: float ``[..., num_classes]``, one-hot or soft.
        y_pred: float ``[..., num_classes]`` probabilities.

    Returns:
        ``[...]``: the crossentropy per row.

    Written out rather than handing ``log(p)`` to an optax loss as logits: the optax
    losses apply a log-softmax, which would add ``log(sum(clipped p))`` and a second set of
    reductions to every step for a value Keras does not compute.
    """
    probs = y_pred / jnp.sum(y_pred, axis=-1, keepdims=True)
    return -jnp.sum(labels * jnp.log(jnp.clip(probs, EPSILON, 1.0 - EPSILON)), axis=-1)


def _not_categorical_probabilities(y_pred: jax.Array) -> jax.Array:
    """``[batch]`` bool for ``[batch, ..., num_classes]`` outputs that are no distribution."""
    y_pred = jnp.asarray(y_pred, jnp.float32)
    bad_sum = jnp.abs(jnp.sum(y_pred, axis=-1) - 1.0) > SUM_TOLERANCE
    bad_value = jnp.any(_outside_unit_interval(y_pred), axis=-1)
    return _any_non_batch(bad_sum | bad_value)


class Loss:
    """Base class of mirrorfit losses; any ``fn(y_true, y_pred) -> [batch]`` works too.

    Subclasses implement ``__call__``. Losses that expect probabilities set
    ``expects_probabilities`` and override ``not_probabilities``.

    Attributes:
        name: Keras' snake_case name of the loss, e.g. ``"mean_squared_error"``.
        expects_probabilities: whether ``y_pred`` must be probabilities.
    """

    name: ClassVar[str]
    expects_probabilities: bool = False

    def __call__(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Computes the per-example loss.

        Args:
            y_true: targets, ``[batch, ...]``.
            y_pred: model outputs, ``[batch, ...]``.

        Returns:
            float32 ``[batch]``: loss per example, averaged over non-batch axes.
        """
        raise NotImplementedError

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """Flags examples whose outputs are clearly not probabilities.

        Args:
            y_pred: model outputs, ``[batch, ...]``.

        Returns:
            bool ``[batch]`` (True = not probabilities), or None when this loss
            does not expect probabilities.
        """
        del y_pred
        return None


@dataclasses.dataclass(frozen=True)
class SparseCategoricalCrossentropy(Loss):
    """Crossentropy between integer labels and class scores, as Keras.

    With ``from_logits=True`` uses ``optax.losses.softmax_cross_entropy_with_integer_labels``.
    With ``from_logits=False`` it is Keras' formula: the outputs are renormalized to sum
    to 1, clipped to ``[EPSILON, 1 - EPSILON]``, and the loss is ``-log`` of the label's
    entry (0 for a label outside ``[0, num_classes)``, as Keras' one-hot).

    Args:
        from_logits: whether ``y_pred`` are logits rather than probabilities.

    Example:
        >>> loss = SparseCategoricalCrossentropy(from_logits=True)
        >>> loss(jnp.array([0, 1]), jnp.zeros((2, 4))).shape
        (2,)
    """

    from_logits: bool = False
    name: ClassVar[str] = "sparse_categorical_crossentropy"

    @property
    def expects_probabilities(self) -> bool:
        return not self.from_logits

    def __call__(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Per-example loss ``[batch]``.

        Args:
            y_true: int or float labels, ``[batch, ...]`` or ``[batch, ..., 1]``.
            y_pred: ``[batch, ..., num_classes]`` probabilities or logits.
        """
        y_pred = jnp.asarray(y_pred, jnp.float32)
        y_true = jnp.asarray(y_true)
        if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
            y_true = jnp.squeeze(y_true, -1)
        labels = y_true.astype(jnp.int32)
        if self.from_logits:
            per_row = optax.losses.softmax_cross_entropy_with_integer_labels(y_pred, labels)
        else:
            one_hot = jax.nn.one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype)
            per_row = _categorical_crossentropy_of_probs(one_hot, y_pred)
        return _mean_non_batch(per_row)

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """bool ``[batch]``: values outside [0, 1] or rows not summing to 1; None if from_logits."""
        return None if self.from_logits else _not_categorical_probabilities(y_pred)


@dataclasses.dataclass(frozen=True)
class CategoricalCrossentropy(Loss):
    """Crossentropy between one-hot (or soft) labels and class scores, as Keras.

    Uses ``optax.losses.softmax_cross_entropy`` and ``optax.smooth_labels``
    (Keras' ``y * (1 - s) + s / num_classes``). Probabilities are handled as in
    ``SparseCategoricalCrossentropy``.

    Args:
        from_logits: whether ``y_pred`` are logits rather than probabilities.
        label_smoothing: ``s`` in ``[0, 1]``; 0 disables smoothing.

    Example:
        >>> loss = CategoricalCrossentropy(label_smoothing=0.1)
        >>> loss(jnp.eye(3), jnp.full((3, 3), 1 / 3)).shape
        (3,)
    """

    from_logits: bool = False
    label_smoothing: float = 0.0
    name: ClassVar[str] = "categorical_crossentropy"

    @property
    def expects_probabilities(self) -> bool:
        return not self.from_logits

    def __call__(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Per-example loss ``[batch]``.

        Args:
            y_true: one-hot or soft labels, ``[batch, ..., num_classes]``.
            y_pred: ``[batch, ..., num_classes]`` probabilities or logits.
        """
        y_pred = jnp.asarray(y_pred, jnp.float32)
        labels = jnp.asarray(y_true, jnp.float32)
        if self.label_smoothing:
            labels = optax.smooth_labels(labels, self.label_smoothing)
        if self.from_logits:
            return _mean_non_batch(optax.losses.softmax_cross_entropy(y_pred, labels))
        return _mean_non_batch(_categorical_crossentropy_of_probs(labels, y_pred))

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """bool ``[batch]``: values outside [0, 1] or rows not summing to 1; None if from_logits."""
        return None if self.from_logits else _not_categorical_probabilities(y_pred)


@dataclasses.dataclass(frozen=True)
class BinaryCrossentropy(Loss):
    """Crossentropy of independent binary labels, averaged over the last axis as Keras.

    Uses ``optax.losses.sigmoid_binary_cross_entropy``. With ``from_logits=False``
    the probabilities ``p`` are clipped to ``[EPSILON, 1 - EPSILON]`` and
    ``log(p) - log(1 - p)`` is used as logits, which reproduces Keras'
    ``-(y log p + (1 - y) log(1 - p))``. Label smoothing is Keras'
    ``y * (1 - s) + 0.5 * s``.

    Args:
        from_logits: whether ``y_pred`` are logits rather than probabilities.
        label_smoothing: ``s`` in ``[0, 1]``; 0 disables smoothing.

    Example:
        >>> loss = BinaryCrossentropy()
        >>> loss(jnp.array([0.0, 1.0]), jnp.array([[0.2], [0.9]])).shape
        (2,)
    """

    from_logits: bool = False
    label_smoothing: float = 0.0
    name: ClassVar[str] = "binary_crossentropy"

    @property
    def expects_probabilities(self) -> bool:
        return not self.from_logits

    def __call__(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Per-example loss ``[batch]``.

        Args:
            y_true: ``[batch, ...]``; ``[batch]`` against ``[batch, 1]`` outputs is fine.
            y_pred: ``[batch, ...]``.
        """
        labels, y_pred = squeeze_or_expand_to_same_rank(
            jnp.asarray(y_true, jnp.float32), jnp.asarray(y_pred, jnp.float32)
        )
        if self.label_smoothing:
            labels = labels * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        if self.from_logits:
            logits = y_pred
        else:
            probs = jnp.clip(y_pred, EPSILON, 1.0 - EPSILON)
            logits = jnp.log(probs) - jnp.log1p(-probs)
        return _mean_non_batch(optax.losses.sigmoid_binary_cross_entropy(logits, labels))

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """bool ``[batch]``: any value outside [0, 1]; None if from_logits."""
        if self.from_logits:
            return None
        y_pred = jnp.asarray(y_pred, jnp.float32)
        return _any_non_batch(_outside_unit_interval(y_pred))


@dataclasses.dataclass(frozen=True)
class MeanSquaredError(Loss):
    """``mean((y_true - y_pred) ** 2)`` over the last axis, as Keras.

    Uses ``optax.losses.squared_error``.

    Example:
        >>> MeanSquaredError()(jnp.array([1.0, 2.0]), jnp.array([[0.0], [2.0]]))
        Array([1., 0.], dtype=float32)
    """

    name: ClassVar[str] = "mean_squared_error"

    def __call__(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Per-example loss ``[batch]``.

        Args:
            y_true: ``[batch, ...]``; ``[batch]`` against ``[batch, 1]`` outputs is fine.
            y_pred: ``[batch, ...]``.
        """
        y_true, y_pred = squeeze_or_expand_to_same_rank(
            jnp.asarray(y_true, jnp.float32), jnp.asarray(y_pred, jnp.float32)
        )
        return _mean_non_batch(optax.losses.squared_error(y_pred, y_true))


@dataclasses.dataclass(frozen=True)
class MeanAbsoluteError(Loss):
    """``mean(|y_true - y_pred|)`` over the last axis, as Keras.

    Example:
        >>> MeanAbsoluteError()(jnp.array([1.0, 2.0]), jnp.array([[0.0], [4.0]]))
        Array([1., 2.], dtype=float32)
    """

    name: ClassVar[str] = "mean_absolute_error"

    def __call__(self, y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
        """Per-example loss ``[batch]``.

        Args:
            y_true: ``[batch, ...]``; ``[batch]`` against ``[batch, 1]`` outputs is fine.
            y_pred: ``[batch, ...]``.
        """
        y_true, y_pred = squeeze_or_expand_to_same_rank(
            jnp.asarray(y_true, jnp.float32), jnp.asarray(y_pred, jnp.float32)
        )
        return _mean_non_batch(jnp.abs(y_pred - y_true))


_BY_NAME: dict[str, type[Loss]] = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
}


def get(identifier: str | LossFn | type[Loss]) -> LossFn:
    """Returns the loss callable for ``Model.compile(loss=...)``.

    Args:
        identifier: a Keras loss name (case-insensitive, e.g.
            ``"sparse_categorical_crossentropy"``, ``"mse"``), a ``Loss`` subclass
            (instantiated with its defaults) or any callable
            ``fn(y_true, y_pred) -> [batch]`` (returned as is).

    Returns:
        A callable ``loss(y_true, y_pred) -> float32 [batch]``.

    Raises:
        ValueError: for an unknown name.
        TypeError: for anything that is neither a string nor a callable.

    Example:
        >>> get("mse")
        MeanSquaredError()
    """
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(
                f"Unknown loss name. Expected one of {sorted(_BY_NAME)} or a callable "
                f"fn(y_true, y_pred) -> [batch]. Received: loss={identifier!r}"
            )
        return cls()
    if isinstance(identifier, type) and issubclass(identifier, Loss):
        return identifier()
    if callable(identifier):
        return identifier
    raise TypeError(
        "loss must be a loss name (e.g. 'sparse_categorical_crossentropy') or a "
        f"callable fn(y_true, y_pred) -> [batch]. Received: loss={identifier!r} "
        f"of type {type(identifier).__name__}"
    )

