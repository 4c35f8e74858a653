"""Activation functions, as ``keras.activations``: the same names, arguments and defaults,
on ``jax.nn`` (``Dense(4, activation=mf.activations.gelu)`` or ``activation="gelu"``)."""

from mirrorfit._src.activations.activations import celu as celu
from mirrorfit._src.activations.activations import deserialize as deserialize
from mirrorfit._src.activations.activations import elu as elu
from mirrorfit._src.activations.activations import exponential as exponential
from mirrorfit._src.activations.activations import gelu as gelu
from mirrorfit._src.activations.activations import get as get
from mirrorfit._src.activations.activations import glu as glu
from mirrorfit._src.activations.activations import hard_shrink as hard_shrink
from mirrorfit._src.activations.activations import hard_sigmoid as hard_sigmoid
from mirrorfit._src.activations.activations import hard_silu as hard_silu
from mirrorfit._src.activations.activations import hard_tanh as hard_tanh
from mirrorfit._src.activations.activations import leaky_relu as leaky_relu
from mirrorfit._src.activations.activations import linear as linear
from mirrorfit._src.activations.activations import log_sigmoid as log_sigmoid
from mirrorfit._src.activations.activations import log_softmax as log_softmax
from mirrorfit._src.activations.activations import mish as mish
from mirrorfit._src.activations.activations import relu as relu
from mirrorfit._src.activations.activations import relu6 as relu6
from mirrorfit._src.activations.activations import selu as selu
from mirrorfit._src.activations.activations import serialize as serialize
from mirrorfit._src.activations.activations import sigmoid as sigmoid
from mirrorfit._src.activations.activations import silu as silu
from mirrorfit._src.activations.activations import soft_shrink as soft_shrink
from mirrorfit._src.activations.activations import softmax as softmax
from mirrorfit._src.activations.activations import softplus as softplus
from mirrorfit._src.activations.activations import softsign as softsign
from mirrorfit._src.activations.activations import sparse_plus as sparse_plus
from mirrorfit._src.activations.activations import sparse_sigmoid as sparse_sigmoid
from mirrorfit._src.activations.activations import squareplus as squareplus
from mirrorfit._src.activations.activations import tanh as tanh
from mirrorfit._src.activations.activations import tanh_shrink as tanh_shrink
from mirrorfit._src.activations.activations import threshold as threshold

# Keras' second names of two functions.
hard_swish = hard_silu
"""Keras' other name of `hard_silu` (``keras.activations.hard_swish``)."""
swish = silu
"""Keras' other name of `silu` (``keras.activations.swish``)."""

__all__ = ["celu", "deserialize", "elu", "exponential", "gelu", "get", "glu", "hard_shrink",
           "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh", "leaky_relu", "linear",
           "log_sigmoid", "log_softmax", "mish", "relu", "relu6", "selu", "serialize", "sigmoid",
           "silu", "soft_shrink", "softmax", "softplus", "softsign", "sparse_plus",
           "sparse_sigmoid", "squareplus", "swish", "tanh", "tanh_shrink", "threshold"]
