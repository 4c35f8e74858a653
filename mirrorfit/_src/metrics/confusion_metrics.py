"""Keras' confusion-matrix metrics: counts at thresholds, Precision, Recall and AUC.

Their sufficient statistics are weighted counts of true/false positives/negatives at each
threshold, so they add up exactly over replicas and batches. The counting follows Keras'
``update_confusion_matrix_variables`` (``keras/src/metrics/metrics_utils.py``): a prediction
is positive at threshold ``t`` when ``y_pred > t``; labels are positive when non-zero;
``top_k`` keeps only the ``k`` highest scores per example (the others become ``-1e10``), then
``class_id`` picks one class. Evenly spaced thresholds (AUC's default) count by bucketing
each prediction once, as Keras' optimized path, instead of comparing with every threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.losses.loss import EPSILON, squeeze_or_expand_to_same_rank
from mirrorfit._src.metrics.metric import Metric, array_namespace, divide_no_nan

NEG_INF = -1e10
"""Keras' score for classes outside the top ``k``, and the default threshold with ``top_k``."""

_KINDS = ("true_positives", "false_positives", "true_negatives", "false_negatives")


def _thresholds_list(thresholds: float | Sequence[float] | None, default: float) -> list[float]:
    """Keras' ``parse_init_thresholds``: a list of thresholds in ``[0, 1]``.

    Raises:
        ValueError: for a threshold outside ``[0, 1]``.
    """
    if thresholds is None:
        return [default]
    values = [float(t) for t in (thresholds if isinstance(thresholds, (list, tuple, np.ndarray))
                                 else [cast(float, thresholds)])]  # one; float() rejects others
    if any(not 0.0 <= t <= 1.0 for t in values):
        raise ValueError("thresholds must be in [0, 1], as Keras requires. "
                         f"Received: thresholds={thresholds!r}")
    return values


def _evenly_spaced(thresholds: Sequence[float]) -> bool:
    """Keras' ``is_evenly_distributed_thresholds``: ``i / (n - 1)`` for ``n >= 3``."""
    n = len(thresholds)
    even = np.arange(n, dtype=np.float32) / max(n - 1, 1)
    return n >= 3 and bool(np.allclose(thresholds, even, atol=EPSILON))


def _filter_top_k(y_pred: jax.Array, k: int) -> jax.Array:
    """Keeps the ``k`` highest scores of the last axis; the others become `NEG_INF`."""
    _, indices = jax.lax.top_k(y_pred, k)
    keep = jnp.sum(jax.nn.one_hot(indices, y_pred.shape[-1], dtype=y_pred.dtype), axis=-2)
    return y_pred * keep + NEG_INF * (1.0 - keep)


def _bucket_counts(positive: jax.Array, weight: jax.Array, y_pred: jax.Array,
                   num_thresholds: int, with_epsilon: bool) -> jax.Array:
    """Weighted counts of ``positive`` rows with ``y_pred`` above each even threshold.

    Keras' optimized path: each prediction falls in bucket ``ceil(p (n - 1)) - 1``; the count
    at threshold ``i`` is the sum over buckets ``>= i`` (a reversed cumulative sum). Arrays are
    ``[rows]`` or ``[rows, labels]``; the result is ``[n]`` or ``[n, labels]``.
    """
    y_pred = jnp.nan_to_num(jnp.clip(y_pred, 0.0, 1.0))  # nan only on zero-weight padding
    buckets = jnp.ceil(y_pred * (num_thresholds - 1)) - 1
    if with_epsilon:
        buckets = jnp.maximum(buckets, 0)
    buckets = buckets.astype(jnp.int32)
    data = jnp.where(positive, weight, 0.0)

    def per_column(data, buckets):
        # Ids outside [0, n) (p = 0 without an epsilon threshold) are dropped, as Keras.
        counts = jax.ops.segment_sum(data, buckets, num_segments=num_thresholds)
        return jnp.flip(jnp.cumsum(jnp.flip(counts)))

    if data.ndim == 1:
        return per_column(data, buckets)
    return jax.vmap(per_column, in_axes=1, out_axes=1)(data, buckets)


def confusion_counts(y_true: jax.Array, y_pred: jax.Array, sample_weight: jax.Array,
                     thresholds: Sequence[float], *, top_k: int | None = None,
                     class_id: int | None = None, multi_label: bool = False,
                     label_weights: Any = None, evenly: bool | None = None
                     ) -> dict[str, jax.Array]:
    """Weighted true/false positive/negative counts at each threshold, as Keras.

    Args:
        y_true: ``[batch, ...]`` labels; non-zero is positive.
        y_pred: ``[batch, ...]`` scores (``[batch, num_labels]`` with ``multi_label``).
        sample_weight: float ``[batch]``; 0 on padding rows.
        thresholds: ``T`` thresholds.
        top_k, class_id: see the module docstring.
        multi_label: keep one count per label (last axis) instead of pooling all labels.
        label_weights: ``None`` or ``[num_labels]`` weights (pooled counts only).
        evenly: use the bucketed count; by default when the thresholds are evenly spaced.

    Returns:
        ``{"true_positives", "false_positives", "true_negatives", "false_negatives"}``,
        each float32 ``[T]`` (``[T, num_labels]`` with ``multi_label``).
    """
    y_true, y_pred = squeeze_or_expand_to_same_rank(jnp.asarray(y_true, jnp.float32),
                                                    jnp.asarray(y_pred, jnp.float32))
    if top_k is not None:
        y_pred = _filter_top_k(y_pred, top_k)
    if class_id is not None:
        y_true, y_pred = y_true[..., class_id, None], y_pred[..., class_id, None]
    weight = jnp.asarray(sample_weight, jnp.float32)
    weight = jnp.broadcast_to(weight.reshape(weight.shape + (1,) * (y_pred.ndim - 1)),
                              y_pred.shape)
    if label_weights is not None and not multi_label:
        weight = weight * jnp.asarray(label_weights, jnp.float32)
    shape = (-1, y_pred.shape[-1]) if multi_label else (-1,)
    labels = (y_true != 0).reshape(shape)
    y_pred, weight = y_pred.reshape(shape), weight.reshape(shape)
    thresholds = list(thresholds)
    if evenly is None:
        evenly = _evenly_spaced(thresholds)
    if evenly:
        with_epsilon = thresholds[0] < 0.0 or thresholds[-1] > 1.0
        tp = _bucket_counts(labels, weight, y_pred, len(thresholds), with_epsilon)
        fp = _bucket_counts(~labels, weight, y_pred, len(thresholds), with_epsilon)
    else:
        above = y_pred[None] > jnp.asarray(thresholds, jnp.float32).reshape(
            (-1,) + (1,) * y_pred.ndim)
        tp = jnp.sum(jnp.where(above & labels, weight, 0.0), axis=1)
        fp = jnp.sum(jnp.where(above & ~labels, weight, 0.0), axis=1)
    positives = jnp.sum(jnp.where(labels, weight, 0.0), axis=0)
    negatives = jnp.sum(jnp.where(labels, 0.0, weight), axis=0)
    return {"true_positives": tp, "false_positives": fp,
            "true_negatives": negatives - fp, "false_negatives": positives - tp}


class _ThresholdMetric(Metric):
    """Counts at ``thresholds`` (``top_k``, ``class_id``); subclasses pick what to keep."""

    kinds: tuple[str, ...] = ()

    def __init__(self, thresholds: Any, top_k: int | None, class_id: int | None,
                 name: str | None) -> None:
        super().__init__(name)
        self.init_thresholds = thresholds
        self.top_k = top_k
        self.class_id = class_id
        self.thresholds = _thresholds_list(thresholds, 0.5 if top_k is None else NEG_INF)

    def update(self, y_true: jax.Array, y_pred: jax.Array,
               sample_weight: jax.Array) -> dict[str, jax.Array]:
        """The counts in ``self.kinds``, each ``[num_thresholds]``."""
        counts = confusion_counts(y_true, y_pred, sample_weight, self.thresholds,
                                  top_k=self.top_k, class_id=self.class_id)
        return {kind: counts[kind] for kind in self.kinds}

    def _scalar_or_vector(self, values: Any) -> Any:
        return values[0] if len(self.thresholds) == 1 else values

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (``thresholds``, ``top_k``,
        ``class_id``, ``name``), from which `from_config` rebuilds the metric.
        """
        return {"thresholds": self.init_thresholds, "top_k": self.top_k,
                "class_id": self.class_id, "name": self.name}


class _Count(_ThresholdMetric):
    def __init__(self, thresholds: float | Sequence[float] | None = None,
                 name: str | None = None) -> None:
        super().__init__(thresholds, None, None, name)

    def result(self, stats: Any = None) -> Any:
        """The weighted count (one per threshold when there are several)."""
        return self._scalar_or_vector(stats[self.kinds[0]])

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (``thresholds``, ``name``), from
        which `from_config` rebuilds the metric.
        """
        return {"thresholds": self.init_thresholds, "name": self.name}


class TruePositives(_Count):
    """Weighted count of true positives at ``thresholds`` (default 0.5), as Keras."""

    kinds = ("true_positives",)


class FalsePositives(_Count):
    """Weighted count of false positives at ``thresholds`` (default 0.5), as Keras."""

    kinds = ("false_positives",)


class TrueNegatives(_Count):
    """Weighted count of true negatives at ``thresholds`` (default 0.5), as Keras."""

    kinds = ("true_negatives",)


class FalseNegatives(_Count):
    """Weighted count of false negatives at ``thresholds`` (default 0.5), as Keras."""

    kinds = ("false_negatives",)


class Precision(_ThresholdMetric):
    """``tp / (tp + fp)``, as ``keras.metrics.Precision``.

    Args:
        thresholds: a float or list of floats in ``[0, 1]``; default 0.5 (without
            ``top_k``). Several thresholds give one value per threshold.
        top_k: count only the ``k`` highest scores of each example as predicted positive.
        class_id: compute for this class (last axis) only.
        name: key in the logs.

    Example:
        >>> m = Precision()
        >>> m.update_state(np.array([0, 1, 1, 1]), np.array([0.9, 0.8, 0.3, 0.6]))
        >>> round(float(m.result()), 4)
        0.6667
    """

    kinds = ("true_positives", "false_positives")

    def __init__(self, thresholds: float | Sequence[float] | None = None,
                 top_k: int | None = None, class_id: int | None = None,
                 name: str | None = None) -> None:
        super().__init__(thresholds, top_k, class_id, name)

    def result(self, stats: Any = None) -> Any:
        """``tp / (tp + fp)`` per threshold (0 where nothing was predicted positive)."""
        tp = stats["true_positives"]
        return self._scalar_or_vector(divide_no_nan(tp, tp + stats["false_positives"]))


class Recall(_ThresholdMetric):
    """``tp / (tp + fn)``, as ``keras.metrics.Recall``; arguments as `Precision`."""

    kinds = ("true_positives", "false_negatives")

    def __init__(self, thresholds: float | Sequence[float] | None = None,
                 top_k: int | None = None, class_id: int | None = None,
                 name: str | None = None) -> None:
        super().__init__(thresholds, top_k, class_id, name)

    def result(self, stats: Any = None) -> Any:
        """``tp / (tp + fn)`` per threshold (0 where there was no positive label)."""
        tp = stats["true_positives"]
        return self._scalar_or_vector(divide_no_nan(tp, tp + stats["false_negatives"]))


_CURVES = {"roc": "ROC", "pr": "PR", "prgain": "PRGAIN"}
_SUMMATIONS = ("interpolation", "majoring", "minoring")


class AUC(Metric):
    """Area under the ROC or PR curve, as ``keras.metrics.AUC``.

    The curve is approximated from confusion counts at ``num_thresholds`` thresholds
    (``-EPSILON``, ``1/(n-1)``, ..., ``1 + EPSILON``) and summed as a Riemann sum. PR
    with ``"interpolation"`` uses Keras' (Davis & Goadrich) interpolation of precision.

    Args:
        num_thresholds: number of thresholds (> 1).
        curve: ``"ROC"``, ``"PR"`` or ``"PRGAIN"``.
        summation_method: ``"interpolation"``, ``"majoring"`` or ``"minoring"``.
        name: key in the logs.
        thresholds: explicit thresholds in ``[0, 1]`` instead of ``num_thresholds``.
        multi_label: one curve per label (last axis of ``[batch, num_labels]``), averaged;
            otherwise all labels are pooled.
        num_labels: the label count with ``multi_label`` (inferred from the data here).
        label_weights: ``[num_labels]`` weights of the labels.
        from_logits: apply a sigmoid to ``y_pred`` first.

    Raises:
        ValueError: for ``num_thresholds <= 1``, an unknown curve or summation method,
            or ``num_labels`` without ``multi_label``.

    Example:
        >>> m = AUC()
        >>> m.update_state(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]))
        >>> float(m.result())
        0.75
    """

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC",
                 summation_method: str = "interpolation", name: str | None = None,
                 thresholds: Sequence[float] | None = None, multi_label: bool = False,
                 num_labels: int | None = None, label_weights: Any = None,
                 from_logits: bool = False) -> None:
        super().__init__(name)
        if str(curve).lower() not in _CURVES:
            raise ValueError(f"curve must be one of {list(_CURVES.values())}. "
                             f"Received: curve={curve!r}")
        if str(summation_method).lower() not in _SUMMATIONS:
            raise ValueError(f"summation_method must be one of {list(_SUMMATIONS)}. "
                             f"Received: summation_method={summation_method!r}")
        if num_labels and not multi_label:
            raise ValueError("num_labels is needed only when multi_label=True. "
                             f"Received: num_labels={num_labels!r}")
        self._init_thresholds = thresholds
        if thresholds is not None:
            inner = sorted(_thresholds_list(list(thresholds), 0.5))
            self._evenly = _evenly_spaced([0.0] + inner + [1.0])
        else:
            if num_thresholds <= 1:
                raise ValueError("num_thresholds must be an integer > 1. "
                                 f"Received: num_thresholds={num_thresholds!r}")
            inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
            self._evenly = True
        self.thresholds = [0.0 - EPSILON] + inner + [1.0 + EPSILON]
        self.num_thresholds = len(self.thresholds)
        self.curve = _CURVES[str(curve).lower()]
        self.summation_method = str(summation_method).lower()
        self.multi_label = multi_label
        self.num_labels = num_labels
        self.label_weights = None if label_weights is None else np.asarray(label_weights,
                                                                             np.float32)
        self.from_logits = from_logits

    def update(self, y_true: jax.Array, y_pred: jax.Array,
               sample_weight: jax.Array) -> dict[str, jax.Array]:
        """The four counts, each ``[num_thresholds]`` (``[.., num_labels]`` multi-label)."""
        y_pred = jnp.asarray(y_pred, jnp.float32)
        if self.from_logits:
            y_pred = jax.nn.sigmoid(y_pred)
        if self.multi_label and y_pred.ndim != 2:
            raise ValueError("y_pred must have rank 2 ([batch, num_labels]) when "
                             f"multi_label=True. Received: y_pred.shape={y_pred.shape}")
        return confusion_counts(
            y_true, y_pred, sample_weight, self.thresholds, multi_label=self.multi_label,
            label_weights=None if self.multi_label else self.label_weights,
            evenly=self._evenly)

    def _average_labels(self, by_label: Any, xp: Any) -> Any:
        """Mean over labels (weighted by ``label_weights``) of per-label areas."""
        if self.label_weights is None:
            return xp.mean(by_label)
        return divide_no_nan(xp.sum(by_label * self.label_weights), xp.sum(self.label_weights))

    def _interpolated_pr_auc(self, stats: Any, xp: Any) -> Any:
        """Keras' ``interpolate_pr_auc``: precision interpolated linearly in ``tp``."""
        tp, fp, fn = stats["true_positives"], stats["false_positives"], stats["false_negatives"]
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = divide_no_nan(dtp, xp.maximum(dp, 0))
        intercept = tp[1:] - slope * p[1:]
        both = (p[:-1] > 0) & (p[1:] > 0)
        ratio = xp.where(both, divide_no_nan(p[:-1], xp.maximum(p[1:], 0)), xp.ones_like(p[1:]))
        increments = divide_no_nan(slope * (dtp + intercept * xp.log(ratio)),
                                   xp.maximum(tp[1:] + fn[1:], 0))
        if self.multi_label:
            return self._average_labels(xp.sum(increments, axis=0), xp)
        return xp.sum(increments)

    def result(self, stats: Any = None) -> Any:
        """The area, from the accumulated counts (formulas of ``keras.metrics.AUC.result``)."""
        xp = array_namespace(stats)
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self._interpolated_pr_auc(stats, xp)
        tp, fp = stats["true_positives"], stats["false_positives"]
        tn, fn = stats["true_negatives"], stats["false_negatives"]
        recall = divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = divide_no_nan(fp, fp + tn), recall
        elif self.curve == "PR":
            x, y = recall, divide_no_nan(tp, tp + fp)
        else:  # PRGAIN
            scale = divide_no_nan(tp + fn, tn + fp)
            recall_gain = xp.where(tp == 0, 0.0, 1.0 - scale * divide_no_nan(fn, tp))
            precision_gain = xp.where(tp == 0, 1.0, 1.0 - scale * divide_no_nan(fp, tp))
            x, y = xp.maximum(recall_gain, 0.0), precision_gain
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = xp.minimum(y[:-1], y[1:])
        else:
            heights = xp.maximum(y[:-1], y[1:])
        terms = (x[:-1] - x[1:]) * heights
        if self.multi_label:
            return self._average_labels(xp.sum(terms, axis=0), xp)
        return xp.sum(terms)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments, ``label_weights`` as a list, and
        ``thresholds`` when given, from which `from_config` rebuilds the metric.
        """
        config = {"num_thresholds": self.num_thresholds, "curve": self.curve,
                  "summation_method": self.summation_method, "name": self.name,
                  "multi_label": self.multi_label, "num_labels": self.num_labels,
                  "label_weights": None if self.label_weights is None
                  else self.label_weights.tolist(), "from_logits": self.from_logits}
        if self._init_thresholds is not None:
            config["thresholds"] = self.thresholds[1:-1]
        return config
