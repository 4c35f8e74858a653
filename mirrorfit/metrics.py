"""Keras-named metrics and the ``Metric`` interface for your own: ``mf.metrics.get("accuracy")``."""

from mirrorfit._src.metrics import Accuracy as Accuracy
from mirrorfit._src.metrics import BinaryAccuracy as BinaryAccuracy
from mirrorfit._src.metrics import CategoricalAccuracy as CategoricalAccuracy
from mirrorfit._src.metrics import MeanAbsoluteError as MeanAbsoluteError
from mirrorfit._src.metrics import MeanMetricWrapper as MeanMetricWrapper
from mirrorfit._src.metrics import MeanSquaredError as MeanSquaredError
from mirrorfit._src.metrics import Metric as Metric
from mirrorfit._src.metrics import SparseCategoricalAccuracy as SparseCategoricalAccuracy
from mirrorfit._src.metrics import divide_no_nan as divide_no_nan
from mirrorfit._src.metrics import get as get

__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "MeanAbsoluteError",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "SparseCategoricalAccuracy",
    "divide_no_nan",
    "get",
]
