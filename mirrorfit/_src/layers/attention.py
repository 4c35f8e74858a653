"""Multi-head attention with Keras' weight layout, on ``jax.nn.dot_product_attention``.

Weights, as ``keras.layers.MultiHeadAttention``'s EinsumDense sublayers: ``query/kernel
[query_dim, num_heads, key_dim]``, ``query/bias [num_heads, key_dim]``, ``key/...`` and
``value/...`` likewise (value with ``value_dim``), ``attention_output/kernel [num_heads,
value_dim, output_dim]`` and ``attention_output/bias [output_dim]``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import FlaxLayer, register


class _EinsumDense(FlaxLayer):
    """``einsum(equation, x, kernel) + bias`` (a Keras ``EinsumDense`` without activation)."""

    equation: str
    kernel_shape: tuple[int, ...]
    bias_shape: tuple[int, ...] | None
    kernel_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    bias_regularizer: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.weight("kernel", self.kernel_initializer, self.kernel_shape,
                             self.kernel_regularizer)
        y = jnp.einsum(self.equation, self.cast(x), kernel)
        if self.bias_shape is not None:
            y = y + self.weight("bias", self.bias_initializer, self.bias_shape,
                                self.bias_regularizer)
        return y


def _attention_mask(attention_mask: Any, query_mask: Any, value_mask: Any, key_mask: Any
                    ) -> jax.Array | None:
    """``attention_mask`` and'ed with the Keras masks of query ``[B, T]`` (as ``[B, T, 1]``),
    value and key ``[B, S]`` (as ``[B, 1, S]``), as Keras' ``_compute_attention_mask``."""
    masks = [None if attention_mask is None else jnp.asarray(attention_mask, bool)]
    if query_mask is not None:
        masks.append(jnp.asarray(query_mask, bool)[:, :, None])
    masks += [jnp.asarray(m, bool)[:, None, :] for m in (value_mask, key_mask) if m is not None]
    present = [m for m in masks if m is not None]
    if not present:
        return None
    combined = present[0]
    for m in present[1:]:
        combined = combined & m
    return combined


@register
class MultiHeadAttention(FlaxLayer):
    """Scaled dot-product attention over ``num_heads`` heads, as
    ``keras.layers.MultiHeadAttention``.

    ``__call__(query, value, key=None, attention_mask=None, return_attention_scores=False,
    training=False, use_causal_mask=False)``: ``query [batch, T, query_dim]``, ``value
    [batch, S, value_in]``, ``key`` (default ``value``) ``[batch, S, key_in]``,
    ``attention_mask`` bool ``[batch, T, S]`` (True attends), and'ed with the Keras masks
    ``query_mask [batch, T]``, ``value_mask``/``key_mask [batch, S]`` (given, or the masks of
    ``query``, ``value`` and ``key`` in a model, as Keras). Output ``[batch, T,
    output_dim]`` (``output_shape`` or ``query_dim``); with ``return_attention_scores`` also
    the softmax scores ``[batch, num_heads, T, S]``. Scores are ``q . k / sqrt(key_dim)``;
    ``dropout`` applies to the scores in training, from the ``"dropout"`` RNG stream (``seed``
    is accepted for Keras code but does not pick the stream).
    """

    supports_masking: ClassVar[bool] = True  # the output has the query's mask

    num_heads: int
    key_dim: int
    value_dim: int | None = None
    dropout: float = 0.0
    use_bias: bool = True
    output_shape: int | None = None
    kernel_initializer: Any = "glorot_uniform"
    bias_initializer: Any = "zeros"
    kernel_regularizer: Any = None
    bias_regularizer: Any = None
    activity_regularizer: Any = None
    seed: int | None = None

    def _projection(self, name: str, equation: str, kernel_shape, bias_shape) -> _EinsumDense:
        return _EinsumDense(equation, tuple(kernel_shape),
                            tuple(bias_shape) if self.use_bias else None,
                            self.kernel_initializer, self.bias_initializer,
                            self.kernel_regularizer, self.bias_regularizer,
                            dtype=self.dtype, name=name)

    @nn.compact
    def __call__(self, query: jax.Array, value: jax.Array, key: jax.Array | None = None,
                 attention_mask: jax.Array | None = None,
                 return_attention_scores: bool = False, training: bool = False,
                 use_causal_mask: bool = False, query_mask: jax.Array | None = None,
                 value_mask: jax.Array | None = None, key_mask: jax.Array | None = None
                 ) -> Any:
        if key is None:
            key, key_mask = value, value_mask if key_mask is None else key_mask
        attention_mask = _attention_mask(attention_mask, query_mask, value_mask, key_mask)
        for name, x in (("query", query), ("value", value), ("key", key)):
            if jnp.ndim(x) != 3:
                raise ValueError(f"MultiHeadAttention expects {name} [batch, length, dim]. "
                                 f"Received: {name}.shape={jnp.shape(x)}")
        heads, kd = self.num_heads, self.key_dim
        vd = self.value_dim or kd
        out_dim = self.output_shape or query.shape[-1]
        q = self._projection("query", "btd,dnh->btnh", (query.shape[-1], heads, kd),
                             (heads, kd))(query)
        k = self._projection("key", "bsd,dnh->bsnh", (key.shape[-1], heads, kd),
                             (heads, kd))(key)
        v = self._projection("value", "bsd,dnh->bsnh", (value.shape[-1], heads, vd),
                             (heads, vd))(value)
        mask = None if attention_mask is None else jnp.asarray(attention_mask, bool)[:, None]
        scale = 1.0 / math.sqrt(kd)
        use_dropout = training and self.dropout > 0
        if return_attention_scores or use_dropout or vd != kd:
            logits = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
            if use_causal_mask:
                causal = jnp.tril(jnp.ones(logits.shape[-2:], bool))
                mask = causal if mask is None else mask & causal
            if mask is not None:
                logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
            scores = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(q.dtype)
            probs = scores
            if use_dropout:
                keep = jax.random.bernoulli(self.make_rng("dropout"), 1 - self.dropout,
                                            scores.shape)
                probs = jnp.where(keep, scores / (1 - self.dropout), 0)
            attended = jnp.einsum("bnts,bsnh->btnh", probs, v)
        else:
            scores = None
            attended = jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale,
                                                    is_causal=use_causal_mask)
        y = self._projection("attention_output", "btnh,nho->bto", (heads, vd, out_dim),
                             (out_dim,))(attended)
        y = self.activity(y)
        return (y, scores) if return_attention_scores else y
