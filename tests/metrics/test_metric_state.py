"""Keras' stateful metric API (update_state / result / reset_state) for custom loops.

The loop follows the TF custom-training tutorial: a distributed dataset with a partial last
batch, ``strategy.run`` per step, and metrics updated with what it returns. Padding rows of
the partial batch must not count; results must equal NumPy / scikit-learn over the real rows.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sklearn.metrics as skm

import mirrorfit as mf
from mirrorfit import metrics

N, C, BATCH = 29, 3, 8  # batches of 8, 8, 8 and a partial 5
_rng = np.random.default_rng(3)
X = _rng.normal(size=(N, C)).astype(np.float32)
Y = np.concatenate([np.arange(C), _rng.integers(0, C, N - C)]).astype(np.int32)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("n", [1, 3, 8])
def test_custom_loop_metrics_with_partial_last_batch_equal_numpy(n):
    strategy = mf.MirroredStrategy(jax.devices()[:n])
    dataset = strategy.experimental_distribute_dataset(
        [(X[i:i + BATCH], Y[i:i + BATCH]) for i in range(0, N, BATCH)])

    def step(batch):
        x, y = batch
        probs = jax.nn.softmax(x)
        loss = mf.losses.get("sparse_categorical_crossentropy")(y, probs)
        return probs, loss, y, jax.nn.one_hot(y, C), y == 0, probs[:, :1]

    accuracy = metrics.SparseCategoricalAccuracy()
    accuracy_of_per_replica_labels = metrics.SparseCategoricalAccuracy()
    train_loss = metrics.Mean(name="train_loss")
    f1 = metrics.F1Score()
    auc = metrics.AUC(curve="PR")
    for batch in dataset:
        probs, loss, labels, one_hot, is_zero, first = strategy.run(step, args=(batch,))
        accuracy.update_state(batch[1], probs)  # labels: the distributed batch
        accuracy_of_per_replica_labels.update_state(labels, probs)  # labels: PerReplica
        train_loss.update_state(loss)
        f1.update_state(one_hot, probs)
        auc.update_state(is_zero, first)

    probs = _softmax(X.astype(np.float64))
    expected_accuracy = np.mean(probs.argmax(-1) == Y)
    assert accuracy.name == "sparse_categorical_accuracy"
    np.testing.assert_allclose(accuracy.result(), expected_accuracy, rtol=1e-6)
    np.testing.assert_allclose(accuracy_of_per_replica_labels.result(), expected_accuracy,
                               rtol=1e-6)
    np.testing.assert_allclose(train_loss.result(), np.mean(-np.log(probs[np.arange(N), Y])),
                               rtol=1e-5)
    np.testing.assert_allclose(f1.result(), skm.f1_score(Y, probs.argmax(-1), average=None),
                               rtol=1e-5)
    reference = metrics.AUC(curve="PR")
    reference.update_state(Y == 0, probs[:, :1].astype(np.float32))  # one batch, no padding
    np.testing.assert_allclose(auc.result(), reference.result(), rtol=1e-6)
    train_loss.reset_state()
    assert float(train_loss.result()) == 0.0


def test_update_state_accumulates_numpy_batches_with_weights_and_resets():
    metric = metrics.MeanSquaredError()
    assert float(metric.result()) == 0.0  # before any update, as Keras' zero variables
    y_true, y_pred = np.zeros((5, 2), np.float32), np.arange(10, dtype=np.float32).reshape(5, 2)
    weights = np.array([1.0, 2.0, 0.0, 1.0, 1.0], np.float32)
    metric.update_state(y_true[:2], y_pred[:2], sample_weight=weights[:2])
    value = metric(y_true[2:], y_pred[2:], sample_weight=weights[2:])  # Keras' __call__
    per_example = np.mean(y_pred**2, -1)
    np.testing.assert_allclose(value, np.average(per_example, weights=weights), rtol=1e-6)
    np.testing.assert_allclose(metric.result(), value, rtol=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0
    metric.update_state(jnp.asarray(y_true[:1]), jnp.asarray(y_pred[:1]))
    np.testing.assert_allclose(metric.result(), per_example[0], rtol=1e-6)


def test_update_state_unwraps_mirrored_values():
    strategy = mf.MirroredStrategy(jax.devices()[:2])
    y_true = strategy.replicate(np.array([0.0, 1.0, 1.0], np.float32))
    y_pred = strategy.replicate(np.array([0.2, 0.9, 0.3], np.float32))
    metric = metrics.BinaryAccuracy()
    metric.update_state(y_true, y_pred)
    np.testing.assert_allclose(metric.result(), 2 / 3, rtol=1e-6)


def test_update_state_rows_mismatch_raises_value_error():
    with pytest.raises(ValueError, match=r"'precision'.*same number of rows.*y_pred with 2"):
        metrics.Precision().update_state(np.zeros(3), np.zeros(2))


def test_vector_results_per_threshold_and_confusion_counts_equal_sklearn():
    y = (_rng.random(40) < 0.5).astype(np.int32)
    p = _rng.random(40).astype(np.float32)
    w = _rng.uniform(0.5, 1.5, 40).astype(np.float32)
    precision = metrics.Precision(thresholds=[0.3, 0.7])
    precision.update_state(y, p, sample_weight=w)
    expected = [skm.precision_score(y, p > t, sample_weight=w) for t in (0.3, 0.7)]
    np.testing.assert_allclose(precision.result(), expected, rtol=1e-6)
    tn, fp, fn, tp = skm.confusion_matrix(y, p > 0.5, sample_weight=w).ravel()
    for cls, want in [(metrics.TruePositives, tp), (metrics.FalsePositives, fp),
                      (metrics.TrueNegatives, tn), (metrics.FalseNegatives, fn)]:
        metric = cls()
        metric.update_state(y, p, sample_weight=w)
        np.testing.assert_allclose(metric.result(), want, rtol=1e-6)


def test_auc_variants_follow_keras_options():
    y = (_rng.random((60, 2)) < 0.5).astype(np.float32)
    logits = _rng.normal(size=(60, 2)).astype(np.float32) + 1.5 * y
    probs = 1 / (1 + np.exp(-logits))
    multi = metrics.AUC(multi_label=True, from_logits=True)
    multi.update_state(y, logits)
    per_label = [skm.roc_auc_score(y[:, j], probs[:, j]) for j in range(2)]
    assert abs(float(multi.result()) - np.mean(per_label)) < 1e-2
    pooled = metrics.AUC()
    pooled.update_state(y, probs)
    assert abs(float(pooled.result()) - skm.roc_auc_score(y.ravel(), probs.ravel())) < 1e-2
    # Explicit thresholds take the compare-every-threshold path; away from the thresholds it
    # counts as the bucketed path does.
    explicit = metrics.AUC(thresholds=[i / 9 for i in range(1, 9)])
    bucketed = metrics.AUC(num_thresholds=10)
    for metric in (explicit, bucketed):
        metric.update_state(y, probs)
    np.testing.assert_allclose(explicit.result(), bucketed.result(), rtol=1e-6)
    for method in ("majoring", "minoring"):
        value = metrics.AUC(curve="PR", summation_method=method)
        value.update_state(y, probs)
        assert 0.0 < float(value.result()) <= 1.0
    majoring, minoring = (metrics.AUC(summation_method=m) for m in ("majoring", "minoring"))
    for metric in (majoring, minoring):
        metric.update_state(y, probs)
    assert float(minoring.result()) <= float(pooled.result()) <= float(majoring.result())


def test_auc_rejects_bad_arguments_naming_them():
    with pytest.raises(ValueError, match=r"curve must be one of.*Received: curve='RO'"):
        metrics.AUC(curve="RO")
    with pytest.raises(ValueError, match=r"Received: num_thresholds=1"):
        metrics.AUC(num_thresholds=1)
    with pytest.raises(ValueError, match=r"average must be one of.*Received: average='mean'"):
        metrics.F1Score(average="mean")


ALL_METRICS = [
    metrics.Mean(), metrics.Sum(), metrics.Accuracy(), metrics.BinaryAccuracy(threshold=0.3),
    metrics.CategoricalAccuracy(), metrics.SparseCategoricalAccuracy(),
    metrics.TopKCategoricalAccuracy(k=3), metrics.SparseTopKCategoricalAccuracy(k=2),
    metrics.Precision(thresholds=0.4, class_id=1), metrics.Recall(top_k=2),
    metrics.TruePositives(), metrics.FalsePositives(), metrics.TrueNegatives(),
    metrics.FalseNegatives(), metrics.AUC(curve="PR", num_thresholds=50),
    metrics.F1Score(average="macro"), metrics.FBetaScore(beta=2.0), metrics.MeanIoU(3),
    metrics.IoU(3, [0, 2]), metrics.OneHotMeanIoU(3), metrics.OneHotIoU(3, [1]),
    metrics.MeanSquaredError(), metrics.RootMeanSquaredError(), metrics.MeanAbsoluteError(),
    metrics.MeanAbsolutePercentageError(), metrics.MeanSquaredLogarithmicError(),
    metrics.CosineSimilarity(axis=-1), metrics.LogCoshError(), metrics.KLDivergence(),
    metrics.Poisson(), metrics.Hinge(), metrics.SquaredHinge(), metrics.CategoricalHinge(),
    metrics.BinaryCrossentropy(from_logits=True), metrics.CategoricalCrossentropy(),
    metrics.SparseCategoricalCrossentropy(),
]


@pytest.mark.parametrize("metric", ALL_METRICS, ids=lambda m: type(m).__name__)
def test_get_config_round_trips(metric):
    rebuilt = type(metric).from_config(metric.get_config())
    assert type(rebuilt) is type(metric) and rebuilt.get_config() == metric.get_config()
    assert metrics.deserialize(metrics.serialize(metric)).get_config() == metric.get_config()


@pytest.mark.parametrize("cls,name", [
    (metrics.AUC, "auc"), (metrics.Precision, "precision"), (metrics.Recall, "recall"),
    (metrics.F1Score, "f1_score"), (metrics.FBetaScore, "fbeta_score"),
    (metrics.RootMeanSquaredError, "root_mean_squared_error"), (metrics.Mean, "mean"),
    (metrics.TopKCategoricalAccuracy, "top_k_categorical_accuracy"),
    (metrics.TruePositives, "true_positives"), (metrics.LogCoshError, "logcosh")])
def test_default_names_are_keras_names(cls, name):
    assert cls().name == name


@pytest.mark.parametrize("alias,cls", [
    ("AUC", metrics.AUC), ("auc", metrics.AUC), ("precision", metrics.Precision),
    ("Recall", metrics.Recall), ("top_k_categorical_accuracy", metrics.TopKCategoricalAccuracy),
    ("sparse_top_k_categorical_accuracy", metrics.SparseTopKCategoricalAccuracy),
    ("f1_score", metrics.F1Score), ("mape", metrics.MeanAbsolutePercentageError),
    ("msle", metrics.MeanSquaredLogarithmicError), ("bce", metrics.BinaryCrossentropy),
    ("root_mean_squared_error", metrics.RootMeanSquaredError),
    ("cosine_similarity", metrics.CosineSimilarity)])
def test_get_resolves_keras_aliases_named_as_written(alias, cls):
    metric = metrics.get(alias)
    assert type(metric) is cls and metric.name == alias


def test_get_explains_metrics_it_cannot_build_from_a_name():
    with pytest.raises(ValueError, match=r"MeanIoU needs arguments.*mf.metrics.MeanIoU"):
        metrics.get("mean_io_u")
    with pytest.raises(ValueError, match=r"Mean and Sum .*Received: metrics='mean'"):
        metrics.get("mean")


def test_custom_metric_subclass_gets_the_stateful_api():
    class MaxError(metrics.Metric):
        def update(self, y_true, y_pred, sample_weight):
            errors = jnp.where(sample_weight > 0, jnp.abs(y_true - y_pred), 0.0)
            return {"total": jnp.sum(errors), "count": jnp.sum(sample_weight > 0)}

        def result(self, stats):
            return metrics.divide_no_nan(stats["total"], stats["count"])

    metric = MaxError()
    assert metric.name == "max_error"
    metric.update_state(np.array([1.0, 2.0]), np.array([2.0, 0.0]))
    metric.update_state(np.array([0.0]), np.array([3.0]), sample_weight=np.array([1.0]))
    np.testing.assert_allclose(metric.result(), 2.0, rtol=1e-6)
    np.testing.assert_allclose(metric.result({"total": 3.0, "count": 2.0}), 1.5, rtol=1e-6)
