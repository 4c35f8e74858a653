"""Keras' losses: ``mf.losses.Huber(delta=2.0)``, ``mf.losses.huber(y_true, y_pred)``, ``get``."""

from mirrorfit._src.losses.crossentropy_losses import (
    NOT_PROBABILITIES_WARNING as NOT_PROBABILITIES_WARNING,
)
from mirrorfit._src.losses.crossentropy_losses import BinaryCrossentropy as BinaryCrossentropy
from mirrorfit._src.losses.crossentropy_losses import (
    BinaryFocalCrossentropy as BinaryFocalCrossentropy,
)
from mirrorfit._src.losses.crossentropy_losses import (
    CategoricalCrossentropy as CategoricalCrossentropy,
)
from mirrorfit._src.losses.crossentropy_losses import (
    CategoricalFocalCrossentropy as CategoricalFocalCrossentropy,
)
from mirrorfit._src.losses.crossentropy_losses import InferredCrossentropy as InferredCrossentropy
from mirrorfit._src.losses.crossentropy_losses import (
    SparseCategoricalCrossentropy as SparseCategoricalCrossentropy,
)
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
from mirrorfit._src.losses.loss import Loss as Loss
from mirrorfit._src.losses.loss import LossFunctionWrapper as LossFunctionWrapper
from mirrorfit._src.losses.loss import PerExampleLoss as PerExampleLoss
from mirrorfit._src.losses.loss import Reduction as Reduction
from mirrorfit._src.losses.losses import deserialize as deserialize
from mirrorfit._src.losses.losses import get as get
from mirrorfit._src.losses.losses import serialize as serialize
from mirrorfit._src.losses.regression_losses import CategoricalHinge as CategoricalHinge
from mirrorfit._src.losses.regression_losses import CosineSimilarity as CosineSimilarity
from mirrorfit._src.losses.regression_losses import Hinge as Hinge
from mirrorfit._src.losses.regression_losses import Huber as Huber
from mirrorfit._src.losses.regression_losses import KLDivergence as KLDivergence
from mirrorfit._src.losses.regression_losses import LogCosh as LogCosh
from mirrorfit._src.losses.regression_losses import MeanAbsoluteError as MeanAbsoluteError
from mirrorfit._src.losses.regression_losses import (
    MeanAbsolutePercentageError as MeanAbsolutePercentageError,
)
from mirrorfit._src.losses.regression_losses import MeanSquaredError as MeanSquaredError
from mirrorfit._src.losses.regression_losses import (
    MeanSquaredLogarithmicError as MeanSquaredLogarithmicError,
)
from mirrorfit._src.losses.regression_losses import Poisson as Poisson
from mirrorfit._src.losses.regression_losses import SquaredHinge as SquaredHinge
from mirrorfit._src.losses.regression_losses import categorical_hinge as categorical_hinge
from mirrorfit._src.losses.regression_losses import cosine_similarity as cosine_similarity
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

__all__ = [
    "NOT_PROBABILITIES_WARNING",
    "BinaryCrossentropy",
    "BinaryFocalCrossentropy",
    "CategoricalCrossentropy",
    "CategoricalFocalCrossentropy",
    "CategoricalHinge",
    "CosineSimilarity",
    "Hinge",
    "Huber",
    "InferredCrossentropy",
    "KLDivergence",
    "LogCosh",
    "Loss",
    "LossFunctionWrapper",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanSquaredError",
    "MeanSquaredLogarithmicError",
    "PerExampleLoss",
    "Poisson",
    "Reduction",
    "SparseCategoricalCrossentropy",
    "SquaredHinge",
    "binary_crossentropy",
    "binary_focal_crossentropy",
    "categorical_crossentropy",
    "categorical_focal_crossentropy",
    "categorical_hinge",
    "cosine_similarity",
    "deserialize",
    "get",
    "hinge",
    "huber",
    "kl_divergence",
    "log_cosh",
    "mean_absolute_error",
    "mean_absolute_percentage_error",
    "mean_squared_error",
    "mean_squared_logarithmic_error",
    "poisson",
    "serialize",
    "sparse_categorical_crossentropy",
    "squared_hinge",
]
