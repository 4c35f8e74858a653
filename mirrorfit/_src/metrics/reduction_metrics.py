"""Keras' reduction metrics: ``Mean``, ``Sum`` and ``MeanMetricWrapper``.

``Mean`` and ``Sum`` take values, not ``(y_true, y_pred)``: they are for custom loops
(``train_loss = mf.metrics.Mean(); train_loss.update_state(per_replica_losses)``).
``MeanMetricWrapper`` is the weighted mean of a per-example function of
``(y_true, y_pred)``; most built-in metrics are one.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.metrics.metric import (
    TOTAL_AND_COUNT,
    Metric,
    MetricFn,
    divide_no_nan,
    weighted_sum,
)

METRIC_SHAPES = (
    "Metric {name!r} could not compare y_true of shape {true} with y_pred of shape {pred}: "
    "the targets must fit the outputs (the same shape, or class indices [batch] for sparse "
    "metrics). Pass update_state(y_true, y_pred) in that order, with targets as wide as the "
    "model's output. Received: y_true of shape {true} and y_pred of shape {pred} ({error})"
)


def _per_example(values: jax.Array) -> jax.Array:
    """``[batch, ...]`` -> ``[batch]``: the mean over non-batch axes (Keras' samplewise)."""
    values = jnp.asarray(values, jnp.float32)
    return jnp.mean(values, axis=tuple(range(1, values.ndim)))


class Mean(Metric):
    """The weighted mean of the values seen, as ``keras.metrics.Mean``.

    Values ``[batch, ...]`` are averaged per example, then weighted:
    ``sum(w * v) / sum(w)``; statistics ``{"total", "count"}``.

    Args:
        name: key in the logs.

    Example:
        >>> import numpy as np
        >>> m = Mean()
        >>> m.update_state(np.array([1.0, 3.0]))
        >>> m.update_state(np.array([5.0]), sample_weight=np.array([2.0]))
        >>> float(m.result())
        3.5
    """

    def __init__(self, name: str = "mean") -> None:
        super().__init__(name)

    def update_state(self, values: Any, sample_weight: Any = None) -> None:  # type: ignore[override]
        """Adds ``values`` (``[batch, ...]``, a scalar, or a `PerReplica`) to the mean."""
        self._accumulate((values,), sample_weight)

    def update(self, values: jax.Array, sample_weight: jax.Array) -> dict[str, jax.Array]:  # type: ignore[override]
        """``{"total": sum(w * v), "count": sum(w)}`` with ``v`` the per-example means."""
        weight = jnp.asarray(sample_weight, jnp.float32)
        return {"total": weighted_sum(_per_example(values), weight), "count": jnp.sum(weight)}

    def result(self, stats: Any = None) -> Any:
        """``total / count`` (0 when ``count == 0``)."""
        return divide_no_nan(stats["total"], stats["count"])

    def _known_statistics(self) -> Any:
        return TOTAL_AND_COUNT if type(self).update is Mean.update else None


class Sum(Metric):
    """The weighted sum of the values seen, as ``keras.metrics.Sum``.

    Values ``[batch, ...]`` are summed per example, then weighted: ``sum(w * v)``.

    Args:
        name: key in the logs.
    """

    def __init__(self, name: str = "sum") -> None:
        super().__init__(name)

    def update_state(self, values: Any, sample_weight: Any = None) -> None:  # type: ignore[override]
        """Adds ``values`` (``[batch, ...]``, a scalar, or a `PerReplica`) to the sum."""
        self._accumulate((values,), sample_weight)

    def update(self, values: jax.Array, sample_weight: jax.Array) -> dict[str, jax.Array]:  # type: ignore[override]
        """``{"total": sum(w * v)}`` with ``v`` the per-example sums."""
        values = jnp.asarray(values, jnp.float32)
        values = jnp.sum(values, axis=tuple(range(1, values.ndim)))
        return {"total": weighted_sum(values, jnp.asarray(sample_weight, jnp.float32))}

    def result(self, stats: Any = None) -> Any:
        """The total."""
        return stats["total"]

    def _known_statistics(self) -> Any:
        return {"total": ()} if type(self).update is Sum.update else None


class MeanMetricWrapper(Metric):
    """Weighted mean of a per-example function, as ``keras.metrics.MeanMetricWrapper``.

    The value is ``sum(w * fn(y_true, y_pred)) / sum(w)`` over all examples seen,
    where ``w`` is the sample weight; its statistics are ``{"total", "count"}``. ``update``
    also takes element weights ``[batch, timesteps]`` (how ``fit`` passes a model output's
    Keras mask, as Keras' wrapper merges the mask into the sample weight): the sums then run
    over the elements ``fn`` returns.

    Args:
        fn: ``fn(y_true, y_pred, **kwargs) -> [batch]`` per-example values; extra non-batch
            axes (``[batch, ...]``) are averaged per example.
        name: key of the metric in the logs; defaults to ``fn.__name__``.
        **kwargs: passed to ``fn``; they are the metric's config.

    Raises:
        ValueError: (when updated) if ``fn`` reduced over the batch, or failed on the shapes
            of ``y_true`` and ``y_pred`` (both shapes named).

    Example:
        >>> def max_error(y_true, y_pred):
        ...     return jnp.max(jnp.abs(y_true - y_pred), axis=-1)
        >>> m = MeanMetricWrapper(max_error, name="max_error")
    """

    def __init__(self, fn: MetricFn, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(name or getattr(fn, "__name__", None) or type(fn).__name__)
        self.fn = fn
        self.fn_kwargs = kwargs

    def update(self, y_true: jax.Array, y_pred: jax.Array,
               sample_weight: jax.Array) -> dict[str, jax.Array]:
        """``{"total": sum(w * v), "count": sum(w)}`` for ``v = fn(y_true, y_pred)``.

        ``sample_weight`` is float32 ``[batch]``, or ``[batch, timesteps]`` element weights:
        values ``[batch, timesteps, ...]`` are then averaged over their trailing axes and
        weighted per element (values of another shape take each row's largest weight).
        """
        try:
            values = jnp.asarray(self.fn(y_true, y_pred, **self.fn_kwargs), jnp.float32)
        except (ValueError, TypeError) as error:
            raise ValueError(METRIC_SHAPES.format(
                name=self.name, true=jnp.shape(y_true), pred=jnp.shape(y_pred),
                error=error)) from error
        batch = sample_weight.shape[0]
        if values.ndim == 0 or values.shape[0] != batch:
            raise ValueError(
                f"Metric {self.name!r} must return one value per example, shape "
                f"[batch] = [{batch}]; do not reduce over the batch. "
                f"Received: values of shape {values.shape}")
        weight = jnp.asarray(sample_weight, jnp.float32)
        if weight.ndim > 1 and values.shape[:weight.ndim] == weight.shape:
            values = jnp.mean(values, axis=tuple(range(weight.ndim, values.ndim)))
            return {"total": weighted_sum(values, weight), "count": jnp.sum(weight)}
        if weight.ndim > 1:
            weight = jnp.max(weight, axis=tuple(range(1, weight.ndim)))
        return {"total": weighted_sum(_per_example(values), weight), "count": jnp.sum(weight)}

    def result(self, stats: Any = None) -> Any:
        """Returns ``total / count`` (0 when ``count == 0``)."""
        return divide_no_nan(stats["total"], stats["count"])

    def _known_statistics(self) -> Any:
        return TOTAL_AND_COUNT if type(self).update is MeanMetricWrapper.update else None

    def get_config(self) -> dict[str, Any]:
        """Keras' config: ``name`` and the keyword arguments given to ``fn`` (and ``fn``
        itself for a plain `MeanMetricWrapper`, which has no JSON form).
        """
        config = {"name": self.name, **self.fn_kwargs}
        if type(self) is MeanMetricWrapper:
            config["fn"] = self.fn
        return config

    def __getattr__(self, name: str) -> Any:
        kwargs = self.__dict__.get("fn_kwargs", {})
        if name in kwargs:  # e.g. metric.threshold, metric.k
            return kwargs[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
