"""Keras 3's ``keras.random`` draws on ``jax.random``, as Keras' JAX backend computes them.

Every draw takes Keras' ``seed=``: an int (the same values every call), ``None`` or a
`SeedGenerator` (new values every draw), or a ``jax.random`` key; `seed_generator` says
where the keys come from. Float draws default to float32 (Keras' ``floatx``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.ops.wrapping import read_variables
from mirrorfit._src.random.seed_generator import draw_seed

Shape = Sequence[int]


def normal(shape: Shape, mean: float = 0.0, stddev: float = 1.0, dtype: Any = None,
           seed: Any = None) -> jax.Array:
    """Samples from a normal distribution, as ``keras.random.normal``.

    Args:
        shape: the output's shape.
        mean, stddev: the distribution's mean and standard deviation.
        dtype: a float dtype (default float32).
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array: ``jax.random.normal(key) * stddev + mean``.

    Example:
        >>> mf.random.normal((2, 3), seed=1).shape
        (2, 3)
    """
    return jax.random.normal(draw_seed(seed), tuple(shape), _float(dtype)) * stddev + mean


def uniform(shape: Shape, minval: float = 0.0, maxval: float = 1.0, dtype: Any = None,
            seed: Any = None) -> jax.Array:
    """Samples uniformly from ``[minval, maxval)``, as ``keras.random.uniform``.

    Args:
        shape: the output's shape.
        minval, maxval: the bounds.
        dtype: a float dtype (default float32).
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array.
    """
    return jax.random.uniform(draw_seed(seed), tuple(shape), _float(dtype), minval, maxval)


def randint(shape: Shape, minval: int, maxval: int, dtype: Any = "int32",
            seed: Any = None) -> jax.Array:
    """Samples integers uniformly from ``[minval, maxval)``, as ``keras.random.randint``.

    Args:
        shape: the output's shape.
        minval, maxval: the bounds (``maxval`` excluded).
        dtype: an integer dtype.
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array of ``dtype``.
    """
    return jax.random.randint(draw_seed(seed), tuple(shape), minval, maxval, dtype)


def truncated_normal(shape: Shape, mean: float = 0.0, stddev: float = 1.0, dtype: Any = None,
                     seed: Any = None) -> jax.Array:
    """Samples a normal distribution truncated to two standard deviations from the mean, as
    ``keras.random.truncated_normal``.

    Args:
        shape: the output's shape.
        mean, stddev: the mean and standard deviation before truncation.
        dtype: a float dtype (default float32).
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array in ``[mean - 2 * stddev, mean + 2 * stddev]``.
    """
    sample = jax.random.truncated_normal(draw_seed(seed), -2.0, 2.0, tuple(shape), _float(dtype))
    return sample * stddev + mean


def dropout(inputs: Any, rate: float, noise_shape: Sequence[int | None] | None = None,
            seed: Any = None) -> jax.Array:
    """Zeroes entries with probability ``rate`` and scales the rest by ``1 / (1 - rate)``, as
    ``keras.random.dropout``.

    Args:
        inputs: array of any shape (a `Variable` is read).
        rate: the probability of dropping an entry, in ``[0, 1]``.
        noise_shape: the shape of the keep mask, broadcast to ``inputs`` (``None`` entries
            take ``inputs``' size); default ``inputs``' shape.
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        Array of ``inputs``' shape and dtype.
    """
    inputs = jnp.asarray(read_variables(inputs))
    if rate == 1.0:
        return jnp.zeros_like(inputs)
    if rate == 0.0:
        return inputs
    keep = 1.0 - rate
    shape = inputs.shape if noise_shape is None else tuple(
        inputs.shape[i] if size is None else size for i, size in enumerate(noise_shape))
    mask = jnp.broadcast_to(jax.random.bernoulli(draw_seed(seed), keep, shape), inputs.shape)
    return jax.lax.select(mask, inputs / keep, jnp.zeros_like(inputs))


def shuffle(x: Any, axis: int = 0, seed: Any = None) -> jax.Array:
    """Permutes ``x`` along ``axis``, as ``keras.random.shuffle``.

    The slices along ``axis`` move whole (rows stay rows), as ``tf.random.shuffle`` and
    Keras' other backends; Keras' JAX backend shuffles each slice on its own.

    Args:
        x: array (a `Variable` is read).
        axis: the axis to permute.
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        Array of ``x``'s shape.
    """
    return jax.random.permutation(draw_seed(seed), read_variables(x), axis)


def categorical(logits: Any, num_samples: int, dtype: Any = "int32",
                seed: Any = None) -> jax.Array:
    """Samples class indices from unnormalized log-probabilities, as
    ``keras.random.categorical``.

    Args:
        logits: ``[batch, num_classes]`` (a `Variable` is read).
        num_samples: samples per row.
        dtype: an integer dtype.
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[batch, num_samples]`` indices in ``[0, num_classes)``.
    """
    logits = jnp.asarray(read_variables(logits))
    shape = (logits.shape[0], num_samples)
    return jax.random.categorical(draw_seed(seed), logits[..., None], axis=1,
                                  shape=shape).astype(dtype)


def gamma(shape: Shape, alpha: Any, dtype: Any = None, seed: Any = None) -> jax.Array:
    """Samples a gamma distribution of shape ``alpha`` (scale 1), as ``keras.random.gamma``.

    Args:
        shape: the output's shape.
        alpha: the shape parameter, broadcast to ``shape``.
        dtype: a float dtype (default float32).
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array.
    """
    return jax.random.gamma(draw_seed(seed), read_variables(alpha), tuple(shape), _float(dtype))


def binomial(shape: Shape, counts: Any, probabilities: Any, dtype: Any = None,
             seed: Any = None) -> jax.Array:
    """Samples a binomial distribution, as ``keras.random.binomial``.

    Args:
        shape: the output's shape.
        counts: the number of trials, broadcast to ``shape``.
        probabilities: the success probability, broadcast to ``shape``.
        dtype: a float dtype (default float32).
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array of success counts.
    """
    counts, probabilities = read_variables((counts, probabilities))
    return jax.random.binomial(draw_seed(seed), jnp.asarray(counts), jnp.asarray(probabilities),
                               tuple(shape), _float(dtype))


def beta(shape: Shape, alpha: Any, beta: Any, dtype: Any = None, seed: Any = None) -> jax.Array:
    """Samples a beta distribution, as ``keras.random.beta``.

    Args:
        shape: the output's shape.
        alpha, beta: the distribution's parameters, broadcast to ``shape``.
        dtype: a float dtype (default float32).
        seed: an int, ``None``, a `SeedGenerator` or a ``jax.random`` key.

    Returns:
        ``[*shape]`` array in ``[0, 1]``.
    """
    alpha, beta = read_variables((alpha, beta))
    return jax.random.beta(draw_seed(seed), jnp.asarray(alpha), jnp.asarray(beta),
                           tuple(shape), _float(dtype))


def _float(dtype: Any) -> Any:
    return jnp.float32 if dtype is None else dtype
