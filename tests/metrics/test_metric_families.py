"""Keras' metric families through the real ``Model.evaluate`` path, against scikit-learn.

A parameter-free identity model makes the inputs the predictions, so each metric sees exactly
the scores the test chose. 53 rows at global batch 16 leave a partial last batch of 5 rows,
padded differently at 1, 3 and 8 replicas; sample weights are random. Every value must equal
the single-pass NumPy / scikit-learn value over the 53 real rows.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import sklearn.metrics as skm

import mirrorfit as mf
from mirrorfit import metrics

N, C, BATCH = 53, 4, 16
REPLICAS = [1, 3, 8]
_rng = np.random.default_rng(11)
LABELS = np.concatenate([np.arange(C), _rng.integers(0, C, N - C)])  # every class occurs
SCORES = _rng.random((N, C)).astype(np.float32)
WEIGHTS = _rng.uniform(0.1, 2.0, N).astype(np.float32)
BINARY = (_rng.random(N) < 0.4).astype(np.int32)
PROBS = np.clip(0.35 * BINARY + 0.65 * _rng.random(N), 0, 1).astype(np.float32)
PROBS[:3] = [0.0, 1.0, 0.5]  # the ends and a threshold, counted as Keras counts them
RTOL = 1e-5


class Identity(nn.Module):
    @nn.compact
    def __call__(self, x, train=False):
        return x


def zero_loss(y_true, y_pred):
    return jnp.zeros(y_pred.shape[0])


def evaluate(n, metric_list, x, y):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = mf.Model(Identity(), input_shape=x.shape[1:])
    model.compile(optax.sgd(0.1), loss=zero_loss, weighted_metrics=metric_list)
    return model.evaluate(x, y, batch_size=BATCH, sample_weight=WEIGHTS, verbose=0,
                          return_dict=True)


def np_keras_auc_counts(y, p, w, n=200):
    """Keras' bucketed confusion counts at its AUC thresholds, in NumPy."""
    p = np.clip(p.astype(np.float32), 0, 1)
    buckets = np.maximum(np.ceil(p * np.float32(n - 1)) - 1, 0).astype(int)
    tp = np.cumsum(np.bincount(buckets, w * y, n)[::-1])[::-1]
    fp = np.cumsum(np.bincount(buckets, w * (1 - y), n)[::-1])[::-1]
    return tp, fp, np.sum(w * (1 - y)) - fp, np.sum(w * y) - tp


def np_keras_roc_auc(y, p, w):
    tp, fp, tn, fn = np_keras_auc_counts(y, p, w)
    tpr, fpr = tp / (tp + fn), fp / (fp + tn)
    return np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2)


def np_keras_pr_auc(y, p, w):
    """Keras' ``interpolate_pr_auc`` in NumPy."""
    tp, fp, _, fn = np_keras_auc_counts(y, p, w)
    dtp, pos = tp[:-1] - tp[1:], tp + fp
    dp = pos[:-1] - pos[1:]
    slope = np.divide(dtp, np.maximum(dp, 0), out=np.zeros_like(dtp), where=dp > 0)
    intercept = tp[1:] - slope * pos[1:]
    both = (pos[:-1] > 0) & (pos[1:] > 0)
    ratio = np.where(both, pos[:-1] / np.where(both, pos[1:], 1), 1.0)
    denom = np.maximum(tp[1:] + fn[1:], 0)
    num = slope * (dtp + intercept * np.log(ratio))
    return np.sum(np.divide(num, denom, out=np.zeros_like(num), where=denom > 0))


@pytest.mark.parametrize("n", REPLICAS)
def test_accuracy_family_and_mean_iou_with_sparse_labels_equal_sklearn(n):
    logs = evaluate(n, ["accuracy", "sparse_top_k_categorical_accuracy",
                        metrics.SparseTopKCategoricalAccuracy(k=2, name="top2"),
                        metrics.MeanIoU(C, sparse_y_pred=False)], SCORES, LABELS)
    predicted = SCORES.argmax(-1)
    np.testing.assert_allclose(logs["accuracy"], skm.accuracy_score(
        LABELS, predicted, sample_weight=WEIGHTS), rtol=RTOL)
    np.testing.assert_allclose(logs["sparse_top_k_categorical_accuracy"], 1.0, rtol=RTOL)
    np.testing.assert_allclose(logs["top2"], skm.top_k_accuracy_score(
        LABELS, SCORES, k=2, sample_weight=WEIGHTS), rtol=RTOL)
    np.testing.assert_allclose(logs["mean_io_u"], skm.jaccard_score(
        LABELS, predicted, average="macro", sample_weight=WEIGHTS), rtol=RTOL)


@pytest.mark.parametrize("n", REPLICAS)
def test_one_hot_family_f1_precision_recall_topk_equal_sklearn(n):
    one_hot = np.eye(C, dtype=np.float32)[LABELS]
    predicted = SCORES.argmax(-1)
    logs = evaluate(n, [
        "categorical_accuracy", metrics.TopKCategoricalAccuracy(k=2, name="top2"),
        metrics.F1Score(average="macro", name="f1_macro"),
        metrics.F1Score(average="micro", name="f1_micro"),
        metrics.FBetaScore(average="weighted", beta=2.0, name="f2_weighted"),
        metrics.Precision(class_id=1, name="p1"), metrics.Recall(class_id=1, name="r1"),
        metrics.Precision(top_k=2, name="p_top2"), metrics.Recall(top_k=2, name="r_top2"),
    ], SCORES, one_hot)
    sk = {"sample_weight": WEIGHTS}
    np.testing.assert_allclose(logs["categorical_accuracy"],
                               skm.accuracy_score(LABELS, predicted, **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["top2"], skm.top_k_accuracy_score(LABELS, SCORES, k=2, **sk),
                               rtol=RTOL)
    np.testing.assert_allclose(logs["f1_macro"], skm.f1_score(
        LABELS, predicted, average="macro", **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["f1_micro"], skm.f1_score(
        LABELS, predicted, average="micro", **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["f2_weighted"], skm.fbeta_score(
        LABELS, predicted, beta=2.0, average="weighted", **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["p1"], skm.precision_score(
        one_hot[:, 1], SCORES[:, 1] > 0.5, **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["r1"], skm.recall_score(
        one_hot[:, 1], SCORES[:, 1] > 0.5, **sk), rtol=RTOL)
    top2 = np.zeros_like(one_hot)
    np.put_along_axis(top2, np.argsort(-SCORES, -1)[:, :2], 1.0, -1)
    flat_weights = np.repeat(WEIGHTS, C)
    np.testing.assert_allclose(logs["p_top2"], skm.precision_score(
        one_hot.ravel(), top2.ravel(), sample_weight=flat_weights), rtol=RTOL)
    np.testing.assert_allclose(logs["r_top2"], skm.recall_score(
        one_hot.ravel(), top2.ravel(), sample_weight=flat_weights), rtol=RTOL)


@pytest.mark.parametrize("n", REPLICAS)
def test_binary_family_auc_precision_recall_equal_sklearn_and_keras_formula(n):
    logs = evaluate(n, ["binary_accuracy", "auc", metrics.AUC(curve="PR", name="pr_auc"),
                        "precision", "recall"],
                    PROBS[:, None], BINARY)
    sk = {"sample_weight": WEIGHTS}
    np.testing.assert_allclose(logs["binary_accuracy"],
                               skm.accuracy_score(BINARY, PROBS > 0.5, **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["precision"],
                               skm.precision_score(BINARY, PROBS > 0.5, **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["recall"],
                               skm.recall_score(BINARY, PROBS > 0.5, **sk), rtol=RTOL)
    # Keras' formula exactly; scikit-learn's exact area within 200 thresholds' resolution.
    np.testing.assert_allclose(logs["auc"], np_keras_roc_auc(BINARY, PROBS, WEIGHTS), rtol=1e-6)
    np.testing.assert_allclose(logs["pr_auc"], np_keras_pr_auc(BINARY, PROBS, WEIGHTS), rtol=1e-6)
    assert abs(logs["auc"] - skm.roc_auc_score(BINARY, PROBS, **sk)) < 1e-2


@pytest.mark.parametrize("n", REPLICAS)
def test_regression_family_equals_sklearn(n):
    y_true = np.abs(SCORES[::-1].copy()) + 0.1
    logs = evaluate(n, ["mse", "mae", "mape", "msle", metrics.RootMeanSquaredError(),
                        metrics.CosineSimilarity()], SCORES, y_true)
    sk = {"sample_weight": WEIGHTS}
    np.testing.assert_allclose(logs["mse"], skm.mean_squared_error(y_true, SCORES, **sk),
                               rtol=RTOL)
    np.testing.assert_allclose(logs["root_mean_squared_error"],
                               np.sqrt(skm.mean_squared_error(y_true, SCORES, **sk)), rtol=RTOL)
    np.testing.assert_allclose(logs["mae"], skm.mean_absolute_error(y_true, SCORES, **sk),
                               rtol=RTOL)
    np.testing.assert_allclose(logs["mape"], 100 * skm.mean_absolute_percentage_error(
        y_true, SCORES, **sk), rtol=RTOL)
    np.testing.assert_allclose(logs["msle"], skm.mean_squared_log_error(y_true, SCORES, **sk),
                               rtol=RTOL)
    cosine = np.sum(y_true * SCORES, -1) / (np.linalg.norm(y_true, axis=-1)
                                             * np.linalg.norm(SCORES, axis=-1))
    np.testing.assert_allclose(logs["cosine_similarity"],
                               np.average(cosine, weights=WEIGHTS), rtol=RTOL)
