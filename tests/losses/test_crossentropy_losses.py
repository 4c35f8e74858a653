"""The integer-label crossentropy from logits: optax's values and gradients, no scatter."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mirrorfit import losses, metrics
from mirrorfit._src.losses.crossentropy_losses import softmax_crossentropy_with_integer_labels

RTOL = 1e-6  # issue 42: loss and gradient equal optax's to rtol 1e-6 (they are bit-equal)


def _logits_and_labels(label_shape, classes=11, seed=0):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(*label_shape, classes)) * 4, jnp.float32)
    labels = rng.integers(0, classes, label_shape)
    labels.flat[0] = -1  # counts from the end, as jnp.take_along_axis (and so optax)
    return logits, jnp.asarray(labels, jnp.int32), jnp.asarray(rng.uniform(size=label_shape))


def _weighted_sum(fn, labels, weights):
    return lambda logits: jnp.sum(fn(logits, labels) * weights)


@pytest.mark.parametrize("label_shape", [(6,), (3, 5)])
def test_integer_label_crossentropy_equals_optax_loss_and_gradient(label_shape):
    logits, labels, weights = _logits_and_labels(label_shape)
    ours = jax.jit(jax.value_and_grad(_weighted_sum(
        softmax_crossentropy_with_integer_labels, labels, weights)))(logits)
    optax_ = jax.jit(jax.value_and_grad(_weighted_sum(
        optax.losses.softmax_cross_entropy_with_integer_labels, labels, weights)))(logits)
    np.testing.assert_allclose(ours[0], optax_[0], rtol=RTOL)
    np.testing.assert_allclose(ours[1], optax_[1], rtol=RTOL, atol=0)
    np.testing.assert_allclose(softmax_crossentropy_with_integer_labels(logits, labels),
                               optax.losses.softmax_cross_entropy_with_integer_labels(
                                   logits, labels), rtol=RTOL)


def _optax_sparse(y_true, logits, axis=-1):
    """Today's path written out: classes moved last, labels squeezed and cast, optax's loss."""
    logits = jnp.moveaxis(jnp.asarray(logits, jnp.float32), axis, -1)
    labels = jnp.asarray(y_true)
    if labels.ndim == logits.ndim:
        labels = labels[..., 0]
    return optax.losses.softmax_cross_entropy_with_integer_labels(logits, labels.astype(jnp.int32))


@pytest.mark.parametrize("case", ["rank1", "column", "float_labels", "sequence", "axis1"])
def test_sparse_crossentropy_from_logits_paths_equal_optax_with_sample_weights(case):
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=(4, 6, 9) if case in ("sequence", "axis1")
                                    else (4, 9)) * 3, jnp.float32)
    axis = 1 if case == "axis1" else -1
    classes = logits.shape[axis]
    labels = rng.integers(0, classes, (4, 9) if case == "axis1" else logits.shape[:-1])
    y_true = {"column": labels[:, None], "float_labels": labels.astype(np.float32)}.get(
        case, labels)
    weights = jnp.asarray(rng.uniform(size=4), jnp.float32)
    loss = losses.SparseCategoricalCrossentropy(from_logits=True, axis=axis)
    metric = metrics.SparseCategoricalCrossentropy(from_logits=True, axis=axis)
    reference = jax.value_and_grad(
        lambda p: jnp.sum(_optax_sparse(y_true, p, axis).reshape(4, -1).mean(-1) * weights)
        / 4)(logits)
    paths = {
        "class": lambda p: loss(y_true, p, sample_weight=weights),
        "per_example": lambda p: jnp.sum(loss.per_example(y_true, p) * weights) / 4,
        "function": lambda p: jnp.sum(jnp.mean(losses.sparse_categorical_crossentropy(
            y_true, p, from_logits=True, axis=axis).reshape(4, -1), -1) * weights) / 4,
        "compile": lambda p: jnp.sum(losses.get(loss)(y_true, p) * weights) / 4,
    }
    for name, path in paths.items():
        value, grad = jax.jit(jax.value_and_grad(path))(logits)
        np.testing.assert_allclose(value, reference[0], rtol=RTOL, err_msg=name)
        np.testing.assert_allclose(grad, reference[1], rtol=RTOL, atol=1e-9, err_msg=name)
    metric.update_state(y_true, logits, sample_weight=weights)
    expected = jnp.sum(_optax_sparse(y_true, logits, axis).reshape(4, -1).mean(-1) * weights)
    np.testing.assert_allclose(metric.result(), expected / jnp.sum(weights), rtol=RTOL)


def test_sparse_crossentropy_of_bf16_logits_equals_optax_on_their_float32_values():
    logits, labels, _ = _logits_and_labels((8,))
    half = logits.astype(jnp.bfloat16)
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    value, grad = jax.value_and_grad(lambda p: loss(labels, p))(half)
    ref_value, ref_grad = jax.value_and_grad(lambda p: jnp.mean(
        optax.losses.softmax_cross_entropy_with_integer_labels(p.astype(jnp.float32), labels)))(
            half)
    assert grad.dtype == jnp.bfloat16
    np.testing.assert_allclose(value, ref_value, rtol=RTOL)
    np.testing.assert_array_equal(np.asarray(grad, np.float32), np.asarray(ref_grad, np.float32))


def test_integer_label_crossentropy_gradient_lowers_to_no_scatter_for_cuda():
    logits, labels, _ = _logits_and_labels((4, 16), classes=128)

    def cuda_text(fn):
        grad = jax.grad(lambda p: jnp.mean(fn(p, labels)))
        return jax.jit(grad).trace(logits).lower(lowering_platforms=("cuda",)).as_text()

    assert "stablehlo.scatter" in cuda_text(optax.losses.softmax_cross_entropy_with_integer_labels)
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    assert "stablehlo.scatter" not in cuda_text(lambda p, y: loss.per_example(y, p))
