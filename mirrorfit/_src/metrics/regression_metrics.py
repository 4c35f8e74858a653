"""Keras' regression, probabilistic and hinge metrics: weighted means of loss functions.

As ``keras/src/metrics/{regression,probabilistic,hinge}_metrics.py``: each metric is the
weighted mean over examples of the loss function of the same name (see `regression_losses`
and `crossentropy_losses`), except `RootMeanSquaredError` (the square root of that mean)
and `CosineSimilarity` (the similarity, not its negative).
"""

from __future__ import annotations

from typing import Any

import jax

from mirrorfit._src.losses import crossentropy_losses as ce
from mirrorfit._src.losses import regression_losses as rl
from mirrorfit._src.metrics.reduction_metrics import MeanMetricWrapper


class MeanSquaredError(MeanMetricWrapper):
    """Weighted mean of `mean_squared_error` per example (``keras.metrics.MeanSquaredError``)."""

    def __init__(self, name: str = "mean_squared_error") -> None:
        super().__init__(rl.mean_squared_error, name)


class RootMeanSquaredError(MeanMetricWrapper):
    """``sqrt`` of the weighted mean squared error, as ``keras.metrics.RootMeanSquaredError``.

    The statistics are those of `MeanSquaredError`; the root is taken of the accumulated
    mean, so it is exact across replicas and batches.
    """

    def __init__(self, name: str = "root_mean_squared_error") -> None:
        super().__init__(rl.mean_squared_error, name)

    def result(self, stats: Any = None) -> Any:
        """``sqrt(total / count)`` (0 without examples)."""
        mean = super().result(stats)
        return mean ** 0.5


class MeanAbsoluteError(MeanMetricWrapper):
    """Weighted mean of `mean_absolute_error` per example."""

    def __init__(self, name: str = "mean_absolute_error") -> None:
        super().__init__(rl.mean_absolute_error, name)


class MeanAbsolutePercentageError(MeanMetricWrapper):
    """Weighted mean of `mean_absolute_percentage_error` per example (in percent)."""

    def __init__(self, name: str = "mean_absolute_percentage_error") -> None:
        super().__init__(rl.mean_absolute_percentage_error, name)


class MeanSquaredLogarithmicError(MeanMetricWrapper):
    """Weighted mean of `mean_squared_logarithmic_error` per example."""

    def __init__(self, name: str = "mean_squared_logarithmic_error") -> None:
        super().__init__(rl.mean_squared_logarithmic_error, name)


def cosine_similarity(y_true: jax.Array, y_pred: jax.Array, axis: int = -1) -> jax.Array:
    """Keras' metric ``cosine_similarity``: ``sum(normalize(y_true) * normalize(y_pred), axis)``."""
    return -rl.cosine_similarity(y_true, y_pred, axis=axis)


class CosineSimilarity(MeanMetricWrapper):
    """Weighted mean cosine similarity of ``y_true`` and ``y_pred`` along ``axis``, as Keras."""

    def __init__(self, name: str = "cosine_similarity", axis: int = -1) -> None:
        super().__init__(cosine_similarity, name, axis=axis)


class LogCoshError(MeanMetricWrapper):
    """Weighted mean of `log_cosh` per example (``keras.metrics.LogCoshError``)."""

    def __init__(self, name: str = "logcosh") -> None:
        super().__init__(rl.log_cosh, name)


class KLDivergence(MeanMetricWrapper):
    """Weighted mean of `kl_divergence` per example."""

    def __init__(self, name: str = "kl_divergence") -> None:
        super().__init__(rl.kl_divergence, name)


class Poisson(MeanMetricWrapper):
    """Weighted mean of `poisson` per example."""

    def __init__(self, name: str = "poisson") -> None:
        super().__init__(rl.poisson, name)


class Hinge(MeanMetricWrapper):
    """Weighted mean of `hinge` per example."""

    def __init__(self, name: str = "hinge") -> None:
        super().__init__(rl.hinge, name)


class SquaredHinge(MeanMetricWrapper):
    """Weighted mean of `squared_hinge` per example."""

    def __init__(self, name: str = "squared_hinge") -> None:
        super().__init__(rl.squared_hinge, name)


class CategoricalHinge(MeanMetricWrapper):
    """Weighted mean of `categorical_hinge` per example."""

    def __init__(self, name: str = "categorical_hinge") -> None:
        super().__init__(rl.categorical_hinge, name)


class BinaryCrossentropy(MeanMetricWrapper):
    """Weighted mean of `binary_crossentropy` per example, as Keras' metric."""

    def __init__(self, name: str = "binary_crossentropy", from_logits: bool = False,
                 label_smoothing: float = 0.0) -> None:
        super().__init__(ce.binary_crossentropy, name, from_logits=from_logits,
                         label_smoothing=label_smoothing)


class CategoricalCrossentropy(MeanMetricWrapper):
    """Weighted mean of `categorical_crossentropy` per example, as Keras' metric."""

    def __init__(self, name: str = "categorical_crossentropy", from_logits: bool = False,
                 label_smoothing: float = 0.0, axis: int = -1) -> None:
        super().__init__(ce.categorical_crossentropy, name, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class SparseCategoricalCrossentropy(MeanMetricWrapper):
    """Weighted mean of `sparse_categorical_crossentropy` per example, as Keras' metric."""

    def __init__(self, name: str = "sparse_categorical_crossentropy",
                 from_logits: bool = False, axis: int = -1) -> None:
        super().__init__(ce.sparse_categorical_crossentropy, name, from_logits=from_logits,
                         axis=axis)
