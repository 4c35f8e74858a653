"""The ``Metric`` base class: sufficient statistics, plus Keras' stateful object API.

A metric has two faces, and this module owns both:

* **stateless**, for the per-replica steps of ``fit``/``evaluate``: ``update(y_true, y_pred,
  sample_weight)`` maps one per-replica batch to plain sums (its sufficient statistics); the
  step all-reduces them (``lax.psum``) and adds them over batches; ``result(stats)`` turns
  the accumulated sums into the logged value. Sums add up the same way whatever the replica
  count and however a partial batch is padded, so results are exact.
* **stateful**, for custom loops, as ``keras.metrics.Metric``: ``update_state``,
  ``result()``, ``reset_state()``. The accumulated statistics are float32 `Variable` s
  (``metric.variables``) with ``aggregation="sum"``. Outside a compiled function
  ``update_state`` accepts NumPy/JAX arrays and what ``strategy.run`` returns
  (`PerReplica`, `Mirrored`, distributed batches) and drops their padding rows; inside one
  (a replica function of ``strategy.run``, `mirrorfit.function`, a ``train_step``) it adds
  this replica's rows (padding rows excluded through the replica context's mask), and
  ``strategy.run`` adds the replicas' changes, so after the call the metric holds the
  global totals, as a ``tf.distribute`` metric does. Keras 3's JAX API
  (``stateless_update_state``, ``stateless_result``, ``stateless_reset_state``) maps the
  variables to given values instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from mirrorfit._src.distribute.replica_context import get_replica_context
from mirrorfit._src.distribute.values import Mirrored, PerReplica, batch_mask
from mirrorfit._src.utils.naming import snake_case
from mirrorfit._src.variables import placement
from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

Stats = Any  # A pytree of arrays holding sums over examples.
MetricFn = Callable[[jax.Array, jax.Array], jax.Array]
TOTAL_AND_COUNT = {"total": (), "count": ()}  # the statistics' shapes of a weighted mean


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


def _check_rows(name: str, arrays: Sequence[Any]) -> int:
    """The number of rows of ``update_state`` 's inputs (``y_true``, ``y_pred``), equal."""
    rows = arrays[0].shape[0]
    for label, values in zip(("y_true", "y_pred"), arrays):
        if values.shape[0] != rows:
            raise ValueError(
                f"Metric {name!r}: update_state inputs must have the same number of "
                f"rows. Received: {label} with {values.shape[0]} rows, {rows} expected")
    return rows


def _value_in(scope: StatelessScope, variable: Variable) -> Any:
    found = scope.get_current_value(variable)
    return variable.value if found is None else found


class Metric:
    """Base class for metrics; subclass it to write your own.

    Implement ``update`` (sums over the rows of one per-replica batch) and ``result`` (the
    value from accumulated sums). ``fit`` adds the statistics over replicas and batches;
    padding rows arrive with ``sample_weight == 0`` and must not contribute. The stateful
    methods (``update_state``, ``result()``, ``reset_state``, ``variables`` and Keras 3's
    ``stateless_*``) come for free: the statistics' variables are created on the first
    ``update_state``.

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
        self._mf_statistics: list[Variable] = []
        self._mf_treedef: Any = None
        self._jitted_update: Callable | None = None
        # Where this metric's variables go when they are created later (in the first
        # update_state, maybe inside strategy.run): where variables created now would go.
        self._mf_sharding = getattr(placement.place(np.zeros((), np.float32)), "sharding", None)
        known = self._known_statistics()
        if known is not None:
            self._build(jax.tree.map(lambda shape: jax.ShapeDtypeStruct(shape, jnp.float32),
                                     known, is_leaf=lambda x: isinstance(x, tuple)))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass writes ``result(self, stats)``; ``result()`` without statistics must
        # read the state that update_state accumulated.
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("result")
        if fn is not None and not getattr(fn, "_reads_state", False):
            @functools.wraps(fn)
            def result(self, stats: Stats | None = None) -> Any:
                if stats is None:
                    stats = self._statistics()
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
                `PerReplica` (``[num_replicas, per_replica_batch, ...]``) or a `Mirrored`;
                inside a replica function, this replica's rows.
            y_pred: predictions, the same kinds; `PerReplica` rows line up with the
                distributed batch they were computed from.
            sample_weight: ``None`` or ``[batch]`` weights (same kinds).

        Padding rows (from a `PerReplica` mask, a distributed batch's mask, or inside a
        replica function the replica context's mask) are dropped.

        Raises:
            ValueError: if the inputs disagree on the number of rows.
        """
        self._accumulate((y_true, y_pred), sample_weight)

    def reset_state(self) -> None:
        """Zeroes the state, as ``keras.metrics.Metric.reset_state``."""
        for variable in self.variables:
            variable.assign(jnp.zeros(variable.shape, variable.dtype))

    def reset_states(self) -> None:
        """`reset_state`, under tf.keras 2's name."""
        self.reset_state()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``update_state(*args, **kwargs)``, then ``result()``, as Keras."""
        self.update_state(*args, **kwargs)
        return self.result()

    @property
    def variables(self) -> list[Variable]:
        """The accumulated statistics as float32 `Variable` s (``aggregation="sum"``), in
        the order of ``update`` 's flattened output; empty before the first update of a
        metric whose statistics' shapes depend on the data."""
        return list(getattr(self, "_mf_statistics", []))

    def __mf_variables__(self) -> list[tuple[tuple[str, ...], Variable]]:
        return [((v.name,), v) for v in self.variables]

    def stateless_update_state(self, metric_variables: Sequence[Any], *args: Any,
                               **kwargs: Any) -> list[Any]:
        """`update_state` as a pure function of values, as Keras 3's JAX API.

        Args:
            metric_variables: the values of `variables`, in order.
            *args, **kwargs: `update_state` 's arguments.

        Returns:
            The new values of `variables`; no `Variable` changes.

        Raises:
            ValueError: if ``metric_variables`` has the wrong length.
        """
        with self._mapped(metric_variables) as scope:
            self.update_state(*args, **kwargs)
        return [_value_in(scope, v) for v in self.variables]

    def stateless_result(self, metric_variables: Sequence[Any]) -> Any:
        """``result()`` of the statistics ``metric_variables`` (values of `variables`)."""
        with self._mapped(metric_variables):
            return self.result()

    def stateless_reset_state(self) -> list[Any]:
        """The values of `variables` after `reset_state`; no `Variable` changes."""
        with StatelessScope() as scope:
            self.reset_state()
        return [_value_in(scope, v) for v in self.variables]

    def _mapped(self, metric_variables: Sequence[Any]) -> StatelessScope:
        own = self.variables
        if len(metric_variables) != len(own):
            raise ValueError(f"Metric {self.name!r}: metric_variables must hold one value per "
                             f"variable of metric.variables, in order: {len(own)} values. "
                             f"Received: {len(metric_variables)} values")
        return StatelessScope(zip(own, metric_variables))

    def _known_statistics(self) -> Any:
        """The statistics' shapes (a pytree of tuples) when they do not depend on the data,
        so the variables exist from the start (Keras creates them in ``__init__``)."""
        return None

    def _statistics(self) -> Stats | None:
        """The accumulated statistics (the variables' values), or ``None`` before any."""
        variables = getattr(self, "_mf_statistics", None)
        if not variables:
            return None
        return jax.tree.unflatten(self._mf_treedef, [v.value for v in variables])

    def _build(self, shapes: Any) -> None:
        """Creates one zero float32 variable per statistic (``shapes``: ShapeDtypeStructs)."""
        leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes)
        sharding = getattr(self, "_mf_sharding", None)
        place = (lambda v: v) if sharding is None else (lambda v: jax.device_put(v, sharding))
        with jax.ensure_compile_time_eval(), placement.placing(place):
            self._mf_statistics = [
                Variable(jnp.zeros(leaf.shape, jnp.float32), trainable=False,
                         name=jax.tree_util.keystr(path, simple=True, separator="/"),
                         aggregation="sum")
                for path, leaf in leaves]
        self._mf_treedef = treedef

    def _accumulate(self, arrays: tuple, sample_weight: Any) -> None:
        """Adds the statistics of one batch of ``update_state`` inputs to the variables."""
        if any(isinstance(leaf, Tracer) for leaf in jax.tree.leaves(
                (arrays, sample_weight))):
            stats = self._traced_stats(arrays, sample_weight)
        else:
            stats = jax.tree.map(np.asarray, self._batch_stats(arrays, sample_weight))
        leaves, treedef = jax.tree.flatten(stats)
        if not getattr(self, "_mf_statistics", None):
            self._build(jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.float32),
                                     stats))
        elif treedef != self._mf_treedef:
            raise ValueError(f"Metric {self.name!r}: update must return the same statistics "
                             f"every time, {self._mf_treedef}. Received: {treedef}")
        for variable, leaf in zip(self._mf_statistics, leaves):
            variable.assign(variable.value + jnp.asarray(leaf, jnp.float32))

    def _traced_stats(self, arrays: Sequence[Any], sample_weight: Any) -> Stats:
        """``update`` on this replica's traced rows (inside a compiled function). A scalar
        (a per-replica loss) is this replica's one value, never a padding row."""
        scalar = jnp.ndim(arrays[0]) == 0
        arrays = [jnp.atleast_1d(jnp.asarray(value)) for value in arrays]
        rows = _check_rows(self.name, arrays)
        weight = jnp.ones(rows, jnp.float32)
        if sample_weight is not None:
            weight = weight * jnp.broadcast_to(
                jnp.asarray(sample_weight, jnp.float32).reshape(-1), (rows,))
        mask = get_replica_context().mask
        if mask is not None and mask.shape[0] == rows and not scalar:
            weight = weight * mask.astype(jnp.float32)
        update: Callable[..., Stats] = self.update  # Mean and Sum take (values, weight)
        return update(*arrays, weight)

    def _batch_stats(self, arrays: Sequence[Any], sample_weight: Any) -> Stats:
        """``update`` on host copies of ``arrays``, padding rows weighted 0."""
        flat = [_flatten_replicas(value) for value in arrays]
        arrays = [np.atleast_1d(values) for values, _ in flat]
        masks = [mask for _, mask in flat if mask is not None]
        rows = _check_rows(self.name, arrays)
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
