"""Keras' metrics and the ``Metric`` interface for your own: ``mf.metrics.AUC()``, ``get``."""

# Keras 3's keras.metrics also names the losses' functions (per-example values [batch]).
from mirrorfit._src.losses.crossentropy_losses import binary_crossentropy as binary_crossentropy
from mirrorfit._src.losses.crossentropy_losses import (
    binary_focal_crossentropy as binary_focal_crossentropy,
)
from mirrorfit._src.losses.crossentropy_losses import (
    categorical_crossentropy as categorical_crossentropy,
)
from mirrorfit._src.losses.crossentropy_losses import (
    categorical_focal_crossentropy as categorical_focal_crossentropy,
)
from mirrorfit._src.losses.crossentropy_losses import (
    sparse_categorical_crossentropy as sparse_categorical_crossentropy,
)
from mirrorfit._src.losses.regression_losses import categorical_hinge as categorical_hinge
from mirrorfit._src.losses.regression_losses import hinge as hinge
from mirrorfit._src.losses.regression_losses import huber as huber
from mirrorfit._src.losses.regression_losses import kl_divergence as kl_divergence
from mirrorfit._src.losses.regression_losses import log_cosh as log_cosh
from mirrorfit._src.losses.regression_losses import mean_absolute_error as mean_absolute_error
from mirrorfit._src.losses.regression_losses import (
    mean_absolute_percentage_error as mean_absolute_percentage_error,
)
from mirrorfit._src.losses.regression_losses import mean_squared_error as mean_squared_error
from mirrorfit._src.losses.regression_losses import (
    mean_squared_logarithmic_error as mean_squared_logarithmic_error,
)
from mirrorfit._src.losses.regression_losses import poisson as poisson
from mirrorfit._src.losses.regression_losses import squared_hinge as squared_hinge
from mirrorfit._src.metrics.accuracy_metrics import Accuracy as Accuracy
from mirrorfit._src.metrics.accuracy_metrics import BinaryAccuracy as BinaryAccuracy
from mirrorfit._src.metrics.accuracy_metrics import CategoricalAccuracy as CategoricalAccuracy
from mirrorfit._src.metrics.accuracy_metrics import InferredAccuracy as InferredAccuracy
from mirrorfit._src.metrics.accuracy_metrics import (
    SparseCategoricalAccuracy as SparseCategoricalAccuracy,
)
from mirrorfit._src.metrics.accuracy_metrics import (
    SparseTopKCategoricalAccuracy as SparseTopKCategoricalAccuracy,
)
from mirrorfit._src.metrics.accuracy_metrics import (
    TopKCategoricalAccuracy as TopKCategoricalAccuracy,
)
from mirrorfit._src.metrics.confusion_metrics import AUC as AUC
from mirrorfit._src.metrics.confusion_metrics import FalseNegatives as FalseNegatives
from mirrorfit._src.metrics.confusion_metrics import FalsePositives as FalsePositives
from mirrorfit._src.metrics.confusion_metrics import Precision as Precision
from mirrorfit._src.metrics.confusion_metrics import Recall as Recall
from mirrorfit._src.metrics.confusion_metrics import TrueNegatives as TrueNegatives
from mirrorfit._src.metrics.confusion_metrics import TruePositives as TruePositives
from mirrorfit._src.metrics.f_score_metrics import F1Score as F1Score
from mirrorfit._src.metrics.f_score_metrics import FBetaScore as FBetaScore
from mirrorfit._src.metrics.iou_metrics import IoU as IoU
from mirrorfit._src.metrics.iou_metrics import MeanIoU as MeanIoU
from mirrorfit._src.metrics.iou_metrics import OneHotIoU as OneHotIoU
from mirrorfit._src.metrics.iou_metrics import OneHotMeanIoU as OneHotMeanIoU
from mirrorfit._src.metrics.metric import Metric as Metric
from mirrorfit._src.metrics.metric import divide_no_nan as divide_no_nan
from mirrorfit._src.metrics.metrics import deserialize as deserialize
from mirrorfit._src.metrics.metrics import get as get
from mirrorfit._src.metrics.metrics import serialize as serialize
from mirrorfit._src.metrics.reduction_metrics import Mean as Mean
from mirrorfit._src.metrics.reduction_metrics import MeanMetricWrapper as MeanMetricWrapper
from mirrorfit._src.metrics.reduction_metrics import Sum as Sum
from mirrorfit._src.metrics.regression_metrics import BinaryCrossentropy as BinaryCrossentropy
from mirrorfit._src.metrics.regression_metrics import (
    CategoricalCrossentropy as CategoricalCrossentropy,
)
from mirrorfit._src.metrics.regression_metrics import CategoricalHinge as CategoricalHinge
from mirrorfit._src.metrics.regression_metrics import CosineSimilarity as CosineSimilarity
from mirrorfit._src.metrics.regression_metrics import Hinge as Hinge
from mirrorfit._src.metrics.regression_metrics import KLDivergence as KLDivergence
from mirrorfit._src.metrics.regression_metrics import LogCoshError as LogCoshError
from mirrorfit._src.metrics.regression_metrics import MeanAbsoluteError as MeanAbsoluteError
from mirrorfit._src.metrics.regression_metrics import (
    MeanAbsolutePercentageError as MeanAbsolutePercentageError,
)
from mirrorfit._src.metrics.regression_metrics import MeanSquaredError as MeanSquaredError
from mirrorfit._src.metrics.regression_metrics import (
    MeanSquaredLogarithmicError as MeanSquaredLogarithmicError,
)
from mirrorfit._src.metrics.regression_metrics import Poisson as Poisson
from mirrorfit._src.metrics.regression_metrics import RootMeanSquaredError as RootMeanSquaredError
from mirrorfit._src.metrics.regression_metrics import (
    SparseCategoricalCrossentropy as SparseCategoricalCrossentropy,
)
from mirrorfit._src.metrics.regression_metrics import SquaredHinge as SquaredHinge

__all__ = [
    "AUC", "Accuracy", "BinaryAccuracy", "BinaryCrossentropy", "CategoricalAccuracy",
    "CategoricalCrossentropy", "CategoricalHinge", "CosineSimilarity", "F1Score", "FBetaScore",
    "FalseNegatives", "FalsePositives", "Hinge", "InferredAccuracy", "IoU", "KLDivergence",
    "LogCoshError", "Mean", "MeanAbsoluteError", "MeanAbsolutePercentageError", "MeanIoU",
    "MeanMetricWrapper", "MeanSquaredError", "MeanSquaredLogarithmicError", "Metric", "OneHotIoU",
    "OneHotMeanIoU", "Poisson", "Precision", "Recall", "RootMeanSquaredError",
    "SparseCategoricalAccuracy", "SparseCategoricalCrossentropy", "SparseTopKCategoricalAccuracy",
    "SquaredHinge", "Sum", "TopKCategoricalAccuracy", "TrueNegatives", "TruePositives",
    "binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy",
    "categorical_focal_crossentropy", "categorical_hinge", "deserialize", "divide_no_nan", "get",
    "hinge", "huber", "kl_divergence", "log_cosh", "mean_absolute_error",
    "mean_absolute_percentage_error", "mean_squared_error", "mean_squared_logarithmic_error",
    "poisson", "serialize", "sparse_categorical_crossentropy", "squared_hinge",
]
