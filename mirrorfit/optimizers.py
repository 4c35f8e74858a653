"""Keras-named optax optimizers with Keras 3 defaults and options, e.g.
``mf.optimizers.Adam(1e-4, clipnorm=1.0, use_ema=True)``."""

from mirrorfit._src.optimizers.base import Optimizer as Optimizer
from mirrorfit._src.optimizers.base import OptimizerOptions as OptimizerOptions
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer as LossScaleOptimizer
from mirrorfit._src.optimizers.loss_scale import LossScaleState as LossScaleState
from mirrorfit._src.optimizers.optimizers import SGD as SGD
from mirrorfit._src.optimizers.optimizers import Adadelta as Adadelta
from mirrorfit._src.optimizers.optimizers import Adafactor as Adafactor
from mirrorfit._src.optimizers.optimizers import Adagrad as Adagrad
from mirrorfit._src.optimizers.optimizers import Adam as Adam
from mirrorfit._src.optimizers.optimizers import Adamax as Adamax
from mirrorfit._src.optimizers.optimizers import AdamW as AdamW
from mirrorfit._src.optimizers.optimizers import Ftrl as Ftrl
from mirrorfit._src.optimizers.optimizers import Lamb as Lamb
from mirrorfit._src.optimizers.optimizers import Lion as Lion
from mirrorfit._src.optimizers.optimizers import Nadam as Nadam
from mirrorfit._src.optimizers.optimizers import RMSprop as RMSprop
from mirrorfit._src.optimizers.optimizers import deserialize as deserialize
from mirrorfit._src.optimizers.optimizers import get as get
from mirrorfit._src.optimizers.optimizers import serialize as serialize
from mirrorfit._src.optimizers.options import ema_params as ema_params
from mirrorfit._src.optimizers.options import (
    finalize_variable_values as finalize_variable_values,
)

__all__ = [
    "SGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Ftrl",
    "Lamb",
    "Lion",
    "LossScaleOptimizer",
    "LossScaleState",
    "Nadam",
    "Optimizer",
    "OptimizerOptions",
    "RMSprop",
    "deserialize",
    "ema_params",
    "finalize_variable_values",
    "get",
    "serialize",
]
