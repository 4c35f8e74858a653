"""Keras' accuracy metrics (``keras/src/metrics/accuracy_metrics.py``), as weighted means.

Each is a `MeanMetricWrapper` over a per-example match function, so its statistics are a
weighted count of matches and of examples. ``InferredAccuracy`` is what the names
``"accuracy"`` and ``"acc"`` give: it picks binary, categorical or sparse accuracy from the
shapes, as Keras' ``compile`` does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mirrorfit._src.losses.loss import squeeze_or_expand_to_same_rank
from mirrorfit._src.metrics.reduction_metrics import MeanMetricWrapper


def accuracy(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` float: ``y_true == y_pred`` elementwise (Keras' ``accuracy``)."""
    y_true, y_pred = squeeze_or_expand_to_same_rank(jnp.asarray(y_true), jnp.asarray(y_pred))
    return (y_true.astype(jnp.float32) == y_pred.astype(jnp.float32)).astype(jnp.float32)


def binary_accuracy(y_true: jax.Array, y_pred: jax.Array, threshold: float = 0.5) -> jax.Array:
    """``[batch, ...]`` float: ``(y_pred > threshold) == y_true``, ranks matched as Keras."""
    y_true, y_pred = squeeze_or_expand_to_same_rank(jnp.asarray(y_true), jnp.asarray(y_pred))
    predicted = (y_pred > threshold).astype(jnp.float32)
    return (predicted == y_true.astype(jnp.float32)).astype(jnp.float32)


def categorical_accuracy(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` float: ``argmax(y_true) == argmax(y_pred)`` over the last axis."""
    return (jnp.argmax(y_true, axis=-1) == jnp.argmax(y_pred, axis=-1)).astype(jnp.float32)


def _sparse_labels(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """Integer labels ``[batch, ...]``; a trailing size-1 axis of ``y_true`` is dropped."""
    y_true = jnp.asarray(y_true)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = jnp.squeeze(y_true, -1)
    return y_true.astype(jnp.int32)


def sparse_categorical_accuracy(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` float: ``y_true == argmax(y_pred)``; labels int or float."""
    y_pred = jnp.asarray(y_pred)
    return (_sparse_labels(y_true, y_pred) == jnp.argmax(y_pred, axis=-1)).astype(jnp.float32)


def _in_top_k(labels: jax.Array, y_pred: jax.Array, k: int) -> jax.Array:
    """Keras' ``in_top_k``: fewer than ``k`` scores strictly above the label's (nan: last)."""
    at_label = jnp.take_along_axis(y_pred, labels[..., None], axis=-1)
    at_label = jnp.where(jnp.isnan(at_label), -jnp.inf, at_label)
    return (1 + jnp.sum(y_pred > at_label, axis=-1)) <= k


def top_k_categorical_accuracy(y_true: jax.Array, y_pred: jax.Array, k: int = 5) -> jax.Array:
    """``[batch, ...]`` float: the one-hot label is among the ``k`` highest scores."""
    labels = jnp.argmax(jnp.asarray(y_true), axis=-1).astype(jnp.int32)
    return _in_top_k(labels, jnp.asarray(y_pred, jnp.float32), k).astype(jnp.float32)


def sparse_top_k_categorical_accuracy(y_true: jax.Array, y_pred: jax.Array, k: int = 5,
                                      from_sorted_ids: bool = False) -> jax.Array:
    """``[batch, ...]`` float: the integer label is among the ``k`` highest scores.

    With ``from_sorted_ids``, ``y_pred`` holds class ids sorted by score (``[batch, >= k]``)
    and the label must be among the first ``k``.
    """
    y_pred = jnp.asarray(y_pred)
    if from_sorted_ids:
        labels = jnp.asarray(y_true).reshape(y_pred.shape[:-1]).astype(y_pred.dtype)
        return jnp.any(labels[..., None] == y_pred[..., :k], axis=-1).astype(jnp.float32)
    labels = _sparse_labels(y_true, y_pred)
    return _in_top_k(labels, y_pred.astype(jnp.float32), k).astype(jnp.float32)


def _inferred_accuracy(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """Binary, categorical or sparse accuracy, chosen from static shapes."""
    y_true, y_pred = jnp.asarray(y_true), jnp.asarray(y_pred)
    if y_pred.ndim == 1 or y_pred.shape[-1] == 1:
        return binary_accuracy(y_true, y_pred)
    if y_true.shape == y_pred.shape:
        return categorical_accuracy(y_true, y_pred)
    return sparse_categorical_accuracy(y_true, y_pred)


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels exactly, as ``keras.metrics.Accuracy``.

    Compares values, not argmaxes: for class scores use `CategoricalAccuracy` or
    `SparseCategoricalAccuracy`, or the name ``"accuracy"`` (`InferredAccuracy`).
    """

    def __init__(self, name: str = "accuracy") -> None:
        super().__init__(accuracy, name)


class InferredAccuracy(MeanMetricWrapper):
    """The metric behind the names ``"accuracy"`` and ``"acc"``: its kind from the shapes.

    At trace time: outputs ``[batch]`` or ``[batch, ..., 1]`` give binary accuracy
    (threshold 0.5); else targets of the outputs' shape give categorical accuracy; else
    integer-label (sparse categorical) accuracy, as Keras' ``compile`` picks.

    Args:
        name: key in the logs; ``get`` passes the string the user wrote.
    """

    def __init__(self, name: str = "accuracy") -> None:
        super().__init__(_inferred_accuracy, name)


class BinaryAccuracy(MeanMetricWrapper):
    """Fraction of ``y_pred > threshold`` equal to binary ``y_true``, as Keras.

    Args:
        name: key in the logs.
        threshold: probability (or score) above which a prediction is 1.
    """

    def __init__(self, name: str = "binary_accuracy", threshold: float = 0.5) -> None:
        super().__init__(binary_accuracy, name, threshold=threshold)


class CategoricalAccuracy(MeanMetricWrapper):
    """Fraction of ``argmax(y_pred) == argmax(y_true)`` for one-hot ``y_true``, as Keras."""

    def __init__(self, name: str = "categorical_accuracy") -> None:
        super().__init__(categorical_accuracy, name)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """Fraction of ``argmax(y_pred) == y_true`` for integer labels, as Keras.

    ``y_true`` is ``[batch, ...]`` or ``[batch, ..., 1]``, int or float.
    """

    def __init__(self, name: str = "sparse_categorical_accuracy") -> None:
        super().__init__(sparse_categorical_accuracy, name)


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """Fraction of one-hot labels among the ``k`` highest scores, as Keras.

    Args:
        k: how many top scores count.
        name: key in the logs.
    """

    def __init__(self, k: int = 5, name: str = "top_k_categorical_accuracy") -> None:
        super().__init__(top_k_categorical_accuracy, name, k=k)


class SparseTopKCategoricalAccuracy(MeanMetricWrapper):
    """Fraction of integer labels among the ``k`` highest scores, as Keras.

    Args:
        k: how many top scores count.
        name: key in the logs.
        from_sorted_ids: ``y_pred`` already holds class ids sorted by score.

    Example:
        >>> import numpy as np
        >>> m = SparseTopKCategoricalAccuracy(k=2)
        >>> m.update_state(np.array([2, 2]), np.array([[0.1, 0.5, 0.4], [0.3, 0.6, 0.1]]))
        >>> float(m.result())
        0.5
    """

    def __init__(self, k: int = 5, name: str = "sparse_top_k_categorical_accuracy",
                 from_sorted_ids: bool = False) -> None:
        super().__init__(sparse_top_k_categorical_accuracy, name, k=k,
                         from_sorted_ids=from_sorted_ids)
