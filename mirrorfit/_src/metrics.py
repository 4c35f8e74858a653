"""Keras-named metrics as sufficient statistics that add up across replicas and batches.

This module owns the ``Metric`` interface that ``Model.compile(metrics=...)``
accepts, the built-in metrics and the ``get`` lookup from Keras names. A metric
does not hold state: ``update`` maps one per-replica batch to plain sums (its
sufficient statistics), the trainer all-reduces them over replicas (``psum``) and
adds them over batches, and ``result`` turns the accumulated sums into the value
that is logged. This is what makes metrics exact under MirroredStrategy whatever
the replica count and however the last partial batch is padded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src import losses

MetricFn = Callable[[jax.Array, jax.Array], jax.Array]
Stats = Any  # A pytree of arrays holding sums over examples.


def divide_no_nan(total: Any, count: Any) -> Any:
    """``total / count``, or 0 where ``count == 0``.

    Traced or jax inputs give a jax array; NumPy or Python inputs give NumPy.
    """
    if isinstance(total, jax.Array) or isinstance(count, jax.Array):
        safe = jnp.where(count == 0, 1, count)
        return jnp.where(count == 0, 0.0, total / safe)
    total, count = np.asarray(total), np.asarray(count)
    safe = np.where(count == 0, 1, count)
    return np.where(count == 0, 0.0, total / safe)


class Metric:
    """Base class for metrics; subclass it to write your own.

    A metric is stateless. ``update`` returns SUMS over the rows of one
    per-replica batch (e.g. ``{"total": sum(w * v), "count": sum(w)}``); the
    trainer adds these statistics over replicas and batches, then calls
    ``result`` on the accumulated statistics. Padding rows of a partial global
    batch arrive with ``sample_weight == 0`` and must not contribute.

    Attributes:
        name: key of the metric in the logs and in ``History.history``.

    Example:
        >>> class MeanPrediction(Metric):
        ...     def update(self, y_true, y_pred, sample_weight):
        ...         v = jnp.mean(y_pred.reshape(y_pred.shape[0], -1), axis=1)
        ...         return {"total": jnp.sum(sample_weight * v),
        ...                 "count": jnp.sum(sample_weight)}
        ...     def result(self, stats):
        ...         return divide_no_nan(stats["total"], stats["count"])
        >>> m = MeanPrediction("mean_prediction")
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def update(self, y_true: jax.Array, y_pred: jax.Array, sample_weight: jax.Array) -> Stats:
        """Computes the sufficient statistics of one per-replica batch.

        Must be jax-traceable: it runs inside ``jit``/``shard_map``.

        Args:
            y_true: targets, ``[batch, ...]``.
            y_pred: model outputs, ``[batch, ...]``.
            sample_weight: float32 ``[batch]``; 0.0 on padding rows.

        Returns:
            A pytree of arrays, each a sum over the batch rows.
        """
        raise NotImplementedError

    def result(self, stats: Stats) -> Any:
        """Turns accumulated statistics into the metric value.

        Must work on traced jax arrays and on NumPy arrays, and return 0 rather
        than nan when no example was seen.

        Args:
            stats: the statistics of ``update`` summed over replicas and batches.

        Returns:
            A scalar.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class MeanMetricWrapper(Metric):
    """Weighted mean of a per-example function, as Keras' ``MeanMetricWrapper``.

    The value is ``sum(w * fn(y_true, y_pred)) / sum(w)`` over all examples seen,
    where ``w`` is the sample weight; its statistics are ``{"total", "count"}``.

    Args:
        fn: ``fn(y_true, y_pred) -> [batch]`` per-example values; extra non-batch
            axes (``[batch, ...]``) are averaged per example.
        name: key of the metric in the logs.

    Example:
        >>> def max_error(y_true, y_pred):
        ...     return jnp.max(jnp.abs(y_true - y_pred), axis=-1)
        >>> m = MeanMetricWrapper(max_error, name="max_error")
    """

    def __init__(self, fn: MetricFn, name: str) -> None:
        super().__init__(name)
        self.fn = fn

    def update(
        self, y_true: jax.Array, y_pred: jax.Array, sample_weight: jax.Array
    ) -> dict[str, jax.Array]:
        """Returns ``{"total": sum(w * v), "count": sum(w)}`` for ``v = fn(y_true, y_pred)``."""
        values = jnp.asarray(self.fn(y_true, y_pred), jnp.float32)
        batch = sample_weight.shape[0]
        if values.ndim == 0 or values.shape[0] != batch:
            raise ValueError(
                f"Metric {self.name!r} must return one value per example, shape "
                f"[batch] = [{batch}]; do not reduce over the batch. "
                f"Received: values of shape {values.shape}"
            )
        values = jnp.mean(values, axis=tuple(range(1, values.ndim)))
        weight = jnp.asarray(sample_weight, jnp.float32)
        # where() keeps nan/inf of padding rows (weight 0) out of the sum.
        total = jnp.sum(jnp.where(weight != 0, weight * values, 0.0))
        return {"total": total, "count": jnp.sum(weight)}

    def result(self, stats: dict[str, Any]) -> Any:
        """Returns ``total / count`` (0 when ``count == 0``)."""
        return divide_no_nan(stats["total"], stats["count"])

    def __repr__(self) -> str:
        if type(self) is not MeanMetricWrapper:  # Built-ins: the class names the fn.
            return super().__repr__()
        return f"MeanMetricWrapper(fn={self.fn!r}, name={self.name!r})"


def _binary_matches(y_true: jax.Array, y_pred: jax.Array, threshold: float) -> jax.Array:
    """``[batch, ...]`` float: ``(y_pred > threshold) == y_true``, ranks matched as Keras."""
    y_true, y_pred = losses.squeeze_or_expand_to_same_rank(
        jnp.asarray(y_true), jnp.asarray(y_pred)
    )
    predicted = (y_pred > threshold).astype(jnp.float32)
    return (predicted == y_true.astype(jnp.float32)).astype(jnp.float32)


def _categorical_matches(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` float: ``argmax(y_true) == argmax(y_pred)`` over the last axis."""
    return (jnp.argmax(y_true, axis=-1) == jnp.argmax(y_pred, axis=-1)).astype(jnp.float32)


def _sparse_categorical_matches(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """``[batch, ...]`` float: ``y_true == argmax(y_pred)``; y_true may end in a size-1 axis."""
    y_true = jnp.asarray(y_true)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = jnp.squeeze(y_true, -1)
    predicted = jnp.argmax(y_pred, axis=-1)
    return (y_true.astype(jnp.int32) == predicted).astype(jnp.float32)


class BinaryAccuracy(MeanMetricWrapper):
    """Fraction of ``y_pred > threshold`` equal to binary ``y_true``, as Keras.

    Args:
        name: key in the logs.
        threshold: probability (or score) above which a prediction is 1.
    """

    def __init__(self, name: str = "binary_accuracy", threshold: float = 0.5) -> None:
        super().__init__(lambda t, p: _binary_matches(t, p, threshold), name)
        self.threshold = threshold


class CategoricalAccuracy(MeanMetricWrapper):
    """Fraction of ``argmax(y_pred) == argmax(y_true)`` for one-hot ``y_true``, as Keras."""

    def __init__(self, name: str = "categorical_accuracy") -> None:
        super().__init__(_categorical_matches, name)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """Fraction of ``argmax(y_pred) == y_true`` for integer labels, as Keras.

    ``y_true`` is ``[batch, ...]`` or ``[batch, ..., 1]``, int or float.
    """

    def __init__(self, name: str = "sparse_categorical_accuracy") -> None:
        super().__init__(_sparse_categorical_matches, name)


def _inferred_accuracy_matches(y_true: jax.Array, y_pred: jax.Array) -> jax.Array:
    """Chooses binary, categorical or sparse accuracy from static shapes."""
    y_true, y_pred = jnp.asarray(y_true), jnp.asarray(y_pred)
    if y_pred.ndim == 1 or y_pred.shape[-1] == 1:
        return _binary_matches(y_true, y_pred, 0.5)
    if y_true.shape == y_pred.shape:
        return _categorical_matches(y_true, y_pred)
    return _sparse_categorical_matches(y_true, y_pred)


class Accuracy(MeanMetricWrapper):
    """The metric behind ``metrics=["accuracy"]``: infers its kind from shapes as Keras.

    At trace time: outputs ``[batch]`` or ``[batch, ..., 1]`` give binary accuracy
    (threshold 0.5); else targets of the outputs' shape give categorical accuracy;
    else integer-label (sparse categorical) accuracy.

    Args:
        name: key in the logs; ``get`` passes the string the user wrote.
    """

    def __init__(self, name: str = "accuracy") -> None:
        super().__init__(_inferred_accuracy_matches, name)


class MeanSquaredError(MeanMetricWrapper):
    """Weighted mean of ``losses.MeanSquaredError`` per example."""

    def __init__(self, name: str = "mean_squared_error") -> None:
        super().__init__(losses.MeanSquaredError(), name)


class MeanAbsoluteError(MeanMetricWrapper):
    """Weighted mean of ``losses.MeanAbsoluteError`` per example."""

    def __init__(self, name: str = "mean_absolute_error") -> None:
        super().__init__(losses.MeanAbsoluteError(), name)


_BY_NAME: dict[str, type[MeanMetricWrapper]] = {
    "accuracy": Accuracy,
    "acc": Accuracy,
    "binary_accuracy": BinaryAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
}


def get(identifier: str | Metric | MetricFn) -> Metric:
    """Returns the ``Metric`` for one entry of ``Model.compile(metrics=[...])``.

    Args:
        identifier: a ``Metric`` (returned as is), a Keras metric name
            (case-insensitive; the metric is named with the string as written,
            so ``"acc"`` logs as ``acc``), or a callable
            ``fn(y_true, y_pred) -> [batch]`` (wrapped in ``MeanMetricWrapper``
            and named ``fn.__name__``).

    Returns:
        A ``Metric``.

    Raises:
        ValueError: for an unknown name.
        TypeError: for anything that is neither a Metric, a string nor a callable.

    Example:
        >>> get("acc")
        Accuracy(name='acc')
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(
                f"Unknown metric name. Expected one of {sorted(_BY_NAME)}, a "
                "mf.metrics.Metric or a callable fn(y_true, y_pred) -> [batch]. "
                f"Received: metrics={identifier!r}"
            )
        return cls(name=identifier)
    if callable(identifier):
        name = getattr(identifier, "__name__", None) or getattr(identifier, "name", None)
        return MeanMetricWrapper(identifier, name=name or type(identifier).__name__)
    raise TypeError(
        "Each metric must be a metric name (e.g. 'accuracy'), a mf.metrics.Metric "
        "or a callable fn(y_true, y_pred) -> [batch]. "
        f"Received: metrics={identifier!r} of type {type(identifier).__name__}"
    )
