"""Normalization layers with Keras' names and defaults (``epsilon=1e-3``).

BatchNormalization keeps ``gamma``/``beta`` in ``"params"`` and ``moving_mean``/
``moving_variance`` in ``"batch_stats"``. In training each replica normalizes with its own
batch statistics, as Keras under ``MirroredStrategy``; ``synchronized=True`` averages them
over the replicas (mesh axis ``"batch"``) first. Under a Keras mask the statistics are over
the unmasked positions only (`_masked_moments`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.initializers import initializers
from mirrorfit._src.layers.base import FlaxLayer, register

KERAS_EPSILON = 1e-7  # keras.backend.epsilon(), added to the masked moments' divisor
REPLICA_AXIS = "batch"  # the strategy's mesh axis (mirrorfit._src.distribute.mesh.BATCH_AXIS)
BATCH_STATS = "batch_stats"


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim for a in axes))


def _scale_and_offset(layer: FlaxLayer, x: jax.Array, axes: tuple[int, ...]):
    """``(shape, broadcast shape, gamma or None, beta or None)`` over the feature ``axes``,
    with the layer's ``scale``/``center`` and Keras' gamma/beta weights."""
    shape = tuple(x.shape[a] for a in axes)
    bshape = tuple(x.shape[a] if a in axes else 1 for a in range(x.ndim))
    gamma = (layer.weight("gamma", layer.gamma_initializer, shape, layer.gamma_regularizer)
             if layer.scale else None)
    beta = (layer.weight("beta", layer.beta_initializer, shape, layer.beta_regularizer)
            if layer.center else None)
    return shape, bshape, gamma, beta


def _normalize(x, mean, var, gamma, beta, epsilon):
    y = (x - mean) * lax.rsqrt(var + epsilon)
    if gamma is not None:
        y = y * gamma
    return y if beta is None else y + beta


def _masked_moments(x: jax.Array, mask: jax.Array, reduce_axes: tuple[int, ...],
                    synchronized: bool) -> tuple[jax.Array, jax.Array]:
    """The mean and (biased) variance over ``reduce_axes`` of the unmasked positions, as
    Keras' ``BatchNormalization._moments`` with a mask: ``sum(m * x) / (sum(m) + 1e-7)``,
    then ``sum(m * (x - mean)^2) / (sum(m) + 1e-7)``.

    Args:
        x: float32 inputs ``[batch, ..., features]``.
        mask: bool ``[batch, ...]`` (``x``'s shape without its last axis), True: counted.
        reduce_axes: the axes the statistics reduce.
        synchronized: whether the sums are over every replica (mesh axis ``"batch"``), which
            makes the moments those of the global batch exactly, whatever each replica's
            share of unmasked positions.

    Returns:
        ``(mean, variance)``, float32 of the feature axes' shape.
    """
    keep = jnp.broadcast_to(jnp.expand_dims(mask, -1), x.shape).astype(bool)
    total = lambda v: lax.psum(v, REPLICA_AXIS) if synchronized else v
    count, sums = total((jnp.sum(keep, reduce_axes, dtype=jnp.float32),
                         jnp.sum(jnp.where(keep, x, 0.0), reduce_axes)))
    mean = sums / (count + KERAS_EPSILON)
    centered = jnp.where(keep, x - jnp.expand_dims(mean, reduce_axes), 0.0)
    variance = total(jnp.sum(jnp.square(centered), reduce_axes)) / (count + KERAS_EPSILON)
    return mean, variance


@register
class BatchNormalization(FlaxLayer):
    """``gamma * (x - mean) / sqrt(var + epsilon) + beta``, as
    ``keras.layers.BatchNormalization``; any shape in and out.

    In training (and ``trainable``) the batch's mean and (biased) variance over all axes but
    ``axis`` are used, and ``moving = moving * momentum + batch * (1 - momentum)``; in
    inference, or when ``trainable=False`` (Keras' frozen BatchNorm), the moving statistics.

    With a Keras ``mask`` (bool ``[batch, ...]``, the inputs' shape without the last axis;
    a model passes its input's mask, e.g. from ``Embedding(mask_zero=True)``), the batch's
    statistics are over the unmasked positions only (Keras' masked ``_moments``, over every
    replica's positions under ``synchronized=True``); every position is normalized, and the
    mask passes on.
    """

    supports_masking: ClassVar[bool] = True

    axis: Any = -1
    momentum: float = 0.99
    epsilon: float = 1e-3
    center: bool = True
    scale: bool = True
    beta_initializer: Any = "zeros"
    gamma_initializer: Any = "ones"
    moving_mean_initializer: Any = "zeros"
    moving_variance_initializer: Any = "ones"
    beta_regularizer: Any = None
    gamma_regularizer: Any = None
    beta_constraint: Any = None
    gamma_constraint: Any = None
    synchronized: bool = False

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False,
                 mask: jax.Array | None = None) -> jax.Array:
        x = self.cast(inputs)
        if mask is not None and mask.ndim != x.ndim - 1:
            raise ValueError(
                "BatchNormalization's mask must have one dimension less than its inputs "
                "(True for the positions the statistics count). Received: "
                f"mask.shape={tuple(mask.shape)}, inputs.shape={tuple(x.shape)}")
        feature_axes = _axes(self.axis, x.ndim)
        shape, bshape, gamma, beta = _scale_and_offset(self, x, feature_axes)
        moving = {
            name: self.variable(BATCH_STATS, name, lambda i=init: initializers.get(i)(
                self.make_rng("params"), shape, jnp.float32))
            for name, init in (("moving_mean", self.moving_mean_initializer),
                               ("moving_variance", self.moving_variance_initializer))}
        if training and self.trainable:
            reduce_axes = tuple(a for a in range(x.ndim) if a not in feature_axes)
            x32 = x.astype(jnp.float32)
            synchronized = self.synchronized and not self.is_initializing()
            if mask is not None:
                mean, var = _masked_moments(x32, mask, reduce_axes, synchronized)
            else:
                mean = jnp.mean(x32, reduce_axes)
                mean_sq = jnp.mean(jnp.square(x32), reduce_axes)
                if synchronized:
                    mean, mean_sq = lax.pmean((mean, mean_sq), REPLICA_AXIS)
                var = jnp.maximum(mean_sq - jnp.square(mean), 0.0)
            if not self.is_initializing():
                m = self.momentum
                moving["moving_mean"].value = moving["moving_mean"].value * m + mean * (1 - m)
                moving["moving_variance"].value = (moving["moving_variance"].value * m
                                                   + var * (1 - m))
        else:
            mean, var = moving["moving_mean"].value, moving["moving_variance"].value
        cast = lambda v: None if v is None else v.reshape(bshape).astype(x.dtype)
        return _normalize(x, cast(mean), cast(var), cast(gamma), cast(beta), self.epsilon)


@register
class LayerNormalization(FlaxLayer):
    """Normalizes each example over ``axis`` (default the last), as
    ``keras.layers.LayerNormalization``: ``gamma * (x - mean) / sqrt(var + epsilon) + beta``;
    any shape in and out, ``gamma``/``beta`` of the ``axis`` dimensions."""

    supports_masking: ClassVar[bool] = True  # passes a Keras mask on

    axis: Any = -1
    epsilon: float = 1e-3
    center: bool = True
    scale: bool = True
    beta_initializer: Any = "zeros"
    gamma_initializer: Any = "ones"
    beta_regularizer: Any = None
    gamma_regularizer: Any = None
    beta_constraint: Any = None
    gamma_constraint: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        axes = _axes(self.axis, x.ndim)
        _, bshape, gamma, beta = _scale_and_offset(self, x, axes)
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axes, keepdims=True)
        var = jnp.var(x32, axes, keepdims=True)
        cast = lambda v: None if v is None else v.reshape(bshape).astype(jnp.float32)
        return _normalize(x32, mean, var, cast(gamma), cast(beta), self.epsilon).astype(x.dtype)


@register
class GroupNormalization(FlaxLayer):
    """Normalizes each example over groups of channels, as ``keras.layers.GroupNormalization``.

    Channels (``axis``, default last) split into ``groups`` groups; mean and variance over
    the group's channels and all non-batch axes; ``gamma``/``beta`` per channel. Any shape
    ``[batch, ..., channels]`` in and out.
    """

    groups: int = 32
    axis: int = -1
    epsilon: float = 1e-3
    center: bool = True
    scale: bool = True
    beta_initializer: Any = "zeros"
    gamma_initializer: Any = "ones"
    beta_regularizer: Any = None
    gamma_regularizer: Any = None
    beta_constraint: Any = None
    gamma_constraint: Any = None

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        axis = self.axis % x.ndim
        channels = x.shape[axis]
        if channels % self.groups:
            raise ValueError(f"The channel count {channels} must be divisible by groups. "
                             f"Received: groups={self.groups}")
        gamma = (self.weight("gamma", self.gamma_initializer, (channels,),
                             self.gamma_regularizer) if self.scale else None)
        beta = (self.weight("beta", self.beta_initializer, (channels,), self.beta_regularizer)
                if self.center else None)
        grouped = x.astype(jnp.float32).reshape(
            *x.shape[:axis], self.groups, channels // self.groups, *x.shape[axis + 1:])
        reduce_axes = tuple(a for a in range(1, grouped.ndim) if a != axis)
        mean = jnp.mean(grouped, reduce_axes, keepdims=True)
        var = jnp.var(grouped, reduce_axes, keepdims=True)
        y = ((grouped - mean) * lax.rsqrt(var + self.epsilon)).reshape(x.shape)
        bshape = tuple(channels if a == axis else 1 for a in range(x.ndim))
        if gamma is not None:
            y = y * gamma.reshape(bshape).astype(jnp.float32)
        if beta is not None:
            y = y + beta.reshape(bshape).astype(jnp.float32)
        return y.astype(x.dtype)


@register
class UnitNormalization(FlaxLayer):
    """Scales each sample to unit L2 norm over ``axis`` (an int or axes), as
    ``keras.layers.UnitNormalization``: ``x * min(rsqrt(sum(x^2)), 1e12)``; any shape."""

    axis: Any = -1

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.cast(inputs)
        axes = _axes(self.axis, x.ndim)
        inv_norm = lax.rsqrt(jnp.sum(jnp.square(x), axis=axes, keepdims=True))
        return x * jnp.minimum(inv_norm, 1e12)
