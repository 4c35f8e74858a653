"""`Normalization`: ``(x - mean) / max(sqrt(variance), 1e-7)``, as
``keras.layers.Normalization``, with ``adapt`` computing the statistics in NumPy on the host.

The statistics are Keras' non-trainable weights ``mean``, ``variance`` (the kept axes' shape)
and ``count`` (int32 scalar, which Keras' ``adapt`` leaves at 0), in the ``"batch_stats"``
collection. ``adapt`` keeps them on the host in a `Statistics` object shared by the layer and
the Flax copies of it that a model holds, so the weights a model creates start from them;
given ``mean=``/``variance=`` they are constants, not weights, as Keras.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.layers import flax_bridge
from mirrorfit._src.layers.base import FlaxLayer, layer_field, register
from mirrorfit._src.layers.normalization import BATCH_STATS

EPSILON = 1e-7  # keras.backend.epsilon()
ADAPTED_IN_MODEL = (
    "Normalization.adapt() was called after a model holding this layer created its weights, "
    "so that model keeps the old statistics. Adapt the layer before building the model "
    "(before compile/fit/summary or calling it), or build a new model after adapt().")


@dataclasses.dataclass(eq=False)
class Statistics:
    """The adapted statistics on the host, shared by a layer and its Flax copies."""

    mean: np.ndarray | None = None  # [kept axes' sizes] float32, None before adapt
    variance: np.ndarray | None = None  # as mean
    in_model: bool = False  # a model (a parent module) created weights from these


def _keep_axes(axis: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    if any(a < -ndim or a >= ndim for a in axis):
        raise ValueError(f"All axis values must be in [-ndim, ndim) for inputs of ndim={ndim}. "
                         f"Received: axis={axis}")
    return tuple(sorted(a % ndim for a in axis))


def _first_input(batch: Any) -> np.ndarray:
    """A batch's inputs: the first item of an ``(x, y[, w])`` tuple, as Keras' adapt."""
    return np.asarray(batch[0] if isinstance(batch, tuple) else batch)


def _batches(data: Any) -> Iterable[np.ndarray]:
    if isinstance(data, (np.ndarray, jax.Array)):
        return [np.asarray(data)]
    if hasattr(data, "__getitem__") and hasattr(data, "__len__") and not isinstance(
            data, (list, tuple)):  # a PyDataset: batches by index
        return (_first_input(data[i]) for i in range(len(data)))
    if not hasattr(data, "__iter__"):
        raise TypeError("adapt() takes a NumPy array, a list of batches, a generator of batches "
                        f"or a PyDataset. Received: data of type {type(data).__name__}")
    return (_first_input(b) for b in data)


@register
class Normalization(FlaxLayer):
    """Feature-wise ``(x - mean) / max(sqrt(variance), 1e-7)`` (or, with ``invert=True``,
    ``mean + x * max(sqrt(variance), 1e-7)``), as ``keras.layers.Normalization``.

    ``axis``: the axes that keep their own statistics (``-1``: one per feature; ``None``: one
    for everything). Either pass ``mean`` and ``variance`` (numbers, or arrays of the kept
    axes' shape) or call `adapt` on data before building the model. Any shape in and out.

    Example:
        >>> import numpy as np
        >>> import mirrorfit as mf
        >>> norm = mf.layers.Normalization()
        >>> norm.adapt(np.array([[0.0, 10.0], [2.0, 30.0]], np.float32))
        >>> np.asarray(norm(np.array([[1.0, 20.0]], np.float32))).tolist()
        [[0.0, 0.0]]
    """

    axis: Any = -1
    mean: Any = None
    variance: Any = None
    invert: bool = False
    statistics: Any = layer_field(default=None, kw_only=True)  # `Statistics`, set by adapt

    def __post_init__(self) -> None:
        if (self.mean is None) != (self.variance is None):
            raise ValueError("Pass both mean and variance, or neither (and adapt() the layer). "
                             f"Received: mean={self.mean!r}, variance={self.variance!r}")
        if self.mean is not None and np.shape(self.mean) != np.shape(self.variance):
            raise ValueError("mean and variance must have the same shape. Received: mean shape "
                             f"{np.shape(self.mean)}, variance shape {np.shape(self.variance)}")
        if self.statistics is None:
            object.__setattr__(self, "statistics", Statistics())
        super().__post_init__()

    @property
    def axes(self) -> tuple[int, ...]:
        """``axis`` as a tuple (``None`` is ``()``)."""
        if self.axis is None:
            return ()
        return (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments, a given ``mean`` and ``variance``
        as lists (statistics learned by ``adapt`` are weights, saved with them).
        """
        config = super().get_config()
        config.pop("statistics")
        for name in ("mean", "variance"):
            if config[name] is not None:
                config[name] = np.asarray(config[name]).tolist()
        return config

    @nn.compact
    def __call__(self, inputs: Any, training: bool = False) -> jax.Array:
        x = jnp.asarray(inputs)
        x = self.cast(x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32))
        keep = _keep_axes(self.axes, x.ndim)
        broadcast = tuple(x.shape[d] if d in keep else 1 for d in range(x.ndim))
        if self.mean is not None:
            mean, variance = (self._given(v, keep, broadcast) for v in (self.mean, self.variance))
        else:
            shape = tuple(x.shape[d] for d in keep)
            mean, variance = self._weights(shape)
            mean, variance = mean.reshape(broadcast), variance.reshape(broadcast)
        mean, scale = mean.astype(x.dtype), jnp.maximum(jnp.sqrt(variance), EPSILON).astype(x.dtype)
        return mean + x * scale if self.invert else (x - mean) / scale

    def _given(self, value: Any, keep: tuple[int, ...], broadcast: tuple[int, ...]) -> jax.Array:
        """``mean``/``variance`` given as numbers or arrays, broadcast as Keras' ``build``."""
        value = jnp.asarray(value, jnp.float32)
        expanded = [1] * len(broadcast)
        for i in range(1, value.ndim + 1):
            expanded[keep[-i]] = value.shape[-i]
        return jnp.broadcast_to(value.reshape(expanded), broadcast)

    def _weights(self, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
        stats = self.statistics
        if self.is_initializing() and self.scope is not None and self.scope.path:
            stats.in_model = True

        def initial(value: np.ndarray | None, fill: float) -> jax.Array:
            if value is None:
                return jnp.full(shape, fill, jnp.float32)
            if value.shape != shape:
                raise ValueError(f"Normalization was adapted on data whose kept axes {self.axes} "
                                 f"have shape {value.shape}; it was called on inputs whose kept "
                                 f"axes have shape {shape}. Adapt it on data like its inputs.")
            return jnp.asarray(value, jnp.float32)

        mean = self.variable(BATCH_STATS, "mean", lambda: initial(stats.mean, 0.0))
        variance = self.variable(BATCH_STATS, "variance", lambda: initial(stats.variance, 1.0))
        self.variable(BATCH_STATS, "count", lambda: jnp.zeros((), jnp.int32))
        return mean.value, variance.value

    def adapt(self, data: Any) -> None:
        """Computes ``mean`` and ``variance`` over ``data`` on the host (NumPy), as Keras'
        ``Normalization.adapt``: over all axes but ``axis``, batch by batch with Keras'
        running update for several batches.

        Args:
            data: a NumPy array ``[n, ...]``; or batches of them: a list, a generator, or a
                ``PyDataset`` (of an ``(x, y)`` batch, ``x`` is used).

        Raises:
            ValueError: ``mean``/``variance`` were given; no batches; batches whose kept axes
                differ; or a model holding the layer already created its weights.
            TypeError: ``data`` of another kind.
        """
        if self.mean is not None:
            raise ValueError("This Normalization was given mean and variance; adapt() computes "
                             "them instead. Create it without them to adapt it. Received: "
                             f"mean={self.mean!r}")
        if self.statistics.in_model:
            raise ValueError(ADAPTED_IN_MODEL)
        batches = iter(_batches(data))
        first = next(batches, None)
        if first is None:
            raise ValueError("adapt() received no batches; pass at least one array.")
        keep = _keep_axes(self.axes, first.ndim)
        reduce = tuple(d for d in range(first.ndim) if d not in keep)
        shape = tuple(first.shape[d] for d in keep)
        total_mean, total_var, total_count = np.zeros(shape), np.zeros(shape), 0
        for batch in itertools.chain([first], batches):
            batch = np.asarray(batch, np.float64)
            if tuple(batch.shape[d] for d in keep) != shape:
                raise ValueError(f"adapt() got batches whose kept axes {self.axes} differ: "
                                 f"expected {shape}. Received: a batch of shape {batch.shape}")
            count = math.prod(batch.shape[d] for d in reduce)
            total_count += count
            weight = count / total_count
            mean = total_mean * (1 - weight) + batch.mean(axis=reduce) * weight
            total_var = ((total_var + (total_mean - mean) ** 2) * (1 - weight)
                         + (batch.var(axis=reduce) + (batch.mean(axis=reduce) - mean) ** 2)
                         * weight)
            total_mean = mean
        self.statistics.mean = total_mean.astype(np.float32)
        self.statistics.variance = total_var.astype(np.float32)
        for path, variable in flax_bridge.flax_variables(self):  # built by a call of its own
            if path in (("mean",), ("variance",)):
                variable.assign(getattr(self.statistics, path[0]))
