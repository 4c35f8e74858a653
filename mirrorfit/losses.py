"""Keras-named losses: ``mf.losses.SparseCategoricalCrossentropy(from_logits=True)``, ``get``."""

from mirrorfit._src.losses import BinaryCrossentropy as BinaryCrossentropy
from mirrorfit._src.losses import CategoricalCrossentropy as CategoricalCrossentropy
from mirrorfit._src.losses import Loss as Loss
from mirrorfit._src.losses import MeanAbsoluteError as MeanAbsoluteError
from mirrorfit._src.losses import MeanSquaredError as MeanSquaredError
from mirrorfit._src.losses import NOT_PROBABILITIES_WARNING as NOT_PROBABILITIES_WARNING
from mirrorfit._src.losses import SparseCategoricalCrossentropy as SparseCategoricalCrossentropy
from mirrorfit._src.losses import get as get

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Loss",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "NOT_PROBABILITIES_WARNING",
    "SparseCategoricalCrossentropy",
    "get",
]
