"""The ``Metric`` base class: sufficient statistics, plus Keras' stateful object API.

A metric has two faces, and this module owns both:

* **stateless**, for the per-replica steps of ``fit``/``evaluate``: ``update(y_true, y_pred,
  sample_weight)`` maps one per-replica batch to plain sums (its sufficient statistics); the
  step all-reduces them (``lax.psum``) and adds them over batches; ``result(stats)`` turns
  the accumulated sums into the logged value. Sums add up the same way whatever the replica
  count and however a partial batch is padded, so results are exact.
* **stateful**, for custom loops, as ``keras.metrics.Metric``: ``update_state``,
  ``result()``, ``reset_state()``. It accepts NumPy/JAX arrays and what
  ``strategy.run`` returns (`PerReplica`, `Mirrored`, distributed batches), drops their
  padding rows, and accumulates the same statistics on the host (float64 NumPy).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.distribute.values import Mirrored, PerReplica, batch_mask
from mirrorfit._src.utils.naming import snake_case

Stats = Any  # A pytree of arrays holding sums over examples.
MetricFn = Callable[[jax.Array, jax.Array], jax.Array]


def array_namespace(*trees: Any) -> Any:
    """``jnp`` if any leaf is a jax array (or tracer), else ``np``: results run on both."""
    leaves = jax.tree.leaves(trees)
    return jnp if any(isinstance(leaf, jax.Array) for leaf in leaves) else np


def divide_no_nan(total: Any, count: Any) -> Any:
    """``total / count``, or 0 where ``count == 0``.

    Traced or jax inputs give a jax array; NumPy or Python inputs give NumPy.
    """
    xp = array_namespace(total, count)
    total, count = xp.asarray(total), xp.asarray(count)
    safe = xp.where(count == 0, 1, count)
    return xp.where(count == 0, 0.0, total / safe)


def weighted_sum(values: jax.Array, weight: jax.Array, axis: Any = None) -> jax.Array:
    """``sum(weight * values)`` where a zero weight contributes exactly 0 (even for nan/inf).

    Args:
        values: ``[batch, ...]``.
        weight: ``[batch]``, broadcast over the trailing axes of ``values``.
        axis: the axes summed (default: all).
    """
    weight = jnp.reshape(weight, weight.shape + (1,) * (values.ndim - weight.ndim))
    return jnp.sum(jnp.where(weight != 0, values * weight, 0.0), axis=axis)


def _flatten_replicas(value: Any) -> tuple[Any, Any]:
    """An input of ``update_state`` as a host array ``[rows, ...]`` and its mask, if any."""
    if isinstance(value, Mirrored):
        value = value.value
    if isinstance(value, PerReplica):
        values = np.asarray(value.values)
        values = values.reshape((-1,) + values.shape[2:]) if values.ndim > 1 else values
        mask = None if value.mask is None else np.asarray(value.mask).reshape(-1)
        return values, mask
    mask = batch_mask(value) if isinstance(value, jax.Array) else None
    return np.asarray(value), None if mask is None else np.asarray(mask)


class Metric:
    """Base class for metrics; subclass it to write your own.

    Implement ``update`` (sums over the rows of one per-replica batch) and ``result`` (the
    value from accumulated sums). ``fit`` adds the statistics over replicas and batches;
    padding rows arrive with ``sample_weight == 0`` and must not contribute. The stateful
    methods (``update_state``, ``result()``, ``reset_state``) come for free.

    Args:
        name: key of the metric in the logs; defaults to the class name in snake_case.

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
        >>> m.update_state(np.zeros(3), np.array([1.0, 2.0, 6.0]))
        >>> float(m.result())
        3.0
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name or snake_case(type(self).__name__)
        self._state: Stats | None = None
        self._jitted_update: Callable | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass writes ``result(self, stats)``; ``result()`` without statistics must
        # read the state that update_state accumulated.
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("result")
        if fn is not None and not getattr(fn, "_reads_state", False):
            @functools.wraps(fn)
            def result(self, stats: Stats | None = None) -> Any:
                if stats is None:
                    stats = getattr(self, "_state", None)
                    if stats is None:  # nothing accumulated yet: 0, as Keras' zero variables
                        return np.float32(0.0)
                return fn(self, stats)

            # A flag on the wrapper; functools.wraps' return type declares no such attribute.
            result._reads_state = True  # pyright: ignore[reportAttributeAccessIssue]
            cls.result = result

    # -- stateless: what the per-replica steps call -------------------------------------

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

    def result(self, stats: Stats | None = None) -> Any:
        """The metric value from statistics, or from the accumulated state.

        Must work on traced jax arrays and on NumPy arrays, and return 0 rather than nan
        when no example was seen.

        Args:
            stats: the statistics of ``update`` summed over replicas and batches; ``None``
                (Keras' ``result()``) uses what ``update_state`` accumulated (0.0 before any).

        Returns:
            A scalar (or an array for per-class or per-threshold metrics).
        """
        raise NotImplementedError

    # -- stateful: Keras' object API for custom loops -----------------------------------

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds one batch to the state, as ``keras.metrics.Metric.update_state``.

        Args:
            y_true: targets ``[batch, ...]``: NumPy/JAX arrays, a distributed batch, a
                `PerReplica` (``[num_replicas, per_replica_batch, ...]``) or a `Mirrored`.
            y_pred: predictions, the same kinds; `PerReplica` rows line up with the
                distributed batch they were computed from.
            sample_weight: ``None`` or ``[batch]`` weights (same kinds).

        Padding rows (from a `PerReplica` mask or a distributed batch's mask) are dropped.

        Raises:
            ValueError: if the inputs disagree on the number of rows.
        """
        self._accumulate((y_true, y_pred), sample_weight)

    def reset_state(self) -> None:
        """Zeroes the state, as ``keras.metrics.Metric.reset_state``."""
        if getattr(self, "_state", None) is not None:
            self._state = jax.tree.map(np.zeros_like, self._state)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``update_state(*args, **kwargs)``, then ``result()``, as Keras."""
        self.update_state(*args, **kwargs)
        return self.result()

    def _accumulate(self, arrays: tuple, sample_weight: Any) -> None:
        """Adds the statistics of one batch of ``update_state`` inputs to the state."""
        stats = jax.tree.map(lambda leaf: np.asarray(leaf, np.float64),
                             self._batch_stats(arrays, sample_weight))
        state = getattr(self, "_state", None)
        self._state = stats if state is None else jax.tree.map(np.add, state, stats)

    def _batch_stats(self, arrays: Sequence[Any], sample_weight: Any) -> Stats:
        """``update`` on host copies of ``arrays``, padding rows weighted 0."""
        flat = [_flatten_replicas(value) for value in arrays]
        arrays = [np.atleast_1d(values) for values, _ in flat]
        masks = [mask for _, mask in flat if mask is not None]
        rows = arrays[0].shape[0]
        for name, values in zip(("y_true", "y_pred"), arrays):
            if values.shape[0] != rows:
                raise ValueError(
                    f"Metric {self.name!r}: update_state inputs must have the same number of "
                    f"rows. Received: {name} with {values.shape[0]} rows, {rows} expected")
        weight = np.ones(rows, np.float32)
        if sample_weight is not None:
            sw, sw_mask = _flatten_replicas(sample_weight)
            weight = weight * np.broadcast_to(np.asarray(sw, np.float32).reshape(-1), (rows,))
            masks += [sw_mask] if sw_mask is not None else []
        for mask in masks:
            weight = weight * mask.astype(np.float32)
        update = getattr(self, "_jitted_update", None)
        if update is None:
            update = self._jitted_update = jax.jit(self.update)
        return update(*arrays, weight)

    # -- config ------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, as ``keras.metrics.Metric.get_config``."""
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Metric:
        """Rebuilds a metric from ``get_config()``."""
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"
