"""Tests for mirrorfit.metrics: Keras formulas, sample weighting and additive statistics."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from mirrorfit import metrics


def np_weighted_mean(values, weights):
    return np.sum(weights * values) / np.sum(weights)


def evaluate(metric, y_true, y_pred, sample_weight=None):
    """update + result on one batch; weights default to 1."""
    if sample_weight is None:
        sample_weight = np.ones(len(y_pred), np.float32)
    stats = metric.update(jnp.asarray(y_true), jnp.asarray(y_pred), jnp.asarray(sample_weight))
    return metric.result(jax.tree.map(np.asarray, stats))


@pytest.fixture
def classification():
    rng = np.random.default_rng(0)
    y_pred = rng.random((24, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=24)
    weights = rng.random(24).astype(np.float32)
    return y_pred, labels, weights


def test_mean_metric_wrapper_is_keras_weighted_mean(classification):
    y_pred, _, weights = classification
    metric = metrics.MeanMetricWrapper(lambda t, p: jnp.sum(p, -1) - t, name="m")
    y_true = np.arange(24, dtype=np.float32)
    values = y_pred.sum(-1) - y_true
    stats = metric.update(y_true, y_pred, jnp.asarray(weights))
    np.testing.assert_allclose(stats["total"], np.sum(weights * values), rtol=1e-6)
    np.testing.assert_allclose(stats["count"], np.sum(weights), rtol=1e-6)
    np.testing.assert_allclose(metric.result(stats), np_weighted_mean(values, weights), rtol=1e-6)


def test_mean_metric_wrapper_ignores_nan_on_zero_weight_padding_rows():
    metric = metrics.MeanMetricWrapper(lambda t, p: jnp.log(p[:, 0]) - t, name="m")
    y_pred = np.array([[1.0], [np.e], [0.0], [-1.0]], np.float32)  # Rows 2, 3: padding.
    weights = np.array([1.0, 3.0, 0.0, 0.0], np.float32)
    result = evaluate(metric, np.zeros(4, np.float32), y_pred, weights)
    np.testing.assert_allclose(result, 0.75, rtol=1e-6)


def test_mean_metric_wrapper_averages_extra_axes_per_example():
    metric = metrics.MeanMetricWrapper(lambda t, p: p - t, name="m")
    y_pred = np.array([[1.0, 3.0], [10.0, 20.0]], np.float32)
    result = evaluate(metric, np.zeros((2, 2), np.float32), y_pred, np.array([1.0, 0.0]))
    np.testing.assert_allclose(result, 2.0, rtol=1e-6)


def test_mean_metric_wrapper_rejects_batch_reduced_values():
    metric = metrics.MeanMetricWrapper(lambda t, p: jnp.mean(p), name="mean_pred")
    with pytest.raises(ValueError, match=r"'mean_pred'.*\[batch\].*Received: values of shape \(\)"):
        metric.update(jnp.zeros(3), jnp.zeros(3), jnp.ones(3))


@pytest.mark.parametrize("as_jax", [False, True])
def test_result_is_zero_not_nan_without_examples(as_jax):
    stats = {"total": np.float32(0.0), "count": np.float32(0.0)}
    if as_jax:
        result = jax.jit(metrics.InferredAccuracy().result)(stats)
    else:
        result = metrics.InferredAccuracy().result(stats)
        assert isinstance(result, np.ndarray)
    assert float(result) == 0.0


@pytest.mark.parametrize("num_replicas", [1, 2, 3, 8])
def test_statistics_psummed_over_replicas_equal_global_batch(classification, num_replicas):
    y_pred, labels, weights = classification
    weights = weights.copy()
    weights[-5:] = 0.0  # Padding rows of a partial global batch.
    metric = metrics.SparseCategoricalAccuracy()
    mesh = Mesh(np.array(jax.devices()[:num_replicas]), ("batch",))

    @jax.jit
    @functools.partial(
        jax.shard_map, mesh=mesh, in_specs=P("batch"), out_specs=P(), check_vma=False
    )
    def replicated_stats(y_true, y_pred, w):
        return jax.lax.psum(metric.update(y_true, y_pred, w), "batch")

    stats = replicated_stats(labels, y_pred, weights)
    correct = (np.argmax(y_pred, -1) == labels).astype(np.float64)
    np.testing.assert_allclose(metric.result(stats), np_weighted_mean(correct, weights), rtol=1e-6)


def test_statistics_add_over_batches(classification):
    y_pred, labels, weights = classification
    metric = metrics.SparseCategoricalAccuracy()
    first = metric.update(labels[:5], y_pred[:5], jnp.asarray(weights[:5]))
    second = metric.update(labels[5:], y_pred[5:], jnp.asarray(weights[5:]))
    summed = jax.tree.map(lambda a, b: np.asarray(a) + np.asarray(b), first, second)
    whole = metric.update(labels, y_pred, jnp.asarray(weights))
    np.testing.assert_allclose(metric.result(summed), metric.result(whole), rtol=1e-6)


@pytest.mark.parametrize("label_shape,label_dtype", [((24,), np.int32), ((24, 1), np.float32)])
def test_accuracy_infers_sparse_from_integer_labels(classification, label_shape, label_dtype):
    y_pred, labels, weights = classification
    correct = np.argmax(y_pred, -1) == labels
    y_true = labels.reshape(label_shape).astype(label_dtype)
    for metric in (metrics.InferredAccuracy(), metrics.SparseCategoricalAccuracy()):
        result = evaluate(metric, y_true, y_pred, weights)
        np.testing.assert_allclose(result, np_weighted_mean(correct, weights), rtol=1e-6)


def test_accuracy_infers_categorical_from_one_hot_labels(classification):
    y_pred, labels, weights = classification
    one_hot = np.eye(4, dtype=np.float32)[labels]
    correct = np.argmax(y_pred, -1) == labels
    for metric in (metrics.InferredAccuracy(), metrics.CategoricalAccuracy()):
        result = evaluate(metric, one_hot, y_pred, weights)
        np.testing.assert_allclose(result, np_weighted_mean(correct, weights), rtol=1e-6)


@pytest.mark.parametrize("pred_shape", [(6,), (6, 1)])
@pytest.mark.parametrize("true_shape", [(6,), (6, 1)])
def test_accuracy_infers_binary_from_single_output(pred_shape, true_shape):
    y_pred = np.array([0.1, 0.6, 0.4, 0.9, 0.5, 0.7], np.float32).reshape(pred_shape)
    y_true = np.array([0, 1, 1, 0, 0, 1], np.float32).reshape(true_shape)
    weights = np.array([1, 1, 1, 1, 1, 0.5], np.float32)
    correct = np.array([1, 1, 0, 0, 1, 1], np.float64)  # 0.5 is not > 0.5.
    for metric in (metrics.InferredAccuracy(), metrics.BinaryAccuracy()):
        result = evaluate(metric, y_true, y_pred, weights)
        np.testing.assert_allclose(result, np_weighted_mean(correct, weights), rtol=1e-6)


def test_keras_accuracy_class_compares_values_exactly():
    y_true = np.array([[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]], np.float32)
    y_pred = np.array([[1.0, 2.5], [3.0, 4.0], [1.0, 0.0]], np.float32)
    np.testing.assert_allclose(evaluate(metrics.Accuracy(), y_true, y_pred), 0.5, rtol=1e-6)


def test_binary_accuracy_threshold_and_multi_label_mean():
    y_pred = np.array([[0.1, 0.8, 0.3], [0.7, 0.2, 0.9]], np.float32)
    y_true = np.array([[0, 1, 1], [1, 0, 0]], np.float32)
    # Threshold 0.25: predictions [[0,1,1],[1,0,1]] -> per example 3/3, 2/3.
    result = evaluate(metrics.BinaryAccuracy(threshold=0.25), y_true, y_pred)
    np.testing.assert_allclose(result, (1 + 2 / 3) / 2, rtol=1e-6)


def test_mse_and_mae_metrics_weighted(classification):
    y_pred, _, weights = classification
    y_true = np.random.default_rng(1).random((24, 4)).astype(np.float32)
    sq = np.mean((y_pred - y_true) ** 2, -1)
    ab = np.mean(np.abs(y_pred - y_true), -1)
    np.testing.assert_allclose(
        evaluate(metrics.MeanSquaredError(), y_true, y_pred, weights),
        np_weighted_mean(sq, weights),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        evaluate(metrics.MeanAbsoluteError(), y_true, y_pred, weights),
        np_weighted_mean(ab, weights),
        rtol=1e-5,
    )


@pytest.mark.parametrize(
    "name,cls",
    [
        ("accuracy", metrics.InferredAccuracy),
        ("acc", metrics.InferredAccuracy),
        ("Accuracy", metrics.InferredAccuracy),
        ("sparse_categorical_accuracy", metrics.SparseCategoricalAccuracy),
        ("categorical_accuracy", metrics.CategoricalAccuracy),
        ("binary_accuracy", metrics.BinaryAccuracy),
        ("mae", metrics.MeanAbsoluteError),
        ("mean_absolute_error", metrics.MeanAbsoluteError),
        ("mse", metrics.MeanSquaredError),
        ("mean_squared_error", metrics.MeanSquaredError),
    ],
)
def test_get_resolves_names_keeping_the_users_spelling(name, cls):
    metric = metrics.get(name)
    assert type(metric) is cls and metric.name == name


def test_get_wraps_callables_and_passes_metrics_through():
    def mean_error(y_true, y_pred):
        return y_pred[:, 0] - y_true

    wrapped = metrics.get(mean_error)
    assert isinstance(wrapped, metrics.MeanMetricWrapper) and wrapped.name == "mean_error"
    result = evaluate(wrapped, np.array([1.0, 2.0]), np.array([[2.0], [6.0]]), np.array([1.0, 1.0]))
    np.testing.assert_allclose(result, 2.5, rtol=1e-6)
    custom = metrics.BinaryAccuracy(name="bin", threshold=0.3)
    assert metrics.get(custom) is custom


def test_get_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match=r"sparse_categorical_accuracy.*Received: metrics='aucc'"):
        metrics.get("aucc")


def test_get_wrong_type_raises_type_error():
    with pytest.raises(TypeError, match=r"Received: metrics=1.5 of type float"):
        metrics.get(1.5)


def test_metric_on_targets_and_outputs_of_different_widths_names_both_shapes():
    # Before: optax's "ValueError: Shape mismatch: got (8, 3) and (8, 2)."
    with pytest.raises(ValueError, match=r"^Metric 'mean_squared_error' could not compare "
                                         r"y_true of shape \(8, 2\) with y_pred of shape "
                                         r"\(8, 3\)"):
        metrics.MeanSquaredError().update_state(np.zeros((8, 2)), np.zeros((8, 3)))
