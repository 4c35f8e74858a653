"""Keras' crossentropy losses, plain and focal, as functions and `Loss` classes.

Formulas and defaults follow ``keras/src/losses/losses.py``. With ``from_logits=True`` they use
``optax.losses``, but for integer labels `softmax_crossentropy_with_integer_labels`, optax's
formula with a gradient that scatters nothing. With probabilities they compute Keras' formula directly: probabilities are
clipped to ``[EPSILON, 1 - EPSILON]`` (categorical ones renormalized to sum to 1 first) before
their log is taken. Handing ``log(p)`` to an optax loss as logits would add a log-softmax
Keras does not compute. Outputs that are clearly not probabilities can be flagged per example
(``not_probabilities``) so that the trainer warns once with ``NOT_PROBABILITIES_WARNING``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from mirrorfit._src.losses.loss import EPSILON, LossFunctionWrapper, squeeze_or_expand_to_same_rank

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


def _any_non_batch(flags: jax.Array) -> jax.Array:
    """Reduces ``[batch, ...]`` bool flags to ``[batch]`` with ``any``."""
    return jnp.any(flags, axis=tuple(range(1, flags.ndim)))


def _outside_unit_interval(y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` bool: values clearly outside ``[0, 1]``."""
    return (y_pred < -RANGE_TOLERANCE) | (y_pred > 1.0 + RANGE_TOLERANCE)


def not_binary_probabilities(y_pred: jax.Array) -> jax.Array:
    """bool ``[batch]``: some value of the example lies outside ``[0, 1]``."""
    return _any_non_batch(_outside_unit_interval(jnp.asarray(y_pred, jnp.float32)))


def not_categorical_probabilities(y_pred: jax.Array, axis: int = -1) -> jax.Array:
    """bool ``[batch]`` for ``[batch, ..., num_classes]`` outputs that are no distribution."""
    y_pred = jnp.asarray(y_pred, jnp.float32)
    bad_sum = jnp.abs(jnp.sum(y_pred, axis=axis) - 1.0) > SUM_TOLERANCE
    bad_value = jnp.any(_outside_unit_interval(y_pred), axis=axis)
    return _any_non_batch(bad_sum | bad_value)


def _normalized_clipped(y_pred: jax.Array, axis: int) -> jax.Array:
    """Keras: ``clip(p / sum(p, axis), EPSILON, 1 - EPSILON)``."""
    probs = y_pred / jnp.sum(y_pred, axis=axis, keepdims=True)
    return jnp.clip(probs, EPSILON, 1.0 - EPSILON)


def _smooth(labels: jax.Array, label_smoothing: float, axis: int) -> jax.Array:
    """Keras' categorical smoothing ``y * (1 - s) + s / num_classes`` (``optax.smooth_labels``)."""
    return optax.smooth_labels(labels, label_smoothing, axis=axis) if label_smoothing else labels


def _binary_crossentropy_elementwise(labels: jax.Array, y_pred: jax.Array,
                                     from_logits: bool) -> jax.Array:
    """Keras' elementwise ``-(y log p + (1 - y) log(1 - p))``, ``[batch, ...]``."""
    if from_logits:
        return optax.losses.sigmoid_binary_cross_entropy(y_pred, labels)
    probs = jnp.clip(y_pred, EPSILON, 1.0 - EPSILON)
    return -(labels * jnp.log(probs) + (1.0 - labels) * jnp.log1p(-probs))


def binary_crossentropy(y_true: jax.Array, y_pred: jax.Array, from_logits: bool = False,
                        label_smoothing: float = 0.0, axis: int = -1) -> jax.Array:
    """Keras' ``binary_crossentropy``: the mean over ``axis`` of the elementwise crossentropy.

    Args:
        y_true: ``[batch, ...]`` binary (or soft) labels.
        y_pred: ``[batch, ...]`` probabilities, or logits with ``from_logits=True``.
        from_logits: whether ``y_pred`` are logits (``optax.losses.sigmoid_binary_cross_entropy``).
        label_smoothing: ``s``; labels become ``y * (1 - s) + 0.5 * s``.
        axis: the axis averaged over.

    Returns:
        float32 ``[batch, ...]`` with ``axis`` reduced.
    """
    labels, y_pred = squeeze_or_expand_to_same_rank(jnp.asarray(y_true, jnp.float32),
                                                    jnp.asarray(y_pred, jnp.float32))
    if label_smoothing:
        labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
    return jnp.mean(_binary_crossentropy_elementwise(labels, y_pred, from_logits), axis=axis)


def binary_focal_crossentropy(y_true: jax.Array, y_pred: jax.Array,
                              apply_class_balancing: bool = False, alpha: float = 0.25,
                              gamma: float = 2.0, from_logits: bool = False,
                              label_smoothing: float = 0.0, axis: int = -1) -> jax.Array:
    """Keras' ``binary_focal_crossentropy``: ``mean((1 - p_t) ** gamma * bce)`` over ``axis``.

    ``p_t = y p + (1 - y)(1 - p)``; with ``apply_class_balancing`` each term is also
    weighted by ``alpha`` (positives) or ``1 - alpha`` (negatives). With ``from_logits``
    the sigmoid is applied first, as Keras.

    Returns:
        float32 ``[batch, ...]`` with ``axis`` reduced.
    """
    labels, y_pred = squeeze_or_expand_to_same_rank(jnp.asarray(y_true, jnp.float32),
                                                    jnp.asarray(y_pred, jnp.float32))
    if label_smoothing:
        labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        y_pred = jax.nn.sigmoid(y_pred)
    bce = _binary_crossentropy_elementwise(labels, y_pred, from_logits=False)
    p_t = labels * y_pred + (1.0 - labels) * (1.0 - y_pred)
    focal = (1.0 - p_t) ** gamma * bce
    if apply_class_balancing:
        focal = (labels * alpha + (1.0 - labels) * (1.0 - alpha)) * focal
    return jnp.mean(focal, axis=axis)


def categorical_crossentropy(y_true: jax.Array, y_pred: jax.Array, from_logits: bool = False,
                             label_smoothing: float = 0.0, axis: int = -1) -> jax.Array:
    """Keras' ``categorical_crossentropy`` over the class axis ``axis``.

    Args:
        y_true: ``[batch, ..., num_classes]`` one-hot or soft labels.
        y_pred: the same shape; probabilities, or logits with ``from_logits=True``
            (``optax.losses.softmax_cross_entropy``).
        label_smoothing: ``s``; labels become ``y * (1 - s) + s / num_classes``.
        axis: the class axis.

    Returns:
        float32 ``[batch, ...]``: the class axis reduced.
    """
    y_pred = jnp.asarray(y_pred, jnp.float32)
    labels = _smooth(jnp.asarray(y_true, jnp.float32), label_smoothing, axis)
    if from_logits:
        return optax.losses.softmax_cross_entropy(y_pred, labels, axis=axis)
    return -jnp.sum(labels * jnp.log(_normalized_clipped(y_pred, axis)), axis=axis)


def categorical_focal_crossentropy(y_true: jax.Array, y_pred: jax.Array, alpha: float = 0.25,
                                   gamma: float = 2.0, from_logits: bool = False,
                                   label_smoothing: float = 0.0, axis: int = -1) -> jax.Array:
    """Keras' ``categorical_focal_crossentropy``: ``sum(alpha (1 - p) ** gamma * -y log p)``.

    ``p`` is the softmax (``from_logits``) or the outputs, renormalized and clipped.

    Returns:
        float32 ``[batch, ...]``: the class axis reduced.
    """
    y_pred = jnp.asarray(y_pred, jnp.float32)
    labels = _smooth(jnp.asarray(y_true, jnp.float32), label_smoothing, axis)
    if from_logits:
        y_pred = jax.nn.softmax(y_pred, axis=axis)
    probs = _normalized_clipped(y_pred, axis)
    return jnp.sum(alpha * (1.0 - probs) ** gamma * -labels * jnp.log(probs), axis=axis)


@jax.custom_vjp
def softmax_crossentropy_with_integer_labels(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """``logsumexp(logits) - logits[label]``, as ``optax.losses.
    softmax_cross_entropy_with_integer_labels``, with a gradient that scatters nothing.

    The forward pass gathers each label's logit; the backward pass writes ``g * (softmax -
    one_hot)`` elementwise, the one-hot an iota compared with the labels. Autodiff of the gather
    would scatter-add into a zeroed logits-sized buffer (``[batch, ..., num_classes]``, float32
    for an LM's vocabulary), and Keras' ``one_hot * log_softmax`` materializes a one-hot in the
    forward pass. Values and gradients are optax's bit for bit (the gradient computed as its
    autodiff does: ``exp(logits - max) * (g / sum)``, less ``g`` at the label). The backward
    pass keeps ``logits`` (and ``max`` and ``sum``, ``[batch, ...]``) where autodiff keeps
    ``exp(logits - max)``: the same size, but a cheap function of the model's outputs (their
    float32 cast, under a mixed policy), which XLA may fuse into the backward pass rather
    than store. A negative label counts from the end, as in ``jnp.take_along_axis``; a label
    past the last class gives NaN, as optax.

    Args:
        logits: float ``[batch, ..., num_classes]``.
        labels: int ``[batch, ...]``.

    Returns:
        ``[batch, ...]``, the dtype of ``logits``.
    """
    return _crossentropy_forward(logits, labels)[0]


def _crossentropy_forward(logits: jax.Array, labels: jax.Array):
    """The loss and the residuals ``(logits, max, sum of exp, labels)`` of its gradient;
    the log-sum-exp as ``jax.nn.logsumexp`` computes it."""
    top = jnp.max(logits, axis=-1, keepdims=True)
    top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top)))
    total = jnp.sum(jnp.exp(logits - top), axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    wrapped = jnp.where(labels < 0, labels + logits.shape[-1], labels)  # the index gathered
    return (jnp.log(total) + top[..., 0]) - picked, (logits, top, total, wrapped)


def _crossentropy_backward(residuals, g: jax.Array):
    logits, top, total, labels = residuals
    classes = jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
    softmax_part = jnp.exp(logits - top) * (g / total)[..., None]
    return softmax_part - jnp.where(classes == labels[..., None], g[..., None], 0), None


softmax_crossentropy_with_integer_labels.defvjp(_crossentropy_forward, _crossentropy_backward)


def sparse_categorical_crossentropy(y_true: jax.Array, y_pred: jax.Array,
                                    from_logits: bool = False, axis: int = -1) -> jax.Array:
    """Keras' ``sparse_categorical_crossentropy``: integer labels against class scores.

    With probabilities, the label's entry of the renormalized, clipped outputs is used (0 for
    a label outside ``[0, num_classes)``, as Keras' one-hot). With logits it is
    `softmax_crossentropy_with_integer_labels` (optax's values; no scatter in its gradient).

    Args:
        y_true: int or float labels, ``[batch, ...]`` or ``[batch, ..., 1]``.
        y_pred: ``[batch, ..., num_classes]`` (classes on ``axis``).

    Returns:
        float32 ``[batch, ...]``.
    """
    y_pred = jnp.moveaxis(jnp.asarray(y_pred, jnp.float32), axis, -1)
    y_true = jnp.asarray(y_true)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = jnp.squeeze(y_true, -1)
    labels = y_true.astype(jnp.int32)
    if from_logits:
        return softmax_crossentropy_with_integer_labels(y_pred, labels)
    one_hot = jax.nn.one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype)
    return -jnp.sum(one_hot * jnp.log(_normalized_clipped(y_pred, -1)), axis=-1)


class _ProbabilityLoss(LossFunctionWrapper):
    """Crossentropies: flag non-probability outputs unless ``from_logits``."""

    categorical = True

    @property
    def expects_probabilities(self) -> bool:
        """Whether ``y_pred`` must be probabilities (``from_logits=False``)."""
        return not self.fn_kwargs["from_logits"]

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """bool ``[batch]``: outputs that are no probabilities; None if ``from_logits``."""
        if self.fn_kwargs["from_logits"]:
            return None
        if self.categorical:
            return not_categorical_probabilities(y_pred, self.fn_kwargs.get("axis", -1))
        return not_binary_probabilities(y_pred)


class BinaryCrossentropy(_ProbabilityLoss):
    """Crossentropy of independent binary labels, averaged over ``axis``, as Keras.

    Args:
        from_logits: whether ``y_pred`` are logits rather than probabilities.
        label_smoothing: ``s`` in ``[0, 1]``; labels become ``y * (1 - s) + 0.5 * s``.
        axis: the axis averaged over.
        reduction: see `Loss`.
        name: the loss's name.

    Example:
        >>> BinaryCrossentropy().per_example(jnp.array([0.0, 1.0]), jnp.array([[0.2], [0.9]])).shape
        (2,)
    """

    categorical = False

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str | None = "sum_over_batch_size",
                 name: str = "binary_crossentropy") -> None:
        super().__init__(binary_crossentropy, reduction=reduction, name=name,
                         from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)


class BinaryFocalCrossentropy(_ProbabilityLoss):
    """Focal binary crossentropy (Lin et al., 2018), as ``keras.losses.BinaryFocalCrossentropy``.

    Args:
        apply_class_balancing: weight positives by ``alpha`` and negatives by ``1 - alpha``.
        alpha: the balancing weight.
        gamma: the focusing exponent; 0 gives the binary crossentropy.
        from_logits, label_smoothing, axis, reduction, name: as `BinaryCrossentropy`.
    """

    categorical = False

    def __init__(self, apply_class_balancing: bool = False, alpha: float = 0.25,
                 gamma: float = 2.0, from_logits: bool = False, label_smoothing: float = 0.0,
                 axis: int = -1, reduction: str | None = "sum_over_batch_size",
                 name: str = "binary_focal_crossentropy") -> None:
        super().__init__(binary_focal_crossentropy, reduction=reduction, name=name,
                         apply_class_balancing=apply_class_balancing, alpha=alpha, gamma=gamma,
                         from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)


class CategoricalCrossentropy(_ProbabilityLoss):
    """Crossentropy between one-hot (or soft) labels and class scores, as Keras.

    Args:
        from_logits: whether ``y_pred`` are logits rather than probabilities.
        label_smoothing: ``s`` in ``[0, 1]``; labels become ``y * (1 - s) + s / num_classes``.
        axis: the class axis.
        reduction: see `Loss`.
        name: the loss's name.

    Example:
        >>> CategoricalCrossentropy(label_smoothing=0.1).per_example(
        ...     jnp.eye(3), jnp.full((3, 3), 1 / 3)).shape
        (3,)
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str | None = "sum_over_batch_size",
                 name: str = "categorical_crossentropy") -> None:
        super().__init__(categorical_crossentropy, reduction=reduction, name=name,
                         from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)


class CategoricalFocalCrossentropy(_ProbabilityLoss):
    """Focal categorical crossentropy, as ``keras.losses.CategoricalFocalCrossentropy``.

    Args:
        alpha: weight of every term.
        gamma: the focusing exponent; 0 gives ``alpha`` times the crossentropy.
        from_logits, label_smoothing, axis, reduction, name: as `CategoricalCrossentropy`.
    """

    def __init__(self, alpha: float = 0.25, gamma: float = 2.0, from_logits: bool = False,
                 label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str | None = "sum_over_batch_size",
                 name: str = "categorical_focal_crossentropy") -> None:
        super().__init__(categorical_focal_crossentropy, reduction=reduction, name=name,
                         alpha=alpha, gamma=gamma, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class SparseCategoricalCrossentropy(_ProbabilityLoss):
    """Crossentropy between integer labels and class scores, as Keras.

    Args:
        from_logits: whether ``y_pred`` are logits rather than probabilities.
        reduction: see `Loss`.
        axis: the class axis of ``y_pred``.
        name: the loss's name.

    Example:
        >>> SparseCategoricalCrossentropy(from_logits=True).per_example(
        ...     jnp.array([0, 1]), jnp.zeros((2, 4))).shape
        (2,)
    """

    def __init__(self, from_logits: bool = False, reduction: str | None = "sum_over_batch_size",
                 axis: int = -1, name: str = "sparse_categorical_crossentropy") -> None:
        super().__init__(sparse_categorical_crossentropy, reduction=reduction, name=name,
                         from_logits=from_logits, axis=axis)


def _inferred_crossentropy(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """Binary, sparse or categorical crossentropy of probabilities, chosen from shapes."""
    y_true, y_pred = jnp.asarray(y_true), jnp.asarray(y_pred)
    if y_pred.shape[-1] == 1:
        return binary_crossentropy(y_true, y_pred)
    if y_true.ndim < y_pred.ndim or y_true.shape[-1] == 1:
        return sparse_categorical_crossentropy(y_true, y_pred)
    return categorical_crossentropy(y_true, y_pred)


class InferredCrossentropy(LossFunctionWrapper):
    """The loss behind the names ``"crossentropy"`` and ``"ce"``, as Keras' ``compile``.

    At trace time: outputs ``[batch, ..., 1]`` give `binary_crossentropy`; targets of lower
    rank than the outputs, or ending in a size-1 axis, give `sparse_categorical_crossentropy`;
    otherwise `categorical_crossentropy`. ``y_pred`` must be probabilities.

    Args:
        reduction: see `Loss`.
        name: the loss's name.
    """

    expects_probabilities = True

    def __init__(self, reduction: str | None = "sum_over_batch_size",
                 name: str = "crossentropy") -> None:
        super().__init__(_inferred_crossentropy, reduction=reduction, name=name)

    def not_probabilities(self, y_pred: jax.Array) -> jax.Array | None:
        """bool ``[batch]``: as the binary or categorical crossentropy chosen for ``y_pred``."""
        if jnp.shape(y_pred)[-1] == 1:
            return not_binary_probabilities(y_pred)
        return not_categorical_probabilities(y_pred)
