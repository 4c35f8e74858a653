"""Keras-named optax optimizers with Keras 3 defaults, e.g. ``mf.optimizers.Adam(1e-4)``."""

from mirrorfit._src.optimizers import SGD as SGD
from mirrorfit._src.optimizers import Adam as Adam
from mirrorfit._src.optimizers import AdamW as AdamW
from mirrorfit._src.optimizers import RMSprop as RMSprop
from mirrorfit._src.optimizers import get as get

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "get"]
