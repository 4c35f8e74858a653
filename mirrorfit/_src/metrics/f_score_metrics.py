"""Keras' ``FBetaScore`` and ``F1Score`` from per-class weighted counts.

Statistics: weighted true positives, false positives, false negatives and label totals, per
class (or pooled for ``average="micro"``), as ``keras/src/metrics/f_score_metrics.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mirrorfit._src.losses.loss import EPSILON
from mirrorfit._src.metrics.metric import Metric, array_namespace, weighted_sum

_AVERAGES = (None, "micro", "macro", "weighted")


class FBetaScore(Metric):
    """The F-beta score ``(1 + b^2) p r / (b^2 p + r)``, as ``keras.metrics.FBetaScore``.

    Inputs are ``[batch, num_classes]`` (one-hot or multi-label) labels and scores.
    Without ``threshold`` the highest score of each example is the prediction; with it,
    every score above it is.

    Args:
        average: ``None`` (one score per class), ``"micro"`` (pooled counts), ``"macro"``
            (mean of the class scores) or ``"weighted"`` (weighted by label counts).
        beta: a positive float; recall is ``beta`` times as important as precision.
        threshold: ``None`` or a float in ``(0, 1]``.
        name: key in the logs.

    Raises:
        ValueError: for a bad ``average``, ``beta`` or ``threshold``, and (when updated)
            for inputs that are not ``[batch, num_classes]``.

    Example:
        >>> import numpy as np
        >>> m = FBetaScore(average="macro", beta=1.0)
        >>> scores = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.6, 0.3, 0.1],
        ...                    [0.1, 0.1, 0.8]])
        >>> m.update_state(np.eye(3)[[0, 1, 2, 2]], scores)
        >>> round(float(m.result()), 4)
        0.7778
    """

    def __init__(self, average: str | None = None, beta: float = 1.0,
                 threshold: float | None = None, name: str = "fbeta_score") -> None:
        super().__init__(name)
        if average not in _AVERAGES:
            raise ValueError(f"average must be one of {list(_AVERAGES)}. "
                             f"Received: average={average!r}")
        if not isinstance(beta, float) or beta <= 0.0:
            raise ValueError(f"beta must be a Python float > 0. Received: beta={beta!r}")
        if threshold is not None and (not isinstance(threshold, float)
                                      or not 0.0 < threshold <= 1.0):
            raise ValueError("threshold must be None or a Python float with 0 < threshold "
                             f"<= 1. Received: threshold={threshold!r}")
        self.average = average
        self.beta = beta
        self.threshold = threshold

    def update(self, y_true: jax.Array, y_pred: jax.Array,
               sample_weight: jax.Array) -> dict[str, jax.Array]:
        """Weighted counts, each ``[num_classes]`` (scalars for ``"micro"``)."""
        y_true = jnp.asarray(y_true, jnp.float32)
        y_pred = jnp.asarray(y_pred, jnp.float32)
        if y_true.ndim != 2 or y_pred.ndim != 2:
            raise ValueError(f"{type(self).__name__} expects 2D inputs [batch, num_classes]. "
                             f"Received: y_true.shape={y_true.shape}, "
                             f"y_pred.shape={y_pred.shape}")
        if self.threshold is None:
            top = jnp.max(y_pred, axis=-1, keepdims=True)
            predicted = (y_pred >= top) & (jnp.abs(y_pred) > 1e-9)
        else:
            predicted = y_pred > self.threshold
        predicted = predicted.astype(jnp.float32)
        axis = None if self.average == "micro" else 0
        weight = jnp.asarray(sample_weight, jnp.float32)
        return {
            "true_positives": weighted_sum(predicted * y_true, weight, axis),
            "false_positives": weighted_sum(predicted * (1.0 - y_true), weight, axis),
            "false_negatives": weighted_sum((1.0 - predicted) * y_true, weight, axis),
            "intermediate_weights": weighted_sum(y_true, weight, axis),
        }

    def result(self, stats: Any = None) -> Any:
        """The score(s), with Keras' epsilons in every division."""
        xp = array_namespace(stats)
        tp = stats["true_positives"]
        precision = tp / (tp + stats["false_positives"] + EPSILON)
        recall = tp / (tp + stats["false_negatives"] + EPSILON)
        beta2 = self.beta**2
        score = (1 + beta2) * precision * recall / (beta2 * precision + recall + EPSILON)
        if self.average == "weighted":
            weights = stats["intermediate_weights"]
            return xp.sum(score * weights / (xp.sum(weights) + EPSILON))
        if self.average is not None:
            return xp.mean(score)
        return score

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (``average``, ``beta``,
        ``threshold``, ``name``), from which `from_config` rebuilds the metric.
        """
        return {"average": self.average, "beta": self.beta, "threshold": self.threshold,
                "name": self.name}


class F1Score(FBetaScore):
    """`FBetaScore` with ``beta=1.0``, as ``keras.metrics.F1Score``."""

    def __init__(self, average: str | None = None, threshold: float | None = None,
                 name: str = "f1_score") -> None:
        super().__init__(average=average, beta=1.0, threshold=threshold, name=name)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the constructor's arguments (`FBetaScore`'s but ``beta``, which
        is 1), from which `from_config` rebuilds the metric.
        """
        config = super().get_config()
        del config["beta"]
        return config
