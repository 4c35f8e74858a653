"""mirrorfit: tf.keras ``compile``/``fit``/``evaluate``/``predict`` with ``MirroredStrategy``
semantics on JAX, Flax and Optax.

Layers, top to bottom: `Model` (the facade) -> trainer (loops, callbacks, progress) ->
per-replica steps -> `MirroredStrategy` (devices, mesh, placement, collectives).
"""

from mirrorfit import callbacks as callbacks
from mirrorfit import losses as losses
from mirrorfit import metrics as metrics
from mirrorfit import optimizers as optimizers
from mirrorfit import utils as utils
from mirrorfit._src.callbacks import History as History
from mirrorfit._src.model import Model as Model
from mirrorfit._src.model import Sequential as Sequential
from mirrorfit._src.strategy import MirroredStrategy as MirroredStrategy
from mirrorfit._src.strategy import get_strategy as get_strategy

__version__ = "0.1.0"

__all__ = [
    "History",
    "MirroredStrategy",
    "Model",
    "Sequential",
    "callbacks",
    "get_strategy",
    "losses",
    "metrics",
    "optimizers",
    "utils",
]
